"""Does profile_kernels list kernels on every call in one process, with and without CUPTI teardown?"""
import os, subprocess, sys
if len(sys.argv) > 1:
    import torch
    from tcperf import kernels
    if sys.argv[1] == "teardown":
        kernels.detach_after_profiling()
    a = torch.randn(2048, 2048, device="cuda")
    fn = lambda: (a @ a).relu_()
    counts = [len(kernels.profile_kernels(fn, torch.device("cuda"), calls=3)) for _ in range(5)]
    print(sys.argv[1], os.environ.get("TEARDOWN_CUPTI"), "kernels listed by 5 profiles in a row:", counts, flush=True)
else:
    for mode in ("teardown", "attached"):
        subprocess.run([sys.executable, __file__, mode])
