"""The consumers' epilogue: each warpgroup's accumulators through the task's fused epilogue
(scale, bias, residual, activation, on each pair of adjacent fp32 values in registers) into C.
From registers, two adjacent columns a store, bounds-checked at C's edges; or (``tma_store``)
through shared memory: chunks of 64 rows x 128 bytes in two swizzled staging buffers a warpgroup,
each stored by one thread with a TMA bulk store that runs on under the next chunk and the next
tile.  Split-K: the cluster's blocks sum their partial accumulators through distributed shared
memory first, each block storing a share of the fragments.

Accumulator slot p of lane l in a 16x16 fragment is row 8 * (p % 4 / 2) + l / 4, column
8 * (p / 4) + 2 * (l % 4) + p % 2 (the m16n8k16 layout wgmma writes)."""

from __future__ import annotations

from ....workloads.epilogue import GELU_C, Epilogue
from ..wgmma_source import WGMMA_M
from ..knobs import (PRODUCER_THREADS, WS_ROW_BYTES, WS_STAGING_BUFFERS, WS_STAGING_BYTES,
                     WS_STAGING_ROWS)
from .layout import BlockLayout, fixed_cuda

# Two adjacent residual elements at ``at`` as a float2, by C's element type (the residual's).
_RESIDUAL_PAIR = {"float": "__ldg(reinterpret_cast<const float2*>({at}))",
                  "half": "__half22float2(*reinterpret_cast<const __half2*>({at}))",
                  "__nv_bfloat16": "__bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>({at}))"}


def helpers(lay: BlockLayout) -> str:
    """The TMA store's device function, with ``tma_store``."""
    return "\n" + fixed_cuda("tma_store.cuh") if lay.c_box else ""


def staging_bytes(lay: BlockLayout) -> int:
    """Shared memory of tma_store's staging buffers (after the stages, before the ring's barriers)."""
    return lay.warpgroups * WS_STAGING_BYTES if lay.c_box else 0


def params(lay: BlockLayout) -> str:
    """The device function's parameters after A and B, before C, in the task's argument order:
    fp8's per-tensor scales (1-element fp32 tensors), then the epilogue's inputs: per-channel fp32
    vectors, then the residual (C's shape and type)."""
    fused = lay.view.epilogue
    params = [f"const float* __restrict__ {name}" for name in ("scale_a", "scale_b")] * lay.scaled
    params += [f"const float* __restrict__ {name}" for name in fused.channel_inputs]
    params += [f"const {lay.out_t}* __restrict__ residual"] * fused.residual
    return "".join(f"\n                                        {param}," for param in params)


def fused_pair(fused: Epilogue, n_cols: int, out_t: str, indent: str) -> str:
    """C statements that take the fp32 pair v0, v1 (C's row m, columns n and n + 1) through the
    fused epilogue (``Epilogue.apply``'s order: scale, bias, residual, activation), before the
    output cast; empty without one.  With an even N the pair's inputs are read as pairs (8-byte
    channel loads, a float2 / half2 / bfloat162 residual); with an odd N one by one, column n + 1 only
    inside C."""
    if not fused:
        return ""
    lines = []
    paired = n_cols % 2 == 0
    for name, op in (("scale", "*="), ("bias", "+=")):
        if getattr(fused, name) and paired:
            lines += [f"const float2 {name}_n = __ldg(reinterpret_cast<const float2*>({name} + n));",
                      f"v0 {op} {name}_n.x; v1 {op} {name}_n.y;"]
        elif getattr(fused, name):
            lines += [f"v0 {op} __ldg({name} + n);", f"if (n + 1 < {n_cols}) v1 {op} __ldg({name} + n + 1);"]
    at = f"residual + (long long)m * {n_cols} + n"
    if fused.residual and paired:
        pair = _RESIDUAL_PAIR[out_t].format(at=at)
        lines += [f"const float2 residual_mn = {pair};", "v0 += residual_mn.x; v1 += residual_mn.y;"]
    elif fused.residual:
        lines += [f"v0 += (float)({at})[0];", f"if (n + 1 < {n_cols}) v1 += (float)({at})[1];"]
    if fused.activation == "relu":
        lines.append("v0 = fmaxf(v0, 0.0f); v1 = fmaxf(v1, 0.0f);")
    elif fused.activation == "gelu":  # the tanh approximation, as Epilogue.apply
        gelu = "0.5f * {x} * (1.0f + tanhf({c}f * ({x} + 0.044715f * {x} * {x} * {x})))"
        lines += [f"v{i} = {gelu.format(x=f'v{i}', c=GELU_C)};" for i in (0, 1)]
    return "".join(f"\n{indent}{line}" for line in [f"// epilogue {fused}", *lines])


