"""Dynamo's own cost per call of a compiled model, ours against PyTorch's (ResNet-50's layer3 at
batch 1, fp16 channels-last; runs on a CPU too): each side compiled with a backend whose graph
does nothing (it returns the outputs of one run), so what is timed is dynamo's frame, guards and
wrappers; and the guard check alone.

    python lab/probes/dynamo_overhead.py
"""

import time
import warnings

import torch
from torch._dynamo import external_utils
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

import tc_autotune as tc
from tc_autotune.pytorch import models


def _us(fn, calls: int = 3000) -> float:
    for _ in range(100):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def _no_op_backend(gm, inputs):
    outputs = gm(*inputs)
    return lambda *args: outputs


def main() -> None:
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    model = models.resnet50().layer3.half().eval().to(memory_format=torch.channels_last)
    x = torch.randn(1, 512, 28, 28).half().to(memory_format=torch.channels_last)
    inner = next(c for c in external_utils.wrap_inline.__code__.co_consts if getattr(c, "co_name", "") == "inner")
    with torch.no_grad():
        ours = tc.optimize(model, (x,), build=False, measure=False)
        for label, module in (("ours", ours), ("pytorch", model)):
            torch._dynamo.reset()
            compiled = torch.compile(module, backend=_no_op_backend)
            compiled(x)
            # ours (a GraphModule) is compiled at its forward; an nn.Sequential at dynamo's wrapper
            entry, = _debug_get_cache_entry_list(type(module).forward.__code__) or _debug_get_cache_entry_list(inner)
            frame = {"self": module, "input": x} if label == "ours" else {"args": (x,), "kwargs": {}, "fn": module}
            assert entry.guard_manager.check(frame)
            print(f"{label}: {_us(lambda: compiled(x)):.1f} us a call, "
                  f"guard check {_us(lambda: entry.guard_manager.check(frame)):.1f} us")


if __name__ == "__main__":
    main()
