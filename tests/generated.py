"""The CUDA source a config generates, lowered but not compiled: for tests that read the code and
leave nvcc (twice the lowering's time) to the tests that compile, or that compile it themselves
(``test_codegen._ptxas_report``: nvcc with ptxas's report, which is the compile)."""

from dataclasses import dataclass

from tc_autotune import workloads
from tc_autotune.api.kernel import build_arch, lower
from tc_autotune.core import tasks
from tc_autotune.backends.cuda.gpu import gpu_for_arch


@dataclass
class Lowered:
    """What a built kernel shows of its code, without the cubin."""

    workload: object
    config: object
    arch: str  # what it would be compiled for ("sm_90a" for wgmma)
    executable: object  # its host module: ``executable.mod.inspect_source()``

    @property
    def cuda_source(self) -> str:
        return self.executable.mod.imports[0].inspect_source()


def lowered(workload, config, target: str = "sm_90") -> Lowered:
    """``build(workload, config, target=target)`` up to nvcc (a config outside the space is refused,
    as a build refuses it)."""
    workload, gpu = workloads.get(workload), gpu_for_arch(target)
    problem = tasks.of(workload).space(workload, gpu).why_invalid(config)
    assert problem is None, f"{config} is not a valid config of {workload}: {problem}"
    return Lowered(workload, config, build_arch(workload, config, gpu), lower(workload, config, gpu)[1])


def generated_source(workload, config, target: str = "sm_90") -> str:
    """What ``build(workload, config, target=target).cuda_source`` holds, without nvcc."""
    return lowered(workload, config, target).cuda_source
