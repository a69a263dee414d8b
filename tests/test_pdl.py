"""Programmatic Dependent Launch (``tc_gemm.pdl``) on the CPU, for each kind of kernel the template
makes (warp-specialized with a split-K cluster, persistent warp-specialized, TIR mma, TIR wmma):
off, the generated code is the code the shipped records timed, byte for byte; on, it differs only
by the waits, which precede every global access of each kernel, and by the launch tag TVM's
runtime reads; nvcc compiles it for sm_90a; the build cache keeps the two builds apart; sm_80
ignores the option; and the PyTorch path asks for it unless ``TC_AUTOTUNE_PDL=0``."""

import difflib
import re
import warnings
from pathlib import Path

import pytest
import tvm

from tc_autotune.api import build_cache
from tc_autotune.api.apply import NoTunedConfigWarning
from tc_autotune.api.build import build
from tc_autotune.api.kernel import code_hash_of, lower, uses_pdl, verify_record
from tc_autotune.backends.cuda.gpu import gpu_for_arch, has_pdl
from tc_autotune.backends.cuda import code_hash as code_keys
from tc_autotune.backends.cuda import nvcc
from tc_autotune.backends.cuda.toolkit import find_nvcc
from tc_autotune.core import tasks
from tc_autotune.database import records
from tc_autotune.templates.tc_gemm import pdl
from tc_autotune.templates.tc_gemm.schedule import lower_gemm
from tc_autotune.templates.tc_gemm.views import view_of
from tc_autotune.templates.tc_gemm.warp_specialized.kernel import NAME as WS_FUNCTION
from tc_autotune import workloads

from launch_info import launch_tags

pytestmark = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

SHIPPED = Path(__file__).resolve().parents[1] / "tuning_logs" / "nvidia-h100-80gb-hbm3.jsonl"
SM90 = gpu_for_arch("sm_90")
# the kinds of kernel, by their config: each has its own way to wait (the warp-specialized kernel
# after its barriers' initialisation, a TIR kernel at its start) or its own launch (a cluster)
KINDS = {
    "ws-split-k-cluster": lambda c: c.warp_specialized == 1 and c.split_k > 1,
    "ws-persistent": lambda c: c.warp_specialized == 2,
    "tir-mma": lambda c: c.intrinsic == "mma" and not c.warp_specialized,
    "tir-wmma": lambda c: c.intrinsic == "wmma",
}
WAIT, LAUNCH = "griddepcontrol.wait", "griddepcontrol.launch_dependents"
# in a kernel's body: the instruction (warp-specialized) or TVM's helper that issues it (TIR)
WAIT_IN_BODY, LAUNCH_IN_BODY = re.compile(r"griddepcontrol[._]wait"), re.compile(r"griddepcontrol[._]launch_dependents")


def _shipped_record(kind: str):
    """(record, config) of the first current shipped record of ``kind``: the code it timed is
    what the plain build must still generate."""
    for record in records.load(SHIPPED):
        if record.stale or not record.code_hash:
            continue
        config = record.task.space(record.workload, SM90).from_entity(record.config)
        if KINDS[kind](config):
            return record, config
    pytest.skip(f"no current shipped record of a {kind} kernel")


def _source(executable) -> str:
    return executable.mod.imports[0].inspect_source()


@pytest.fixture(scope="module", params=list(KINDS))
def lowered(request):
    """(kind, record, config, {variant: CUDA source, launch tags}): off through the path that knows
    no option (``lower_gemm`` without ``pdl``), off and on through ``api.kernel.lower``."""
    record, config = _shipped_record(request.param)
    wl = record.workload
    target = tvm.target.Target({"kind": "cuda", "arch": tasks.of(wl).template.build_arch(config, "sm_90")})
    nvcc.install_compile_callback()  # where TVM has a CUDA runtime it compiles at build time
    with target:
        bare = lower_gemm(view_of(wl), config, target)
    variants = {"bare": bare, "off": lower(wl, config, SM90)[1], "on": lower(wl, config, SM90, pdl=True)[1]}
    return request.param, record, config, {name: (_source(ex), launch_tags(ex.mod)) for name, ex in variants.items()}


def test_off_the_code_is_the_code_the_shipped_records_timed(lowered):
    """The records key the plain code (``kernel_code_hash``): PDL off must leave it byte-identical,
    else every shipped record would go stale."""
    kind, record, config, built = lowered
    assert built["off"][0] == built["bare"][0], kind
    assert verify_record(record, config), f"{kind}: {record.workload} no longer generates the code its record timed"
    assert code_hash_of(record.workload, config, SM90) == record.code_hash


