"""wgmma as CUDA text (no TVM): the instruction's shape, and the device functions the ``wgmma``
path's intrinsic (``wgmma_intrinsic``) and the warp-specialized kernel's main loop call.

A warpgroup (4 consecutive warps) computes a 64 x N tile with wgmma.mma_async, reading A
and B straight from shared memory through matrix descriptors.  Warp w of the group owns
rows 16w..16w+15; its accumulators are WMMA 16x16 fp32 accumulator fragments, whose 8
values per thread (x[0..7]) sit where the m16n8k16 layout (``mma_sync``) puts them, which is also
where wgmma writes them (per 8 columns: rows r and r + 8, two adjacent columns).  So the
WMMA fill and store intrinsics serve wgmma, and TVM's warp-memory lowering (which cannot
hand a custom call a pointer to registers) is not involved.
Shared tiles use the 128-byte swizzle (16-byte chunk c of a 128-byte row r sits at c ^ r%8,
TVM's permuted layout for 64-element fp16 rows): A is K-major, 64-row slabs of (row, 64 k);
B is MN-major in 64-column atoms, (N / 64, 64 k, 64 n), its atom stride passed in bytes,
or, stored [n][k] (col_major), K-major rows (n, 64 k) like A's: wgmma's native B layout.
With groups in flight (``in_flight``), a call waits only for the previous call's group; the
accumulators stay "+f" operands of every asm that touches them while a group runs (ptxas
would serialize the wgmmas if any other instruction did), up to ``wgmma_drain``.
bf16 operands (``dtype``) take the same layouts and descriptors (16-bit elements either way):
only the instruction's type (.bf16) and the function's name (``_bf16``) differ; wgmma accumulates
bf16 in fp32 only, as the template always does.
fp8 operands (e4m3 A, e4m3 or e5m2 B: ``b_dtype``) take the K-major layouts only (wgmma has no
transposed fp8 operand), so a col_major B: a call is the same 128-byte swizzled row of A and B,
which holds 128 fp8 elements, as four m64n{n}k32 instructions at the same 32-byte steps (the
descriptors are fp16's, byte for byte); the function's name says k128 and both types.
"""

from __future__ import annotations

from .operand_layout import COL_MAJOR, ROW_MAJOR, b_tag

WGMMA_M = 64  # rows of one warpgroup instruction
WGMMA_K = 64  # k of one call: a 128-byte swizzled row of fp16, four k16 instructions
WGMMA_ATOM = 64  # columns of one B atom
ACC_FRAGMENT = "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>"


# an operand dtype -> (wgmma's type of the operands, what the device function's name adds): fp16's
# names are those from before bf16
_TYPES = {"float16": ("f16", ""), "bfloat16": ("bf16", "_bf16"),
          "float8_e4m3fn": ("e4m3", "_e4m3"), "float8_e5m2": ("e5m2", "_e5m2")}
_FP8 = ("float8_e4m3fn", "float8_e5m2")


def wgmma_name(n: int, b_layout: str, in_flight: bool = False, dtype: str = "float16",
               b_dtype: str | None = None) -> str:
    if dtype in _FP8:  # a call's K: 128 fp8 elements, and both operands' types
        types = f"k128{b_tag(b_layout)}{_TYPES[dtype][1]}{_TYPES[b_dtype or dtype][1]}"
    else:
        types = f"k64{b_tag(b_layout)}{_TYPES[dtype][1]}"
    return f"tc_wgmma_m64n{n}{types}{'_in_flight' if in_flight else ''}"


def wgmma_source(n: int, b_layout: str = ROW_MAJOR, in_flight: bool = False, dtype: str = "float16",
                 b_dtype: str | None = None) -> str:
    """The device function of one call: four chained m64n{n}k16 wgmma (fp8: m64n{n}k32), then wait
    for them (``in_flight``: for the previous call's only, so this call's group runs on).
    A col_major B is K-major like A (same descriptor, same k-steps, not transposed)."""
    ab = f"{_TYPES[dtype][0]}.{_TYPES[b_dtype or dtype][0]}"
    k, operands = 16, "1, 1, 1, 0, {trans_b}"  # scale-d, scale-a, scale-b, transpose-a, transpose-b
    if dtype in _FP8:
        if b_layout != COL_MAJOR:
            raise ValueError("wgmma reads fp8 operands K-major only: a col_major ([n][k]) B")
        k, operands = 32, "1, 1, 1"  # no transpose operands: fp8 is K-major
    regs = ",".join(f"%{i}" for i in range(n // 2))
    outs = ", ".join(f'"+f"(c[first + {i // 8}].x[{i % 8}])' for i in range(n // 2))
    da, db = n // 2, n // 2 + 1
    if b_layout == COL_MAJOR:  # b_atom_bytes is unused
        b_lbo, b_step, trans_b, lbo_note, steps = (
            "(1ull << 16)", 2, 0, "unused: A and B are K-major", "+32 B along the A and B rows")
    else:
        b_lbo, b_step, trans_b, lbo_note, steps = (
            "((unsigned long long)((b_atom_bytes & 0x3FFFF) >> 4) << 16)", 128, 1,
            "B: the atom stride; unused for A", "+32 B along the A rows, +16 rows (2048 B) of B")
    return f"""
__device__ __forceinline__ void {wgmma_name(n, b_layout, in_flight, dtype, b_dtype)}({ACC_FRAGMENT}* c, int first, const void* a,
                                                    const void* b, unsigned b_atom_bytes) {{
  // c[first], c[first + 1], ...: this warp's 16 x {n} accumulators, 16 columns per fragment.
  // Descriptors: start address, leading byte offset ({lbo_note}),
  // stride byte offset (8 swizzled rows: 1024 B), 128-byte swizzle; in 16-byte units.
  const unsigned long long a0 = (unsigned long long)((__cvta_generic_to_shared(a) & 0x3FFFF) >> 4)
      | (1ull << 16) | (64ull << 32) | (1ull << 62);
  const unsigned long long b0 = (unsigned long long)((__cvta_generic_to_shared(b) & 0x3FFFF) >> 4)
      | {b_lbo} | (64ull << 32) | (1ull << 62);
  asm volatile("fence.proxy.async.shared::cta;\\nwgmma.fence.sync.aligned;\\n" ::: "memory");
#pragma unroll
  for (int k = 0; k < 4; ++k) {{  // k{k} steps: {steps}
    asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ab} {{{regs}}}, %{da}, %{db}, {operands.format(trans_b=trans_b)};\\n"
                 : {outs} : "l"(a0 + 2 * k), "l"(b0 + {b_step} * k));
  }}
  asm volatile("wgmma.commit_group.sync.aligned;\\nwgmma.wait_group.sync.aligned {int(in_flight)};\\n" ::: "memory");
}}
"""


def wgmma_drain_source(fragments: int) -> tuple[str, str]:
    """(name, CUDA source) of the device function that waits for every wgmma group in flight
    before the ``fragments`` 16x16 accumulators it takes are read.  Its asm takes them as
    operands, so the compiler keeps every read of them after the wait."""
    name = f"tc_wgmma_drain_{fragments}"
    regs = ", ".join(f'"+f"(c[{i // 8}].x[{i % 8}])' for i in range(8 * fragments))
    source = f"""
__device__ __forceinline__ void {name}({ACC_FRAGMENT}* c) {{
  asm volatile("wgmma.wait_group.sync.aligned 0;\\n" : {regs} :: "memory");
}}
"""
    return name, source