def store(lay: BlockLayout, indent: str) -> str:
    """A consumer warpgroup's store of its tile's accumulators (the fused epilogue included)."""
    if lay.swapped:
        return _swapped_from_registers(lay, indent)
    return _staged(lay, indent) if lay.c_box else _from_registers(lay, indent)


def declare(lay: BlockLayout) -> str:
    """What the store keeps across tiles, declared before them: tma_store's count of chunks; fp8's
    product of the per-tensor scales (torch._scaled_mm's alpha, in fp32: scale_a * scale_b)."""
    chunk = "\n  int chunk = 0;  // C chunks this warpgroup has stored (tma_store)" if lay.c_box else ""
    if not lay.scaled:
        return chunk
    return chunk + "\n  const float scale_ab = __ldg(scale_a) * __ldg(scale_b);  // fp8's per-tensor scales"


def _scale(lay: BlockLayout, indent: str) -> str:
    """fp8: the pair times the per-tensor scales, before the fused epilogue (bias after scaling, as
    torch._scaled_mm adds its bias)."""
    return f"\n{indent}v0 *= scale_ab; v1 *= scale_ab;" if lay.scaled else ""


def _pair_float(lay: BlockLayout) -> str:
    """The pair's type: mutable where the scales or the epilogue update it."""
    return "float" if lay.view.epilogue or lay.scaled else "const float"


def end(lay: BlockLayout) -> str:
    """tma_store: before the kernel ends its last stores have read the staging buffers (the global
    writes themselves need no wait); split-K: the cluster's partials stay in shared memory until
    every block has summed."""
    if lay.c_box:
        return """
  if (tid % 128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the stores have read the buffers"""
    if lay.split > 1:
        return "\n  cluster_sync();  // the cluster's partials stay in shared memory until every block has summed"
    return ""


def k_sum(lay: BlockLayout) -> str:
    """Along K: warpgroup 1 parks its accumulators in the stages (free once both are done reading
    them, and no load lands there any more: every k-step's stage has been waited for), warpgroup 0
    adds them to its own and stores the tile; warpgroup 1 is done."""
    if not lay.along_k:
        return ""
    threads = lay.consumers * PRODUCER_THREADS
    parked = _slot_major(lay, "k_partial", PRODUCER_THREADS, 2 * PRODUCER_THREADS)
    return f"""
  float* k_partial = reinterpret_cast<float*>(smem);  // [slot][thread of warpgroup 1]
  asm volatile("bar.sync 1, {threads};" ::: "memory");  // both consumers are done reading the stages
  if (wg == 1) {{
    #pragma unroll
    for (int j = 0; j < {_slots(lay)}; ++j) {parked} = acc[j / 8].x[j % 8];
  }}
  asm volatile("bar.sync 1, {threads};" ::: "memory");  // warpgroup 1's sums are in shared memory
  if (wg == 1) return;
  #pragma unroll
  for (int j = 0; j < {_slots(lay)}; ++j) acc[j / 8].x[j % 8] += {_slot_major(lay, "k_partial", PRODUCER_THREADS, PRODUCER_THREADS)};"""


def split_partials(lay: BlockLayout) -> str:
    """Split-K: each consumer thread puts its accumulators in its block's shared memory (the
    stages, free once every consumer is done with them), slot-major so a warp's stores are
    contiguous; then the cluster waits until every block's partials are there."""
    if lay.split == 1:
        return ""
    threads = lay.consumers * 128
    return f"""
  float* partial = reinterpret_cast<float*>(smem);  // [slot][consumer thread]
  asm volatile("bar.sync 1, {threads};" ::: "memory");  // every consumer is done reading the stages
  #pragma unroll
  for (int j = 0; j < {_slots(lay)}; ++j) {_slot_major(lay, "partial", threads, PRODUCER_THREADS)} = acc[j / 8].x[j % 8];
  cluster_sync();"""


def _slots(lay: BlockLayout) -> int:
    """A consumer thread's accumulator slots (8 per 16x16 fragment)."""
    return lay.slabs * lay.frags * 8


def _slot_major(lay: BlockLayout, array: str, threads: int, first_thread: int) -> str:
    """Slot j of thread tid in ``array`` laid out [slot][thread] for ``threads`` threads from
    ``first_thread`` on: a warp's 32 accesses of one slot are contiguous."""
    return f"{array}[j * {threads} + tid - {first_thread}]"


def _offsets(lay: BlockLayout) -> tuple[str, str]:
    """(row, column) offset of consumer warpgroup wg's accumulators in the tile: its slabs (along M)
    or its columns (by columns; ping-pong warpgroups hold whole tiles)."""
    rows = f"wg * {lay.slabs * WGMMA_M} + " if lay.along_m else ""
    cols = "" if lay.along_m or lay.ping_pong else f"wg * {lay.n_wg} + "
    return rows, cols


