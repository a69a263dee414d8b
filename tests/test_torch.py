"""PyTorch interop without torch or a GPU (issue #15): the workload, epilogue and errors of
``tc.conv2d`` / ``tc.dense`` from torch-like tensors, and the kernel's zero-copy argument
handling on CPU memory with a fake ``torch`` module and a numpy stand-in for the kernel."""

import sys
import types

import numpy as np
import pytest

import tc_autotune as tc
from tc_autotune import workloads
from tc_autotune.workloads import epilogue
from tc_autotune.api import functional, kernel
from tc_autotune.backends.cuda.gpu import default_gpu
from tc_autotune.core import tasks
from tc_autotune.api.apply import dense_workload_of, workload_of
from tc_autotune.workloads.dense import DenseWorkload

CONV = workloads.get("n=2,h=4,c=16,k=32,r=1,out_dtype=float16,epilogue=bias_residual_relu")


def aligned(shape, dtype, fill=0.0):
    """A C-contiguous numpy array on a 64-byte boundary, as TVM's from_dlpack requires (torch's
    CUDA allocator gives 512)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    array = raw[start:start + size].view(dtype).reshape(shape)
    array[...] = fill
    return array


class FakeTensor:
    """What the package reads of a torch tensor (shape, a "torch.float16" dtype, device,
    DLPack, is_contiguous, requires_grad), backed by a numpy array in CPU memory."""

    def __init__(self, array, requires_grad=False):
        self.array, self.requires_grad = array, requires_grad
        self.shape, self.dtype, self.device = array.shape, f"torch.{array.dtype}", "cpu"

    def __dlpack__(self, stream=None):
        assert not self.requires_grad, "torch refuses to export a tensor that requires grad"
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def is_contiguous(self):
        return self.array.flags.c_contiguous

    def detach(self):
        return FakeTensor(self.array)


@pytest.fixture
def fake_torch(monkeypatch):
    """``torch`` in sys.modules (where a real torch tensor implies it) with what the kernel uses."""
    module = types.ModuleType("torch")
    module.Tensor, module.float16, module.float32 = FakeTensor, "torch.float16", "torch.float32"
    module.empty = lambda shape, dtype, device: FakeTensor(aligned(shape, dtype.removeprefix("torch.")))
    monkeypatch.setitem(sys.modules, "torch", module)
    _pretend_a_gpu(monkeypatch)
    return module


def _pretend_a_gpu(monkeypatch):
    """GPU 0 "exists", so the checks that come after the no-GPU check run on a machine without one."""
    import tvm

    present = lambda dev=None: tvm.cuda(0) if dev is None else dev
    monkeypatch.setattr(kernel, "require_gpu", present)
    monkeypatch.setattr(functional, "require_gpu", present)


def fake(shape, dtype="float16", fill=0.0, **kwargs):
    return FakeTensor(aligned(shape, dtype, fill), **kwargs)


def conv_kernel():
    """A kernel of CONV that was never compiled: its arguments are checked before it runs."""
    import tvm

    config = tasks.of(CONV).space(CONV, default_gpu()).default_config()
    return kernel.Kernel(CONV, config, tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), None, b"")


def conv_inputs(seed=0):
    """CONV's data, weight, bias and residual as fake torch tensors, with random values."""
    rng = np.random.default_rng(seed)
    specs = tasks.of(CONV).signature(CONV)[:-1]
    return [FakeTensor(aligned(shape, dtype, rng.uniform(-1, 1, shape))) for _, shape, dtype in specs]


# ---- the workload and the epilogue from the arguments ---------------------------------
def test_the_workload_reads_torch_dtypes_and_shapes():
    data, weight = fake((2, 10, 12, 32)), fake((3, 5, 32, 48))
    assert workload_of(data, weight, 2, 1, out_dtype="float16", epilogue="bias_relu") == workloads.get(
        "n=2,h=10,w=12,c=32,k=48,r=3,s=5,stride=2,pad=1,out_dtype=float16,epilogue=bias_relu")
    with pytest.raises(ValueError, match="data is float16 but weight is float32"):
        workload_of(data, fake((3, 5, 32, 48), "float32"))
    a, linear, kn = fake((3, 7, 64)), fake((96, 64)), fake((64, 96))
    assert dense_workload_of(a, linear, epilogue="bias_gelu") == DenseWorkload(
        m=7, n=96, k=64, batch=3, b_layout="nk", epilogue="bias_gelu")
    assert dense_workload_of(fake((7, 64)), kn, "kn", "float16") == DenseWorkload(7, 96, 64, out_dtype="float16")
    with pytest.raises(ValueError, match=r"weight \[96, 64\] \(weight_layout='kn'\) has K=96, A has K=64"):
        dense_workload_of(a, linear, "kn")
    with pytest.raises(ValueError, match=r"A is \[1, 7, 64\]: pass a\[0\]"):
        dense_workload_of(fake((1, 7, 64)), linear)


@pytest.mark.parametrize("given,activation,name", [
    ((), None, "none"), (("bias",), "relu", "bias_relu"), (("scale", "bias"), None, "scale_bias"),
    (("bias", "residual"), "relu", "bias_residual_relu"), (("residual",), "gelu", "residual_gelu"),
    (("scale", "bias", "residual"), "gelu", "scale_bias_residual_gelu"),
])
def test_the_epilogue_is_what_the_given_inputs_spell(given, activation, name):
    inputs = {part: object() for part in given}
    assert epilogue.of_inputs(**inputs, activation=activation) == epilogue.parse(name)


