"""On the GPU: models partitioned onto the tuned kernels (``tc_autotune.relax``) and run by TVM's
VM agree with PyTorch's fp32 models, through the kernels' kinds of config (split-K with its
workspace, warp-specialized ones with their host-encoded tensor maps, dense), and a plain
``tvm.compile`` of a partitioned module runs the same as ``build``'s."""

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def torch(cuda_torch):
    return cuda_torch


def _conv(torch, c, k, r, stride, shape, relu=True):
    layers = [torch.nn.Conv2d(c, k, r, stride=stride, padding=r // 2)] + [torch.nn.ReLU()] * relu
    return torch.nn.Sequential(*layers), torch.randn(*shape)


def _models(torch, name):
    torch.manual_seed(0)
    if name == "3x3 14x14 b1 (split-K on the H100)":
        return _conv(torch, 256, 256, 3, 1, (1, 256, 14, 14))
    if name == "1x1/2 b32 (warp-specialized, im2col map on the H100)":
        return _conv(torch, 1024, 2048, 1, 2, (32, 1024, 14, 14), relu=False)
    if name == "classifier b1 (warp-specialized cluster split-K on the H100)":
        return torch.nn.Linear(2048, 1000), torch.randn(1, 2048)
    if name == "small network":
        from pytorch_models import SmallNet

        return SmallNet(), torch.randn(4, 3, 32, 32)
    from tc_autotune.pytorch.models import MLPBlock

    return MLPBlock(256, 512), torch.randn(2, 16, 256)


NAMES = ["3x3 14x14 b1 (split-K on the H100)", "1x1/2 b32 (warp-specialized, im2col map on the H100)",
         "classifier b1 (warp-specialized cluster split-K on the H100)", "small network", "mlp on (2, 16, 256)"]


def _run(executable, x, torch):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cuda(0))
    x = x.half().cuda().contiguous()
    return torch.from_dlpack(vm["main"](tvm.runtime.from_dlpack(x))).float()


def _err(out, ref) -> float:
    return float((out - ref).abs().max() / ref.abs().max())


@pytest.mark.parametrize("name", NAMES)
def test_partitioned_models_agree_with_pytorch(torch, name):
    import tc_autotune.relax as tcr
    from tc_autotune.relax import kernels

    model, x = _models(torch, name)
    model = model.eval().half()
    with torch.no_grad():
        expected = model.float().cuda()(x.cuda())  # fp32 of the fp16-rounded weights
        fp16_err = _err(model.half()(x.half().cuda()).float(), expected)
    mod = tcr.from_torch(model.cpu(), (x.half(),))
    fast = tcr.partition(mod, im2col="im2col" in name)  # the im2col case keeps its Python tensor-map call
    report = tcr.report(fast)
    assert report.left == {} and report.layers >= 1
    configs = [json.loads(str(f.attrs[kernels.CONFIG_ATTR])) for _, f in fast.functions.items()
               if getattr(f, "attrs", None) is not None and kernels.CONFIG_ATTR in f.attrs]
    print(name, report.summary(), [(c["intrinsic"], c["split_k"], c["warp_specialized"], c["tma_im2col"])
                                   for c in configs])
    err = _err(_run(tcr.build(fast), x, torch), expected)
    assert err <= max(5e-2, 5 * fp16_err), (err, fp16_err)


def test_plain_tvm_compile_runs_the_same(torch):
    import tvm

    import tc_autotune.relax as tcr

    model, x = _models(torch, "small network")
    model = model.eval().half()
    fast = tcr.partition(tcr.from_torch(model, (x.half(),)))
    ours = _run(tcr.build(fast), x, torch)
    target = tcr.target_of(fast)
    tcr.kernels.prepare_process()
    with target, tvm.transform.PassContext(opt_level=3, config=tcr.PASS_CONFIG):
        plain = tvm.compile(fast, target)
    assert _err(_run(plain, x, torch), ours) < 1e-3  # the same kernels (up to a split-K's order)