def test_on_the_code_differs_only_by_the_waits(lowered):
    kind, _, config, built = lowered
    off, on = built["off"][0].splitlines(), built["on"][0].splitlines()
    diff = difflib.SequenceMatcher(None, off, on, autojunk=False).get_opcodes()
    added = [line for tag, _, _, j1, j2 in diff if tag != "equal" for line in on[j1:j2]]
    assert all(tag in ("equal", "insert") for tag, *_ in diff), kind  # nothing of the plain code changed
    # the instructions (in TVM's helper functions, for TIR kernels) and each kernel's calls of them
    assert added and all("griddepcontrol" in line or line.strip() == "}" for line in added), added
    assert sum(f"{WAIT};" in line for line in added) == sum(f"{LAUNCH};" in line for line in added) == 1
    if not config.warp_specialized:
        assert sum(line.strip() == "tvm_builtin_ptx_griddepcontrol_wait();" for line in added) == len(built["on"][1])


def _kernel_bodies(source: str, warp_specialized: bool):
    """(name, parameter names, body) of each ``__global__`` kernel, or of the warp-specialized
    kernel's device function (its global kernel only calls it), comments removed."""
    source = re.sub(r"//[^\n]*", "", source)
    head = rf"void ({WS_FUNCTION})" if warp_specialized else r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)"
    for match in re.finditer(head + r"\(([^)]*)\)\s*\{", source):
        name = match.group(1)
        depth, at = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(source[at], 0)
            at += 1
        params = [p.split()[-1].lstrip("*") for p in match.group(2).split(",") if p.strip()]
        yield name, params, source[match.end():at]


def test_each_kernel_waits_before_its_first_global_access_then_lets_the_next_start(lowered):
    """In each kernel the wait comes before any use of a pointer or tensor map it was given (the
    warp-specialized kernel's device function: after its barriers' sync), the trigger after it."""
    kind, _, config, built = lowered
    bodies = list(_kernel_bodies(built["on"][0], bool(config.warp_specialized)))
    assert len(bodies) == (1 if config.warp_specialized else len(built["on"][1])), kind
    for name, params, body in bodies:
        wait, launch = (regex.search(body) for regex in (WAIT_IN_BODY, LAUNCH_IN_BODY))
        assert wait and launch and wait.start() < launch.start(), f"{kind} {name}: no wait, or the trigger before it"
        wait = wait.start()
        globals_ = [p for p in params if p != "smem_raw"]
        first = min((m.start() for p in globals_ for m in re.finditer(rf"\b{re.escape(p)}\b", body)), default=None)
        assert first is None or wait < first, f"{kind} {name}: {body[first - 80:first + 40]!r} before the wait"
        if config.warp_specialized:
            assert body.rfind("sync", 0, wait) > body.find("mbar_init"), "the wait follows the barriers' sync"
    assert "griddepcontrol" not in built["off"][0]


def test_the_launch_tags_say_pdl_when_on_and_only_then(lowered):
    """TVM's runtime launches with PDL where the tag is in a kernel's launch tags; the dynamic
    shared memory tag stays last (TVM checks it), the rest is TVM's own order."""
    kind, _, _, built = lowered
    for tags in built["off"][1].values():
        assert pdl.TAG not in tags, kind
    assert built["off"][1].keys() == built["on"][1].keys()
    for name, tags in built["on"][1].items():
        plain = built["off"][1][name]
        assert tags == pdl.launch_tags(plain) and tags.count(pdl.TAG) == 1, (kind, name, tags)
        if pdl.DYN_SMEM_TAG in tags:
            assert tags[-1] == pdl.DYN_SMEM_TAG and tags[-2] == pdl.TAG
    if kind == "ws-split-k-cluster":
        assert next(iter(built["on"][1].values()))[0] == "clusterCtaIdx.x"  # a cluster launch, with PDL


def test_the_pdl_kernels_compile_for_sm90a(lowered, monkeypatch):
    """nvcc takes the waits (a PDL build of the record's config: the same main loop).  A PDL build
    notes no code hash, and the plain lowering a record check keeps is never taken for it."""
    kind, record, config, _ = lowered
    monkeypatch.setattr(code_keys, "_BUILT", {})  # nothing built here yet: the check lowers
    assert code_hash_of(record.workload, config, SM90) == record.code_hash  # and keeps the plain lowering
    kernel = build(record.workload, config, target="sm_90", pdl=True)
    assert kernel.pdl and WAIT in kernel.cuda_source and kernel.cubin[:4] == b"\x7fELF", kind
    assert kernel.code_hash != record.code_hash
    assert verify_record(record, config)  # still the plain code's hash


