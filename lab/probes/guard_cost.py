"""Dynamo's guard check per call of a compiled ResNet-50, ours (``optimize``) against PyTorch's, on
the GPU or CPU: each side compiled in ``MODE`` (a backend whose graph does nothing on a CPU), the
whole call's host time and the guard check alone timed, the guard trees written out.

    python lab/probes/guard_cost.py [MODE] [--guards PREFIX]     # MODE: reduce-overhead (GPU), no-op
"""

import inspect
import sys
import warnings

import torch
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

import tc_autotune as tc
from tc_autotune.pytorch import models

from dynamo_overhead import _no_op_backend, _us  # a script beside this one (run from the repo root)


def main(mode: str) -> None:
    warnings.simplefilter("ignore")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = models.resnet50().half().eval().to(device, memory_format=torch.channels_last)
    x = torch.randn(1, 3, 224, 224, device=device).half().to(memory_format=torch.channels_last)
    with torch.no_grad():
        ours = tc.optimize(model, (x,), build=device == "cuda", measure=False)
        for label, module in (("ours", ours), ("pytorch", model)):
            torch._dynamo.reset()
            options = {"backend": _no_op_backend} if mode == "no-op" else {"mode": mode}
            compiled = torch.compile(module, fullgraph=label == "ours", **options)
            for _ in range(3):
                compiled(x)
            entry, = _debug_get_cache_entry_list(type(module).forward.__code__)
            frame = {"self": module, list(inspect.signature(type(module).forward).parameters)[1]: x}
            assert entry.guard_manager.check(frame)
            call = _us(lambda: compiled(x))
            if device == "cuda":
                torch.cuda.synchronize()
            guards = _us(lambda: entry.guard_manager.check(frame))
            print(f"{label}: {call:.1f} us a call (host), guard check {guards:.1f} us")
            if "--guards" in sys.argv:
                with open(f"{sys.argv[sys.argv.index('--guards') + 1]}.{label}.txt", "w") as out:
                    out.write(str(entry.guard_manager))


if __name__ == "__main__":
    main(next((a for a in sys.argv[1:] if not a.startswith("--") and "/" not in a), "reduce-overhead"))
