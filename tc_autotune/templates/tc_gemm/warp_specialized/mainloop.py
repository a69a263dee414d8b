"""The consumers' main loop: for each k-step, wait until the stage is full, issue the package's own
wgmma calls on it (``wgmma_source``: the ``wgmma`` path's shared layouts, descriptors
and accumulators) and release it.  With ``wgmma_in_flight`` a step's wgmma group runs on while the
next step is waited for, so the stage of step kt - 1 is released after step kt is issued and the
accumulators are read only after a drain.  The stage ring's waits and releases are ``pipeline``'s:
the kernel (``kernel.plan``) hands them in, so the emitters stand side by side, none on another."""

from __future__ import annotations

from ..wgmma_source import WGMMA_ATOM, WGMMA_M, wgmma_drain_source, wgmma_name, wgmma_source
from .layout import ATOM_BYTES, ROW_BYTES, BlockLayout

ACC = "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>"


def device_functions(lay: BlockLayout) -> str:
    """The wgmma call of a consumer's slab (and the drain of its groups in flight)."""
    drain = _drain_source(lay)[1] if lay.in_flight else ""
    return f"""
#include <mma.h>
{wgmma_source(lay.n_wg, lay.view.b.layout, lay.in_flight, lay.view.operand_dtype, lay.view.b_dtype)}
{drain}
"""


def accumulators(lay: BlockLayout) -> str:
    return f"{ACC} acc[{lay.slabs * lay.frags}];"


def zero(lay: BlockLayout, indent: str) -> str:
    """The accumulators set to zero before a tile's first k-step."""
    return f"""
{indent}#pragma unroll
{indent}for (int f = 0; f < {lay.slabs * lay.frags}; ++f) nvcuda::wmma::fill_fragment(acc[f], 0.0f);"""


def k_loop(lay: BlockLayout, step: str, indent: str, acquire, release) -> str:
    """The k-loop of one tile (along K: warpgroup wg's k-steps wg, wg + 2, ...).  ``step``: the
    ring's count of the loop's k-step kt (kt itself, or it, which a persistent block's ring runs on
    across tiles); ``acquire(step, indent)`` and ``release(lay, stage)``: the stage ring's wait for
    a full stage and its release."""
    i = indent
    count = "++kt" if step == "kt" else f"++kt, ++{step}"
    first = "0"
    if lay.along_k:  # (unpersistent only: step is kt)
        first, count = "wg", "kt += 2"
    return f"""
{i}for (int kt = {first}; kt < KT; {count}) {{{acquire(step, i + "  ")}
{i}  __syncwarp();  // wgmma is .aligned: converge the warp after the polling loop
{i}  {{{_stage_tiles(lay, i + "    ")}{_issue(lay, step, i + "    ", release)}
{i}  }}
{i}}}"""


def drain(lay: BlockLayout, indent: str) -> str:
    """With groups in flight: the wait for the last ones before the accumulators are read."""
    return f"{indent}{_drain_source(lay)[0]}(acc);" if lay.in_flight else ""


def _drain_source(lay: BlockLayout) -> tuple[str, str]:
    return wgmma_drain_source(lay.slabs * lay.frags)


def _stage_tiles(lay: BlockLayout, indent: str) -> str:
    """The consumer warpgroup wg's tiles in the stage: its slabs of A and all of B (along M), the
    whole stage (ping-pong: each warpgroup computes its own tile; along K: its own k-steps), or all
    of A and its columns of B."""
    i, stage = indent, "smem + stage * STAGE_BYTES"
    if lay.along_m:
        a_s, b_s = f"{stage} + wg * {lay.slabs * WGMMA_M * ROW_BYTES}", f"{stage} + A_BYTES"
    elif lay.ping_pong or lay.along_k:
        a_s, b_s = stage, "a_s + A_BYTES"
    else:
        b_wg_offset = lay.n_wg * ROW_BYTES if lay.b_col_major else lay.n_wg // WGMMA_ATOM * ATOM_BYTES
        a_s, b_s = stage, f"a_s + A_BYTES + wg * {b_wg_offset}"
    return f"""
{i}const unsigned char* a_s = {a_s};
{i}const unsigned char* b_s = {b_s};"""


def _issue(lay: BlockLayout, step: str, indent: str, release) -> str:
    """The step's calls, one per slab, then the release of the stage its wgmmas no longer read:
    with groups in flight, the previous step's (its groups are done once this step's calls return)."""
    i = indent
    call = wgmma_name(lay.n_wg, lay.view.b.layout, lay.in_flight, lay.view.operand_dtype, lay.view.b_dtype)
    if lay.in_flight and lay.along_k:
        done = f"if (kt >= 2) {release(lay, f'({step} - 2) % STAGES')}  // this warpgroup's step kt - 2 is done"
    elif lay.in_flight:
        done = f"if (kt > 0) {release(lay, f'({step} - 1) % STAGES')}  // step kt - 1's groups are done"
    else:
        done = release(lay, "stage")
    return f"""
{i}#pragma unroll
{i}for (int s = 0; s < {lay.slabs}; ++s)
{i}  {call}(acc, s * {lay.frags}, a_s + s * {WGMMA_M * ROW_BYTES}, b_s, {ATOM_BYTES});
{i}{done}"""