def test_launch_tags_go_before_the_dynamic_shared_memory_tag():
    assert pdl.launch_tags(["blockIdx.x", "threadIdx.x"]) == ["blockIdx.x", "threadIdx.x", pdl.TAG]
    assert pdl.launch_tags(["blockIdx.x", pdl.DYN_SMEM_TAG]) == ["blockIdx.x", pdl.TAG, pdl.DYN_SMEM_TAG]
    assert pdl.launch_tags(["blockIdx.x", pdl.TAG, pdl.DYN_SMEM_TAG]) == ["blockIdx.x", pdl.TAG, pdl.DYN_SMEM_TAG]


def test_only_sm90_and_above_have_pdl_and_sm80_ignores_the_option():
    assert [has_pdl(a) for a in ("sm_75", "sm_80", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120")] == [
        False, False, False, True, True, True, True]
    assert uses_pdl(True, SM90) and not uses_pdl(False, SM90) and not uses_pdl(True, gpu_for_arch("sm_80"))
    wl = workloads.get("rfc-3x3-b1")
    sm80 = gpu_for_arch("sm_80")
    config = tasks.of(wl).space(wl, sm80).default_config()
    plain, asked = (_source(lower(wl, config, sm80, pdl=on)[1]) for on in (False, True))
    assert plain == asked and "griddepcontrol" not in asked


def test_the_module_key_tells_a_pdl_build_from_a_plain_one():
    wl = workloads.get("rfc-3x3-b1")
    config = tasks.of(wl).space(wl, SM90).default_config()
    key = build_cache.module_key(wl, config, "sm_90")
    assert key == build_cache.module_key(wl, config, "sm_90", pdl=False)
    assert key != build_cache.module_key(wl, config, "sm_90", pdl=True)


def test_the_build_cache_holds_both_builds_and_loads_each_as_built(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_AUTOTUNE_CACHE_DIR", str(tmp_path))
    wl = workloads.get("n=1,h=8,c=16,k=16,r=1,out_dtype=float16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoTunedConfigWarning)
        built = {on: build_cache.kernel(wl, SM90, logs=(), pdl=on) for on in (True, False)}
        assert [built[on].pdl for on in (True, False)] == [True, False]
        assert (WAIT in built[True].cuda_source, WAIT in built[False].cuda_source) == (True, False)
        assert len(list((tmp_path / "kernels" / "modules").glob("*.so"))) == 2
        monkeypatch.setattr(build_cache, "_load_module", lambda path: "module")  # no CUDA loader here
        monkeypatch.setattr(build_cache, "compile_kernel", lambda *a, **k: pytest.fail("built again"))
        for on in (True, False):
            again = build_cache.kernel(wl, SM90, logs=(), pdl=on)
            assert again.pdl == on and again.cuda_source == built[on].cuda_source
        # sm_80 has no PDL: asking for it is the plain build (the same key)
        sm80 = gpu_for_arch("sm_80")
        choice = build_cache.choose(wl, sm80, ())
        assert build_cache._lookup(wl, sm80, (), choice, uses_pdl(True, sm80))[0] == build_cache._lookup(
            wl, sm80, (), choice)[0]


def test_models_ask_for_pdl_unless_the_environment_says_0(monkeypatch):
    monkeypatch.delenv(build_cache.PDL_ENV, raising=False)
    assert build_cache.model_pdl()
    for value, on in (("0", False), (" 0 ", False), ("1", True), ("", True)):
        monkeypatch.setenv(build_cache.PDL_ENV, value)
        assert build_cache.model_pdl() == on, value


def test_the_torch_paths_build_with_pdl_by_the_environment(monkeypatch):
    torch = pytest.importorskip("torch")
    import importlib

    from tc_autotune.pytorch import ops

    optimize_module = importlib.import_module("tc_autotune.pytorch.optimize")

    asked = []

    def fake_kernel(workload, *args, pdl=False, **kwargs):
        asked.append(pdl)
        raise ValueError("no GPU here")

    monkeypatch.setattr(build_cache, "kernel", fake_kernel)
    monkeypatch.setattr(build_cache, "kernels", lambda workloads, *a, pdl=False, **k: asked.append(pdl) or {})
    monkeypatch.setattr(build_cache, "untuned", lambda workloads, *a, **k: [])
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 1)).eval().half().to(memory_format=torch.channels_last)
    x = torch.randn(1, 8, 4, 4).half().to(memory_format=torch.channels_last)
    for value, on in (("1", True), ("0", False)):
        monkeypatch.setenv(build_cache.PDL_ENV, value)
        ops._bind(("pdl-test", value), lambda: workloads.get("n=1,h=4,c=8,k=16,r=1"), torch.device("cuda"))
        optimize_module.optimize(model, (x,))
        assert asked[-2:] == [on, on], value
    ops.clear_launches()