def test_scale_without_bias_and_unknown_activations_are_errors():
    with pytest.raises(ValueError, match="unknown epilogue 'scale_relu': .*scale only with bias"):
        epilogue.of_inputs(scale=object(), activation="relu")
    for activation in ("tanh", "residual", "RELU"):
        with pytest.raises(ValueError, match=f"activation must be None, 'relu' or 'gelu', got '{activation}'"):
            epilogue.of_inputs(bias=object(), activation=activation)


def test_conv2d_and_dense_pass_the_epilogue_inputs_in_kernel_order(monkeypatch):
    calls = []
    _pretend_a_gpu(monkeypatch)
    monkeypatch.setattr(functional, "_cached_kernel", lambda wl, logs, *_: lambda *args, out: calls.append((wl, args, out)))
    data, weight, scale, bias, residual = fake((2, 4, 4, 16)), fake((1, 1, 16, 32)), "s", "b", "r"
    tc.conv2d(data, weight, out_dtype="float16", scale=scale, bias=bias, residual=residual, activation="relu")
    a, linear = fake((3, 5, 64)), fake((96, 64))
    tc.dense(a, linear, bias=bias, activation="gelu", out="out")
    (conv_wl, conv_args, conv_out), (dense_wl, dense_args, dense_out) = calls
    assert conv_wl.epilogue == "scale_bias_residual_relu" and conv_args == (data, weight, scale, bias, residual)
    assert dense_wl == DenseWorkload(5, 96, 64, batch=3, b_layout="nk", epilogue="bias_gelu")
    assert dense_args == (a, linear, bias) and (conv_out, dense_out) == (None, "out")
    with pytest.raises(ValueError, match="scale only with bias"):
        tc.dense(a, linear, scale=scale)
    assert len(calls) == 2


# ---- the kernel's arguments ---------------------------------------------------------------
def fake_conv(kernel_):
    """Stand in for the compiled 1x1 conv (numpy on the CPU views of its arguments): records the
    arguments' addresses and writes relu(data @ weight + bias + residual) into ``out``."""
    seen = []

    def main(data, weight, bias, residual, out, *workspaces):
        views = [np.from_dlpack(t) for t in (data, weight, bias, residual, out)]
        seen.append([v.ctypes.data for v in views])
        data, weight, bias, residual, out = views
        out[...] = np.maximum(data.astype(np.float32) @ weight[0, 0] + bias + residual, 0)

    kernel_._function = lambda: main
    return seen


def reference(data, weight, bias, residual):
    return np.maximum(data.array.astype(np.float32) @ weight.array[0, 0] + bias.array + residual.array, 0)


def test_torch_tensors_are_used_in_place_and_a_torch_tensor_comes_back(fake_torch):
    import tvm

    conv, inputs = conv_kernel(), conv_inputs()
    seen = fake_conv(conv)
    inputs[1].requires_grad = True  # a Parameter: read detached
    before = [x.array.copy() for x in inputs]
    out = fake(CONV.out_shape, "float16", np.nan)
    assert conv(*inputs, out=out, device=tvm.cpu(0)) is out  # written in place, returned
    assert seen[-1] == [x.array.ctypes.data for x in (*inputs, out)]  # no copies, in or out
    np.testing.assert_allclose(out.array, reference(*inputs), rtol=1e-3)
    allocated = conv(*inputs, device=tvm.cpu(0))  # allocated by torch
    assert isinstance(allocated, FakeTensor) and seen[-1][-1] == allocated.array.ctypes.data
    assert allocated.array.shape == CONV.out_shape and allocated.array.dtype == np.float16
    assert all(np.array_equal(x.array, b) for x, b in zip(inputs, before))  # inputs untouched


@pytest.mark.parametrize("case,message", [
    ("non-contiguous", r"weight is not contiguous \(a permuted or sliced view\).*\.contiguous\(\)"),
    ("cpu", "data is on cpu:0 but the kernel runs on cuda:0: move it there"),
    ("dtype", r"bias must be float32\[32\], got float16\[32\]"),
    ("shape", r"residual must be float16\[2, 4, 4, 32\], got float16\[2, 4, 4, 16\]"),
    ("misaligned", "data cannot be read in place: .*aligned"),
    ("numpy", "torch tensors and numpy arrays do not mix"),
])
def test_tensors_that_would_need_a_copy_are_one_clear_error(fake_torch, case, message):
    import tvm

    conv, inputs = conv_kernel(), conv_inputs()
    device = None if case == "cpu" else tvm.cpu(0)
    if case == "non-contiguous":
        inputs[1] = FakeTensor(aligned((1, 1, 32, 16), "float16").transpose(0, 1, 3, 2))
    elif case == "dtype":
        inputs[2] = fake((32,), "float16")
    elif case == "shape":
        inputs[3] = fake((2, 4, 4, 16), "float16")
    elif case == "misaligned":
        inputs[0] = FakeTensor(aligned((2 * 4 * 4 * 16 + 1,), "float16")[1:].reshape(2, 4, 4, 16))
    elif case == "numpy":
        inputs[2] = inputs[2].array
    with pytest.raises(ValueError, match=message) as err:
        conv(*inputs, device=device)
    assert "\n" not in str(err.value)


def test_numpy_inputs_still_give_a_tvm_tensor():
    import tvm

    conv = conv_kernel()
    inputs = [x.array for x in conv_inputs()]
    fake_conv(conv)
    out = conv(*inputs, device=tvm.cpu(0))
    assert isinstance(out, tvm.runtime.Tensor)
    np.testing.assert_allclose(out.numpy(), reference(*conv_inputs()), rtol=1e-3)


def test_dense_is_exported_lazily():
    assert tc.dense is functional.dense and "dense" in tc.__all__
