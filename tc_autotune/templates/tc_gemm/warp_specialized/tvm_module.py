"""The TVM side of the kernel: a PrimFunc that launches the generated device function and
encodes its operands' tensor maps in its host code.  It takes the kernel's plan (``kernel.plan``,
which ``kernel.kernel_module`` hands it), so it stands beside the emitters, not above them.

A persistent kernel launches a block per SM of the GPU it is built on (``blocks_x``): the
local GPU's count, read from its driver, else the nominal GPU's of the arch.  The count is in
the host code's launch, not in the kernel's source, so a record's code is the same wherever it
was built, and the kernel is right on any GPU (its blocks walk the tiles by gridDim).
"""

from __future__ import annotations

from ....backends.cuda import tensormap, tensormap_bf16
from ....backends.cuda.gpu import default_gpu
from ....workloads.epilogue import input_specs as epilogue_input_specs
from ..gemm import GemmView
from .boxes import Im2colBox


# TMA copies fp8 tensors as bytes: their maps are described as uint8 (CUDA has no fp8 map type;
# TVM's runtime derives every map's CUtensorMapDataType from the descriptor's dtype)
_DESCRIPTOR_DTYPES = {"float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}


def blocks_x(kp, sm_count: int | None = None) -> int:
    """The launch's blocks along x: ``kp.grid``'s, or for a persistent kernel at most one per SM of
    ``sm_count`` (default: the GPU it is built on, ``default_gpu``).

    Why a constant, not the device's attribute read by the host code at each launch: with the
    grid a packed call (runtime.GetDeviceAttr), a persistent kernel with a TMA store and three
    epilogue inputs handed the caller a garbage return value that failed TVM's FFI check (TVM
    0.27, H100).  A GPU of another SM count than the builder's still gets right results, and a
    grid sized for the builder's."""
    if not kp.persistent:
        return kp.grid[0]
    return kp.launch_grid(sm_count or default_gpu().sm_count)[0]


def ir_module(kp, view: GemmView):
    """The IRModule TVM compiles of a kernel plan ``kp`` (``kernel.KernelPlan``) of ``view``: a
    PrimFunc of the task's (A, B, fp8's scales, epilogue inputs, C) tensors whose kernel is one call of the
    generated device function, with the launch and shared memory above.  Each TMA operand's tensor
    map is encoded by the host code on every call (from the tensor's own pointer) and reaches the
    kernel as a ``__grid_constant__`` parameter."""
    import tvm
    from tvm.backend.cuda.op import cuda_func_call
    from tvm.script import tirx as T

    bf16 = view.operand_dtype == "bfloat16"
    # A's im2col map: its elements' type is the encoder's (fp16's, or bf16's: ``tensormap_bf16``)
    encode_im2col = tensormap_bf16.ENCODE_IM2COL if bf16 else tensormap.ENCODE_IM2COL
    if isinstance(kp.a_box, Im2colBox):
        tensormap_bf16.register()
    (gx, gy), threads, smem = (blocks_x(kp), kp.grid[1]), kp.threads, kp.smem_bytes
    a_shape, b_shape, c_shape, out_dtype = view.a.shape, view.b.shape, view.c.shape, view.out_dtype
    # the maps in the kernel's order (map_a, map_b, map_c); swap_ab: its A' is the task's B, its B' the task's A
    order = (1, 0) if kp.swapped else (0, 1)
    operand_boxes = [((view.a, view.b)[i], box) for i, box in zip(order, (kp.a_box, kp.b_box))]
    operand_boxes += [(view.c, kp.c_box)] * (kp.c_box is not None)
    maps = [T.Var(f"{operand.tensor}_tensormap", ty=T.handle("tensormap").ty) if box else None
            for operand, box in operand_boxes]
    map_args = [T.address_of(tmap) if tmap is not None else T.uint64(0) for tmap in maps]
    # fp16, bf16 or fp8 (B's its own: an e5m2 B): the producer copies the tensors as they are
    # (fp32 input: it converts them, as the task's tensors are)
    in_dtype, b_dtype = view.operand_dtype, view.b_operand_dtype
    if view.dtype != view.operand_dtype:
        in_dtype = b_dtype = view.dtype
    map_dtypes = [(in_dtype, b_dtype)[i] for i in order] + [out_dtype]  # what the maps' elements are
    scaled = 2 if view.fp8 else 0  # fp8's per-tensor scales, after B
    # fp8's two scales, then the epilogue's inputs (up to 3): the function takes 5 slots, the unused
    # ones are dropped below.
    extra = [((1,), "float32")] * scaled
    extra += [(shape, dtype) for _, shape, dtype in epilogue_input_specs(view.epilogue, view.n, c_shape, out_dtype)]
    used = len(extra)
    extra += [((1,), "float32")] * (5 - used)

    @T.prim_func(check_well_formed=False)  # the maps are bound below, in the host part
    def main(a: T.handle, b: T.handle, e0: T.handle, e1: T.handle, e2: T.handle, e3: T.handle, e4: T.handle,
             c: T.handle):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        A = T.match_buffer(a, a_shape, in_dtype, align=64)
        B = T.match_buffer(b, b_shape, b_dtype, align=64)
        E0 = T.match_buffer(e0, extra[0][0], extra[0][1], align=8)  # 8: the pairs' loads
        E1 = T.match_buffer(e1, extra[1][0], extra[1][1], align=8)
        E2 = T.match_buffer(e2, extra[2][0], extra[2][1], align=8)
        E3 = T.match_buffer(e3, extra[3][0], extra[3][1], align=8)
        E4 = T.match_buffer(e4, extra[4][0], extra[4][1], align=8)
        C = T.match_buffer(c, c_shape, out_dtype, align=64)
        if kp.cluster > 1:  # a cluster launch: `cluster` consecutive blocks along x
            T.launch_thread("clusterCtaIdx.x", kp.cluster)
        bx = T.launch_thread("blockIdx.x", gx)
        by = T.launch_thread("blockIdx.y", gy)
        tx = T.launch_thread("threadIdx.x", threads)
        buf = T.alloc_buffer((smem,), "uint8", scope="shared.dyn")
        T.evaluate(cuda_func_call(kp.name, A.data, B.data, *[E0.data, E1.data, E2.data, E3.data, E4.data][:used],
                                  C.data, buf.data, *map_args, source_code=kp.source))

    main = tvm.tirx.PrimFunc([*main.params[:2 + used], main.params[-1]], main.body, attrs=main.attrs)
    host = []
    operand_params = [main.params[i] for i in order] + [main.params[-1]]
    for tmap, (_, box), param, dtype in zip(maps, operand_boxes, operand_params, map_dtypes):
        if tmap is None:
            continue
        host.append(tvm.tirx.Bind(tmap, T.tvm_stack_alloca("tensormap", 1)))
        if isinstance(box, Im2colBox):  # TVM's host encodes tiled maps only: ours, through the driver
            encode = T.call_packed(encode_im2col, tmap, param.data, *box.encode_args())
        else:
            # the map's CUtensorMapDataType is derived by TVM's runtime from descriptor_dtype
            # (bfloat16 -> BFLOAT16, fp8 described as uint8; its force_cu_dtype takes only
            # TFLOAT32 and sub-byte types)
            encode = tvm.tirx.tensormap_encode_tiled(  # innermost dim first
                tmap, param.data, *box.dims, *box.strides, *box.box, *box.element_strides,
                descriptor_dtype=_DESCRIPTOR_DTYPES.get(dtype, dtype), rank=len(box.box), swizzle=3)  # SWIZZLE_128B
        host.append(tvm.tirx.Evaluate(encode))
    if host:
        main = main.with_body(tvm.tirx.SeqStmt([*host, main.body]))
    return tvm.IRModule({"main": main})
