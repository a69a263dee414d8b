"""On the GPU with PyTorch (issue #15): docs/usage.md's "PyTorch tensors in and out" example runs as
written (a ResNet-50 bottleneck block and a Linear + GELU through ``tc.conv2d`` / ``tc.dense``,
checked against PyTorch), torch tensors are used in place (an ``out=`` tensor comes back,
written, on torch's current stream) and the inputs are left as they were."""

from pathlib import Path

import pytest

import tc_autotune as tc

pytestmark = pytest.mark.gpu
USAGE = Path(__file__).resolve().parents[1] / "docs" / "usage.md"


@pytest.fixture(scope="module")
def torch(cuda_torch):
    return cuda_torch


@pytest.fixture(scope="module")
def example(torch):
    """The names the example of docs/usage.md defines, after running it (its asserts included)."""
    section = USAGE.read_text().split("## PyTorch tensors in and out\n", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    names = {"__name__": "readme_example"}
    exec(compile(code, f"{USAGE} (PyTorch tensors in and out)", "exec"), names)
    return names


def test_the_readme_example_matches_pytorch(example, torch):
    y, ref, z, rel_err = example["y"], example["ref"], example["z"], example["rel_err"]
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == torch.float16
    assert rel_err(y.permute(0, 3, 1, 2), ref) < 1e-2
    assert isinstance(z, torch.Tensor) and z.shape == (2, 128, 11008) and z.dtype == torch.float16


def test_an_out_tensor_is_written_in_place_on_the_current_stream(example, torch):
    x, w3, b3, h2, y = (example[name] for name in ("x", "w3", "b3", "h2", "y"))
    inputs = (h2, w3, b3, x)
    pointers, copies = [t.data_ptr() for t in inputs], [t.clone() for t in inputs]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # poisoned on the side stream: the kernel must run after the fill
        out = torch.full(y.shape, float("nan"), device="cuda", dtype=torch.float16)
        returned = tc.conv2d(h2, w3, out_dtype="float16", bias=b3, residual=x, activation="relu", out=out)
    side.synchronize()
    assert returned is out and returned.data_ptr() == out.data_ptr()
    assert torch.equal(out, y)  # every element written, as the allocated result was
    assert [t.data_ptr() for t in inputs] == pointers
    assert all(torch.equal(t, c) for t, c in zip(inputs, copies))


def test_the_dense_example_with_a_kn_weight_and_an_out_tensor(example, torch):
    tokens, linear, z = example["tokens"], example["linear"], example["z"]
    weight_kn = linear.weight.detach().t().contiguous()  # (K, N)
    out = torch.full_like(z, float("nan"))
    returned = tc.dense(tokens, weight_kn, weight_layout="kn", out_dtype="float16", bias=linear.bias.float(),
                        activation="gelu", out=out)
    assert returned is out and example["rel_err"](out, z) < 1e-2


def test_tensors_that_would_need_a_copy_are_refused(example, torch):
    """(The first layer's workload each time: its kernel is built already.)"""
    x, w1, b1 = example["x"], example["w1"], example["b1"]
    for data, weight, bias, message in [(x.transpose(1, 2), w1, b1, "data is not contiguous"),
                                        (x.cpu(), w1, b1, "data is on cpu:0 but the kernel runs on cuda:0"),
                                        (x, w1.cpu(), b1, "weight is on cpu but the kernel runs on cuda:0"),
                                        (x, w1, b1.half(), r"bias must be float32\[64\], got float16\[64\]")]:
        with pytest.raises(ValueError, match=message):
            tc.conv2d(data, weight, out_dtype="float16", bias=bias, activation="relu")
    with pytest.raises(ValueError, match=r"out must be float16\[.*got float32\[1\]"):
        tc.conv2d(x, w1, out_dtype="float16", bias=b1, activation="relu", out=torch.empty(1, device="cuda"))


@pytest.mark.parametrize("name", ["rfc-3x3-b1", "dense:m=16,n=4096,k=4096,b=nk", "n=2,h=14,c=64,k=64,r=3,pad=1,dtype=float32"])
def test_the_benchmark_times_our_kernels_as_it_times_the_baseline(name, torch):
    """checked_kernel_time replays our launches from a CUDA graph (the one timer, as the
    baseline's are timed): the same kernel, checked first, at most what TVM's time_evaluator
    (eager launches) measures, and not much less (an empty graph would be ~0); a wrong result
    is never timed.  Split-K's second kernel and fp32 input's cast kernel are in the graph too."""
    import numpy as np
    import tvm

    from tc_autotune import workloads
    from tc_autotune.measure.checked_timing import checked_kernel_time, task_arrays
    from tc_autotune.api.build import build
    from tc_autotune.measure.measurer import time_kernel

    wl = workloads.get(name)
    kernel = build(wl)
    arrays = task_arrays(wl)
    graph, err = checked_kernel_time(kernel, wl, *arrays, repeat=10)
    assert graph is not None and err < 1e-2
    dev = tvm.cuda(0)
    args = [tvm.runtime.tensor(a, device=dev) for a in arrays[:-1]]
    args.append(tvm.runtime.empty(wl.out_shape, wl.out_dtype, device=dev))
    evaluator = kernel.time_evaluator(number=20, repeat=10, min_repeat_ms=10)  # TVM's own, eager
    eager = list(evaluator(*args).results)
    # The lower bound only has to catch an empty graph (~0 per launch): eager launches are host-bound
    # for a few-microsecond kernel, and 4x slower than the graph under a loaded host (xdist workers).
    assert 0.1 * min(eager) < graph <= 1.05 * float(np.median(eager)), (graph, eager)
    wrong, wrong_err = checked_kernel_time(kernel, wl, *arrays[:-1], arrays[-1] + 1.0, repeat=3)
    assert wrong is None and wrong_err > 1e-2