def _from_registers(lay: BlockLayout, indent: str) -> str:
    """Each pair of accumulator slots stored from registers where its element is inside C."""
    i, n, fused = indent, lay.view.n, lay.view.epilogue
    rows, cols = _offsets(lay)
    return f"""
{i}#pragma unroll
{i}for (int s = 0; s < {lay.slabs}; ++s) {{
{i}  #pragma unroll
{i}  for (int f = 0; f < {lay.frags}; ++f) {{
{i}    #pragma unroll
{i}    for (int p = 0; p < 8; p += 2) {{
{i}      const int m = m0 + {rows}s * {WGMMA_M} + warp * 16 + 8 * (p % 4 / 2) + lane / 4;
{i}      const int n = n0 + {cols}f * 16 + 8 * (p / 4) + 2 * (lane % 4);
{i}      if (m < m_end && n < {n}) {{
{i}        {_pair_value(lay, i + "        ")}{_scale(lay, i + "        ")}{fused_pair(fused, n, lay.out_t, i + "        ")}{_pair_store(lay, i + "        ")}
{i}      }}
{i}    }}
{i}  }}
{i}}}"""


def _pair_value(lay: BlockLayout, indent: str) -> str:
    """The fp32 pair v0, v1 of slots p, p + 1 of fragment (s, f); split-K: summed over the
    cluster's blocks, block r of the cluster summing (and storing) the fragments j with
    j % split == r.  The fused epilogue updates the pair."""
    i, frags, split = indent, lay.frags, lay.split
    if split == 1:
        return f"{_pair_float(lay)} v0 = acc[s * {frags} + f].x[p], v1 = acc[s * {frags} + f].x[p + 1];"
    threads = lay.consumers * 128
    # swap_ab's few fragments are shared out by pairs (j / 2: still the same for the whole warp)
    share = "j / 2" if lay.swapped else f"(s * {frags} + f)"
    return f"""const int j = (s * {frags} + f) * 8 + p;
{i}if ({share} % {split} != split_rank) continue;
{i}float v0 = 0.0f, v1 = 0.0f;
{i}#pragma unroll
{i}for (int r = 0; r < {split}; ++r) {{  // every block's partial, this one's included
{i}  v0 += peer_load(partial + j * {threads} + tid - {PRODUCER_THREADS}, r);
{i}  v1 += peer_load(partial + (j + 1) * {threads} + tid - {PRODUCER_THREADS}, r);
{i}}}"""


def _swapped_from_registers(lay: BlockLayout, indent: str) -> str:
    """swap_ab: the tile's element [r, c] is the task's C[c, r] (row r of the tile a weight row: an
    output feature; column c a token).  A lane's pair holds columns c, c + 1 of row r; the lane
    four further (lane ^ 4) the same columns of row r ^ 1.  One exchange makes each lane's pair two
    adjacent output features of one token, even lanes (r even) token c, odd ones token c + 1: the
    task's C[m, n], C[m, n + 1], which the fused epilogue (per feature n) and the pair store take as
    unswapped.  The exchange runs on every lane (bounds are checked after); an 8-column wgmma fills
    half a fragment (slots 0-3)."""
    i, fused, tokens, features = indent, lay.view.epilogue, lay.view.n, lay.view.m
    rows, _ = _offsets(lay)
    assert lay.n_wg % 16 == 0 or lay.n_wg == 8, lay.n_wg
    slots = 8 if lay.n_wg % 16 == 0 else 4
    return f"""
{i}const int odd = (lane >> 2) & 1;  // this lane's tile row is odd: it takes the pair's second column
{i}#pragma unroll
{i}for (int s = 0; s < {lay.slabs}; ++s) {{
{i}  #pragma unroll
{i}  for (int f = 0; f < {lay.frags}; ++f) {{
{i}    #pragma unroll
{i}    for (int p = 0; p < {slots}; p += 2) {{
{i}      {_pair_value(lay, i + "      ")}{_scale(lay, i + "      ")}
{i}      const float o0 = __shfl_xor_sync(0xffffffffu, v0, 4), o1 = __shfl_xor_sync(0xffffffffu, v1, 4);
{i}      const float x0 = odd ? o1 : v0, x1 = odd ? v1 : o0;  // features n, n + 1 of token m
{i}      const int m = n0 + f * 16 + 8 * (p / 4) + 2 * (lane % 4) + odd;  // the token (the task's row)
{i}      const int n = m0 + {rows}s * {WGMMA_M} + warp * 16 + 8 * (p % 4 / 2) + (lane / 4 & ~1);  // the feature
{i}      if (m < {tokens} && n < {features}) {{
{i}        {_pair_float(lay)} v0 = x0, v1 = x1;  // the task's pair (shadowing the tile's){fused_pair(fused, features, lay.out_t, i + "        ")}{_pair_store(lay, i + "        ", features)}
{i}      }}
{i}    }}
{i}  }}
{i}}}"""


