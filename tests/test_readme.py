"""README.md stays a user's page that is true: at most 150 lines naming at most one commit; its first screen the
set-up and test lines CI runs; its example factory the file in examples/, whole, and a file that loads; its links
inside the repository; and every `tcperf` command its ```bash blocks show run, here (on the CPU, in a temporary
store, as written) or by the test named for it in RUN_ELSEWHERE (the slow `tcperf run` runs once, in
tests/test_cli_core.py)."""
import os
import re
import shlex
from pathlib import Path

import pytest
import torch

from conftest import commands_in_one_process
from tcperf import source
from tcperf.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "results").glob("*.md"))]
FIRST_SCREEN = 25                              # lines a reader sees before scrolling
SET_UP = 'python3 -m pip install -e ".[dev]"'  # README's set-up line, which .ci/run runs as written
# A README command another test already runs -> (that test's file, the words in it that run the command). The
# test there adds `--device cpu` and its own `--db`, as this file's own runs set CUDA_VISIBLE_DEVICES and TCPERF_DB.
RUN_ELSEWHERE = {
    "tcperf run": ("tests/test_cli_core.py", 'tcperf("run", "--device", "cpu", db=db'),
    "tcperf show": ("tests/test_cli_core.py", 'main(["show", "--db", db])'),
}
# What a command's output must hold besides its exit status 0, by subcommand.
SAYS = {"advise": "Recipes on", "generate": "tokens/s", "report": "wrote "}


def bash_lines() -> list[str]:
    """Each command line of README's ```bash blocks, its comment dropped, its words joined by one space (quoted
    where a shell needs it)."""
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    words = [shlex.split(line, comments=True) for block in blocks for line in block.splitlines()]
    return [shlex.join(w) for w in words if w]


TCPERF = list(dict.fromkeys(line for line in bash_lines() if line.split()[0] == "tcperf"))   # once each
RUN_HERE = [line for line in TCPERF if line not in RUN_ELSEWHERE]


def test_the_readme_is_a_page_not_a_notebook():
    commits = {w for w in re.findall(r"\b[0-9a-f]{7,40}\b", README) if re.search(r"\d", w) and re.search(r"[a-f]", w)}
    assert len(README.splitlines()) <= 150
    assert len(commits) <= 1, f"README.md names {len(commits)} commits: {sorted(commits)}"


def test_the_first_screen_is_the_set_up_the_main_command_and_the_tests_that_ci_runs():
    first = bash_lines()[:3]
    assert first == [shlex.join(shlex.split(SET_UP)), "tcperf run", "pytest"]
    screen = "\n".join(README.splitlines()[:FIRST_SCREEN])
    assert SET_UP in screen and "\ntcperf run " in screen and "\npytest " in screen
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert SET_UP in ci and "pytest" in ci                  # CI installs and tests as the README says


def test_every_command_is_run_here_or_by_the_test_named_for_it():
    assert TCPERF[0] == "tcperf run" and len(TCPERF) >= 5
    for line, (path, words) in RUN_ELSEWHERE.items():
        assert line in TCPERF, f"RUN_ELSEWHERE names {line!r}, which README.md no longer shows"
        assert words in (ROOT / path).read_text(), f"{path} no longer runs {line!r} as {words}"
    assert all(line.split()[1] in COMMANDS for line in TCPERF)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """README's other `tcperf` commands as written, in its order, in one fresh process (a process each would import
    torch again), from the repository's root, on the CPU even where a GPU is, in a new store: {line: (exit code,
    stdout, stderr)}. advise, generate and report: 86 s on 2 cores other work shared (45 s of CPU)."""
    store = tmp_path_factory.mktemp("readme") / "results.db"
    env = {**os.environ, "TCPERF_DB": str(store), "CUDA_VISIBLE_DEVICES": ""}
    ran = commands_in_one_process([shlex.split(line)[1:] for line in RUN_HERE], cwd=ROOT, env=env, timeout=540)
    return dict(zip(RUN_HERE, ran))


@pytest.mark.slow
@pytest.mark.parametrize("line", RUN_HERE)
def test_the_command_runs_as_the_readme_shows_it(line, ran):
    code, out, err = ran[line]
    assert code == 0, f"`{line}` exited {code}: {err[-2000:]}"
    assert "Traceback" not in err and SAYS.get(line.split()[1], "") in out


def factory_file() -> tuple[str, str]:
    """(path, code) of the file README shows whole under `[examples/X.py](examples/X.py), whole:`."""
    [(path, code)] = re.findall(r"\[(examples/\w+\.py)\]\(\1\), whole:\n```python\n(.*?)```", README, re.S)
    return path, code


def test_the_example_factory_is_the_file_whole_and_it_loads():
    path, code = factory_file()
    assert (ROOT / path).read_text() == code
    assert f"tcperf advise {path}:factory" in TCPERF
    spec = source.load_spec(str(ROOT / path) + ":factory")
    assert isinstance(spec.model, torch.nn.Module) and spec.args
    assert spec.targets is not None and callable(spec.loss_fn) and callable(spec.metric_fn)


def test_the_factorys_keys_are_the_ones_the_loader_takes():
    documented = set(re.findall(r"^\| `(\w+)` \|", README, re.M))
    assert documented == set(source.DICT_KEYS) - {"example_inputs"}     # example_inputs: inputs' older name


def test_inline_commands_name_real_commands():
    named = {word for word in re.findall(r"`tcperf ([\w-]+)", README) if not word.startswith("-")}
    assert named and named <= set(COMMANDS), sorted(named - set(COMMANDS))


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve_inside_the_repository(page):
    text = page.read_text()
    assert "../shared/" not in text
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:|#", target):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists() and ROOT in path.parents, f"{page.name} links to {target}"
