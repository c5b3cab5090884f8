#!/usr/bin/env bash
# One call on a lent GPU (the device tool): install, GPU tests and benchmarks, everything under $OUT. On a host of
# several GPUs two sessions may run side by side, each with its own OUT and CUDA_VISIBLE_DEVICES:
#   OUT=$OUT/a CUDA_VISIBLE_DEVICES=0,1 bash scripts/gpu_session.sh multi & OUT=$OUT/b CUDA_VISIBLE_DEVICES=2,3 ... & wait
#   bash scripts/gpu_session.sh STAGE...     stages: env tests testfiles ceilings run fidelity suites models overhead lab
#                                            advise advise2 steptiming report multi (2 GPUs: comm, ddp, multitests, each
#                                            a stage of its own too) ttt
#                                            (run: `tcperf run` on a fresh store of its own, cold when it comes first)
#                                            smoke (two advise runs through the CLI) generate
#                                            workload (its GPU tests, the speed of light, advise on a BERT stream)
#                                            wlbench (benchmarks/workload_gpu.py: hand loops and advise, WL_ARGS)
#                                            wlcards (the same, WL_STREAMS one a card side by side, WL_STATE)
#                                            gemv (benchmarks/gemv_gpu.py: the weight-only kernels side by side)
#                                            strategy (benchmarks/strategy_gpu.py: advise --nproc against plain loops
#                                            of every option, STRATEGY_ARGS)
#                                            commprobe (benchmarks/comm_pin_probe.py: small all-reduces with the
#                                            ranks free, pinned near their GPU and pinned far from it)
#                                            bandwidth (benchmarks/inductor_bandwidth.py: Inductor's kernels of a
#                                            compiled training step against the copy bandwidth, BW_ARGS)
#                                            maxpool (benchmarks/maxpool_probe.py: ResNet-50's stem pooling, 3 ways)
#                                            bnrelu (benchmarks/bn_relu_probe.py: one batch norm -> ReLU, Inductor's
#                                            and tcperf's, with the kernels each launched)
#                                            wladvise (`time tcperf advise` on each of WL_TARGETS at --steps WL_STEPS,
#                                            a fresh store each: the workload stage's time, issue 32)
#                                            cpusuite (every test file with the GPU hidden, in shards side by side)
#                                            cputests (CPU tests, CPU_TESTS, on this machine's torch with the GPU
#                                            hidden: the torch the README's set-up installs is newer, and torch 2.11
#                                            alone dropped the fused batch norms' compiled backward)
# Each stage's output goes to $OUT/logs/STAGE.log; the store is $OUT/tcperf.db; all of it is packed into
# $OUT/session.tar.gz at the end (the device tool brings back few files).
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/logs" "$OUT/files"
# tcperf is not pip-installed on the GPU machine: the checkout on PYTHONPATH, set once here, serves every stage
# (python3 -m tcperf, the tests, benchmarks/*.py; a benchmark finds its siblings in its own folder)
export PYTHONUNBUFFERED=1 TCPERF_DB="$OUT/tcperf.db" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export MPLBACKEND=Agg
# Wheels carried in .whl/ (the device tool's `carry`), installed beside the image's packages as the device README
# says: torchao for fp8 training, and the store's sqlalchemy, alembic and mako in case the image lacks them
# (pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl ...).
# Installed once a machine for the wheels carried: two sessions started side by side (each on its own GPUs, with its
# own OUT) take turns at the lock, and the second finds the stamp of the first.
install_wheels() {
    local stamp="/tmp/site/.installed-$(ls .whl | md5sum | cut -c1-12)"
    [ -e "$stamp" ] && return 0
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && touch "$stamp"
}
if ls .whl/*.whl >/dev/null 2>&1; then
    mkdir -p /tmp/site
    if command -v flock >/dev/null 2>&1; then
        ( flock 9 && install_wheels ) 9>/tmp/site.lock
    else
        install_wheels
    fi && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
tc() { python3 -m tcperf "$@"; }

stage() {   # stage NAME TIMEOUT COMMAND...: run, log, time, never stop the session
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    echo "=== $name: $* ($(date -u +%FT%TZ))" | tee -a "$OUT/logs/summary.log"
    timeout "$limit" "$@" > "$OUT/logs/$name.log" 2>&1
    local rc=$?
    echo "=== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$OUT/logs/summary.log"
    tail -n 25 "$OUT/logs/$name.log"
}

set -- $(printf '%s\n' "$@" | sed 's/^multi$/comm ddp multitests/')       # multi: the three 2-GPU stages
for s in "$@"; do
    case $s in
        env)      stage env 120 bash -c "nvidia-smi; python3 -c 'import torch,triton;print(torch.__version__,triton.__version__)'; python3 -m tcperf env; python3 -m tcperf env --json" ;;
        tests)    stage tests ${TESTS_LIMIT:-420} python3 -m pytest -m gpu -v -p no:cacheprovider -rfEs --timeout ${TEST_TIMEOUT:-150} --durations 15 --tb=short ${TESTS:-} ;;
        cputests) stage cputests ${CPU_TESTS_LIMIT:-300} env CUDA_VISIBLE_DEVICES= python3 -m pytest -q -p no:cacheprovider -rfEs \
                      --tb=short ${CPU_TESTS:-tests/test_batchnorm.py tests/test_maxpool.py} ;;
        cpusuite) # the README's test command on this machine's CPU, its GPU hidden, in shards side by side: each of
                  # CPU_SHARDS (default cores / 4) a group of files of about equal time (scripts/test_shards.py),
                  # pinned to its share of the cores
                  n=${CPU_SHARDS:-$(( $(nproc) / 4 ))}; per=$(( $(nproc) / n )); i=0
                  while read -r files; do
                      stage "cpusuite-$i" ${CPU_SUITE_LIMIT:-480} env CUDA_VISIBLE_DEVICES= taskset -c $(( i * per ))-$(( i * per + per - 1 )) \
                          python3 -m pytest -q -p no:cacheprovider -rfE --tb=short $files &
                      i=$(( i + 1 ))
                  done < <(python3 scripts/test_shards.py "$n"); wait
                  grep -h -E "^(FAILED|ERROR)|passed|failed" "$OUT"/logs/cpusuite-*.log ;;
        testfiles) for f in ${TESTS:-$(grep -l "mark.gpu" tests/test_*.py)}; do   # one pytest a file: a hang or the
                  stage "tests-$(basename "$f" .py)" ${FILE_LIMIT:-150} python3 -m pytest -m gpu -v -p no:cacheprovider \
                      -rs --timeout ${TEST_TIMEOUT:-120} --tb=short "$f"              # limit costs that file alone
                  done ;;
        run)      stage run ${RUN_LIMIT:-240} bash -c "time COLUMNS=120 python3 -m tcperf run --db \"$OUT/run-fresh.db\" --verbose" ;;
        fidelity) stage fidelity ${FIDELITY_LIMIT:-300} python3 benchmarks/fidelity.py --out "$OUT/files" ;;
        suites)   stage suites ${SUITES_LIMIT:-420} python3 benchmarks/suites_gpu.py --out "$OUT/files" --db "$TCPERF_DB" ${QUICK:+--quick} ;;
        models)   stage models ${MODELS_LIMIT:-560} python3 benchmarks/models_gpu.py --out "$OUT/files" --db "$TCPERF_DB" ${QUICK:+--quick} ${MODELS_ARGS:-} ;;
        overhead) stage overhead ${OVERHEAD_LIMIT:-300} python3 benchmarks/overhead.py --out "$OUT/files" ${QUICK:+--quick} ${OVERHEAD_ARGS:-} ;;
        lab)      stage lab ${LAB_LIMIT:-300} python3 benchmarks/lab_gpu.py --out "$OUT/files" --db "$TCPERF_DB" ${QUICK:+--quick} ;;
        advise)   stage advise ${ADVISE_LIMIT:-360} python3 benchmarks/advise_gpu.py --out "$OUT/files" --db "$TCPERF_DB" --deadline $(( ${ADVISE_LIMIT:-360} - 45 )) ${ADVISE_ARGS:-} ;;
        advise2)  stage advise2 ${ADVISE2_LIMIT:-360} python3 benchmarks/advise_gpu.py --out "$OUT/files/advise2" --db "$TCPERF_DB" ${ADVISE2_ARGS:-} ;;
        steptiming) stage steptiming ${STEP_LIMIT:-300} python3 benchmarks/step_timing.py --out "$OUT/files" ${STEP_ARGS:-} ;;
        ttt)      stage ttt ${TTT_LIMIT:-560} bash -c "python3 -m pytest -m gpu -p no:cacheprovider -rs --timeout 240 tests/test_train_to_target.py; python3 benchmarks/train_to_target_gpu.py --out \"$OUT/files/ttt\" --db \"$TCPERF_DB\" ${TTT_ARGS:-}" ;;
        comm)     stage comm ${COMM_LIMIT:-300} python3 benchmarks/comm_gpu.py --out "$OUT/files" --db "$TCPERF_DB" --part-timeout 120 ;;
        multitests) stage multitests ${MULTI_TESTS_LIMIT:-100} python3 -m pytest -m gpu -v -p no:cacheprovider -rs --timeout 90 --tb=short tests/test_comm.py tests/test_distributed.py ;;
        ddp)      stage ddp ${DDP_LIMIT:-580} python3 benchmarks/ddp_gpu.py --out "$OUT/files" --db "$TCPERF_DB" --budget 540 ${DDP_ARGS:-} ;;
        smoke)    stage smoke ${SMOKE_LIMIT:-300} bash -c "time python3 -m tcperf advise examples/awkward_mlp.py:factory; time python3 -m tcperf advise examples/linear_head.py:factory --mode train --json > $OUT/files/linear_head_train.json" ;;
        generate) stage generate ${GENERATE_LIMIT:-450} python3 benchmarks/generate_gpu.py --out "$OUT/files/generate" --db "$TCPERF_DB" ${GENERATE_ARGS:-} ;;
        workload) stage workload-tests ${WL_TESTS_LIMIT:-240} python3 -m pytest -m gpu -v -p no:cacheprovider -rs --timeout 200 --tb=short tests/test_workload.py
                  stage sol ${SOL_LIMIT:-180} python3 benchmarks/speed_of_light.py --out "$OUT/files" --db "$TCPERF_DB"
                  stage workload-advise ${WL_ADVISE_LIMIT:-420} bash -c "time COLUMNS=160 python3 -m tcperf advise ${WL_TARGET:-examples/bert_stream.py:factory} ${WL_ADVISE_ARGS:---steps 10000}" ;;
        bandwidth) stage bandwidth ${BW_LIMIT:-300} python3 benchmarks/inductor_bandwidth.py --out "$OUT/files/bandwidth" ${BW_ARGS:-} ;;
        bnrelu)   stage bnrelu ${BNRELU_LIMIT:-240} python3 benchmarks/bn_relu_probe.py --out "$OUT/files/bn_relu" ;;
        maxpool)  stage maxpool ${MAXPOOL_LIMIT:-180} python3 benchmarks/maxpool_probe.py --out "$OUT/files/maxpool" ;;
        strategy) stage strategy ${STRATEGY_LIMIT:-580} python3 benchmarks/strategy_gpu.py --out "$OUT/files/strategy" --db "$TCPERF_DB" --budget $(( ${STRATEGY_LIMIT:-580} - 40 )) ${STRATEGY_ARGS:-} ;;
        commprobe) stage commprobe ${PROBE_LIMIT:-150} python3 benchmarks/comm_pin_probe.py --out "$OUT/files/commprobe" ;;
        gemv)     stage gemv ${GEMV_LIMIT:-200} python3 benchmarks/gemv_gpu.py --out "$OUT/files/gemv" ${GEMV_ARGS:-} ;;
        wladvise) for t in ${WL_TARGETS:-examples/bert_stream.py:factory examples/llama_prefill.py:factory}; do
                      name=$(basename "${t%%.py*}")
                      stage "wladvise-$name" ${WL_ADVISE_LIMIT:-240} bash -c "time COLUMNS=160 python3 -m tcperf advise $t \
                          --steps ${WL_STEPS:-10000} --db \"$OUT/files/wl-$name.db\""
                  done ;;
        wlcards)  # WL_STREAMS (comma list) one a card, each pinned to its card's share of the cores, so each stream's
                  # loops and advice run alone on their GPU and cores; the state of earlier calls (WL_STATE, returned
                  # under files/wlstate/) is carried in and merged into
                  # (WL_GPUS: the cards to use, default all; a card's share of the cores counts every card, so
                  # start this stage unpinned: under taskset, nproc counts only the cores it was given)
                  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); [ "$n" -gt 0 ] || n=1
                  cards=(${WL_GPUS:+${WL_GPUS//,/ }}); [ ${#cards[@]} -gt 0 ] || cards=($(seq 0 $(( n - 1 ))))
                  per=$(( $(nproc) / n )); i=0
                  mkdir -p "$OUT/files/wlstate"; cp -r "${WL_STATE:-benchmarks/state/workload}/." "$OUT/files/wlstate/" 2>/dev/null
                  for s in ${WL_STREAMS//,/ }; do
                      g=${cards[$(( i % ${#cards[@]} ))]}; i=$(( i + 1 ))
                      CUDA_VISIBLE_DEVICES=$g stage "wl-$s" ${WLBENCH_LIMIT:-560} taskset -c $(( g * per ))-$(( g * per + per - 1 )) \
                          python3 benchmarks/workload_gpu.py --streams "$s" --out "$OUT/files/wlstate/$s" ${WL_ARGS:-} &
                      [ $(( i % ${#cards[@]} )) -eq 0 ] && wait
                  done; wait ;;
        wlbench)  stage wlbench ${WLBENCH_LIMIT:-560} python3 benchmarks/workload_gpu.py --out "$OUT/files/wlbench" ${WL_ARGS:-} ;;
        ceilings) stage ceilings ${CEILINGS_LIMIT:-180} python3 -m tcperf ceilings ;;
        report)   stage report 120 python3 -m tcperf report $(python3 -m tcperf runs --json | python3 -c 'import json,sys; print(" ".join(str(r["id"]) for r in json.load(sys.stdin)))') --out "$OUT/files/report.html" --png "$OUT/files/png" ;;
        *)        echo "unknown stage $s" ;;
    esac
done
tar -czf "$OUT/session.tar.gz" -C "$OUT" logs files && rm -rf "$OUT/files" "$OUT/logs"
ls -la "$OUT"
