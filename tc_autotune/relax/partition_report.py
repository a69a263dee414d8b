"""What ``partition`` did to a module (``PartitionReport``), kept on the module itself as an
attribute: ``report(mod)`` reads it back, for users and for ``building``, which builds for the
arch the kernels were chosen for.  Plain data, apart from the partitioning, so that reading it
needs none of the kernels' choosing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

ATTR = "tc_autotune"  # the module attribute that holds the report (JSON)


@dataclass
class PartitionReport:
    """What ``partition`` did (``report(mod)``)."""

    layers: int = 0  # conv2d / matmul chains now on tuned kernels
    fused_ops: int = 0  # the ops folded into them (astype, bias, batch norm, residual add, activation)
    kernels: dict = field(default_factory=dict)  # workload -> where its config came from (record, zero-shot, ...)
    left: dict = field(default_factory=dict)  # why an op stays Relax's -> how many
    layout_conversions: int = 0  # transposes of activations left in the model
    arch: str = ""  # the arch the module must be built for (sm_90a when a kernel uses wgmma)
    seconds: float = 0.0

    @property
    def untuned(self) -> list[str]:
        return [w for w, source in self.kernels.items() if source != "record"]

    def summary(self) -> str:
        text = (f"{self.layers} layers on {len(self.kernels)} tuned kernels ({self.fused_ops} ops fused into them, "
                f"{len(self.untuned)} kernels untuned), {self.layout_conversions} layout conversions")
        if self.left:
            text += "; left to Relax: " + ", ".join(f"{n} x {why}" for why, n in self.left.items())
        return text


def with_report(mod, report: PartitionReport):
    """``mod`` carrying ``report`` (JSON in its attribute ``ATTR``)."""
    return mod.with_attr(ATTR, json.dumps(asdict(report)))


def report(mod) -> PartitionReport:
    """What ``partition`` did to ``mod`` (ValueError if it did not make ``mod``)."""
    attrs = mod.attrs
    if attrs is None or ATTR not in attrs:
        raise ValueError("this module did not come from tc_autotune.relax.partition")
    return PartitionReport(**json.loads(str(attrs[ATTR])))
