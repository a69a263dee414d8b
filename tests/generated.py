"""The CUDA source a config generates, lowered but not compiled: for tests that read the code and
leave nvcc (twice the lowering's time) to the tests that compile."""

from tc_autotune import workloads
from tc_autotune.api.kernel import lower
from tc_autotune.backends.cuda.gpu import gpu_for_arch


def generated_source(workload, config, arch: str = "sm_90") -> str:
    """What ``build(workload, config, target=arch).cuda_source`` holds, without nvcc."""
    return lower(workloads.get(workload), config, gpu_for_arch(arch))[1].mod.imports[0].inspect_source()