def _pair_store(lay: BlockLayout, indent: str, n_cols: int | None = None) -> str:
    """Two adjacent columns a store; with an odd N element by element (pairs are misaligned).
    ``n_cols``: the task's N where it is not the view's (swap_ab)."""
    n, out_t = n_cols or lay.view.n, lay.out_t
    if n % 2 == 0:
        return f"\n{indent}*reinterpret_cast<{lay.pair_t}*>(C + (long long)m * {n} + n) = {lay.pair};"
    return f"""
{indent}C[(long long)m * {n} + n] = ({out_t})v0;
{indent}if (n + 1 < {n}) C[(long long)m * {n} + n + 1] = ({out_t})v1;"""


def _staged(lay: BlockLayout, indent: str) -> str:
    """tma_store: chunk after chunk of 64 rows x 128 bytes (``c_box``) alternates between the
    warpgroup's two staging buffers (after the stages): wait until the store from that buffer two
    chunks ago has read it, write the chunk's accumulators (swizzled like the stages: conflict-free),
    fence them for the async proxy, then one thread stores the box and commits it as a bulk group;
    nothing waits for the global writes themselves.  TMA clips the box at C's edges, so only the
    fused epilogue's input reads need bounds."""
    i, c_box, frags, buffers = indent, lay.c_box, lay.frags, WS_STAGING_BUFFERS
    width = c_box.box[0]
    chunk_frags = width // 16
    buffer_bytes = WS_STAGING_ROWS * WS_ROW_BYTES
    rows, cols = _offsets(lay)
    pair_float = _pair_float(lay)
    return f"""
{i}{{  // C through this warpgroup's staging buffers, a TMA store a chunk of {WS_STAGING_ROWS} rows x {width} columns
{i}  unsigned char* staging = smem + STAGES * STAGE_BYTES + wg * {buffers * buffer_bytes};
{i}  #pragma unroll
{i}  for (int s = 0; s < {lay.slabs}; ++s) {{
{i}    #pragma unroll
{i}    for (int j = 0; j < {frags // chunk_frags}; ++j, ++chunk) {{
{i}      unsigned char* buf = staging + chunk % {buffers} * {buffer_bytes};
{i}      if (chunk >= {buffers}) {{  // the store from this buffer {buffers} chunks ago has read it
{i}        if (tid % 128 == 0) asm volatile("cp.async.bulk.wait_group.read {buffers - 1};" ::: "memory");
{i}        asm volatile("bar.sync %0, 128;" :: "r"(4 + wg) : "memory");
{i}      }}
{i}      #pragma unroll
{i}      for (int f = 0; f < {chunk_frags}; ++f) {{
{i}        #pragma unroll
{i}        for (int p = 0; p < 8; p += 2) {{
{i}          const int r = warp * 16 + 8 * (p % 4 / 2) + lane / 4;
{i}          const int byte = (f * 16 + 8 * (p / 4) + 2 * (lane % 4)) * {WS_ROW_BYTES // width};
{i}          {pair_float} v0 = acc[s * {frags} + j * {chunk_frags} + f].x[p], v1 = acc[s * {frags} + j * {chunk_frags} + f].x[p + 1];{_scale(lay, i + "          ")}{_staged_fused(lay, i + "          ")}
{i}          *reinterpret_cast<{lay.pair_t}*>(buf + r * {WS_ROW_BYTES} + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15)) = {lay.pair};
{i}        }}
{i}      }}
{i}      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the writes, visible to TMA
{i}      asm volatile("bar.sync %0, 128;" :: "r"(4 + wg) : "memory");
{i}      if (tid % 128 == 0) {{
{i}        tma_store_2d(map_c, buf, n0 + {cols}j * {width}, m0 + {rows}s * {WS_STAGING_ROWS});
{i}        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
{i}      }}
{i}    }}
{i}  }}
{i}}}"""


def _staged_fused(lay: BlockLayout, indent: str) -> str:
    """tma_store: the fused epilogue of a staged pair, where its element (row m, column n) is
    inside C; TMA clips the rest, whose inputs are not read."""
    fused = lay.view.epilogue
    if not fused:
        return ""
    i, width, n_cols = indent, lay.c_box.box[0], lay.view.n
    rows, cols = _offsets(lay)
    return f"""
{i}{{
{i}  const int m = m0 + {rows}s * {WS_STAGING_ROWS} + r, n = n0 + {cols}j * {width} + f * 16 + 8 * (p / 4) + 2 * (lane % 4);
{i}  if (m < m_end && n < {n_cols}) {{{fused_pair(fused, n_cols, lay.out_t, i + "    ")}
{i}  }}
{i}}}"""
