"""The stage ring: ``stages`` shared-memory stages of A and B tiles, each with a *full* mbarrier
(the stage's copies have landed) and an *empty* one (every consumer is done reading it).  The
producer fills stage kt % stages with the tiles of k-step kt once *empty* says the stage is free;
the consumers wait on *full*, read it and arrive on *empty*.  The roles meet on nothing else, so
neither waits on a block-wide barrier in the main loop.

How the producer fills a stage: one thread issues TMA boxes (128-byte swizzle, the bytes counted
on the stage's *full* barrier) for B, and for A where its tile is a box of the data (or, with row
boxes, the producer warp's lanes issue one box per output row); any other A is gathered by the
whole producer warpgroup with 16-byte ``cp.async``, each thread arriving on *full* when its copies
land.  fp32 input is converted on the way (``convert``): the producer warpgroup loads A's and B's
fp32 elements with plain vector loads, stores them as fp16 into the swizzled stages, makes the stores
visible to wgmma (a proxy fence) and arrives on *full*: the cast is folded into the load, with no
cast kernel before the GEMM.  With ``multicast_b`` each block of a cluster pair loads half of B's
boxes into both blocks' stages, and a stage is free once both blocks' consumer warps have released it."""

from __future__ import annotations

from ..knobs import PRODUCER_THREADS
from .boxes import Im2colBox, TmaBox, _element
from .layout import ATOM_BYTES, ROW_BYTES, WGMMA_ATOM, BlockLayout, fixed_cuda

CHUNK = 8  # fp16 (bf16) elements per 16-byte cp.async
# An mbarrier wait that never completes traps instead of hanging (mbar_wait in pipeline.cuh, which
# writes it as its literal).
WAIT_LIMIT_NS = 2_000_000_000


def helpers(lay: BlockLayout) -> str:
    """The device functions the ring's code calls: mbarriers, TMA loads and cp.async; the cluster's
    barrier and shared memory (split-K, multicast); multicast loads; im2col loads; a gathered bf16 A's
    cp.async."""
    files = ["pipeline.cuh"] + ["bf16.cuh"] * (lay.gather and lay.bf16) + ["convert.cuh"] * lay.convert
    files += ["cluster.cuh"] * (lay.split > 1 or lay.multicast) + ["multicast.cuh"] * lay.multicast
    files += ["im2col.cuh"] * lay.im2col
    return "".join("\n" + fixed_cuda(name) for name in files)


def ring(lay: BlockLayout, after_stages: int) -> str:
    """The ring's shared memory: the stages from the first 1024-byte boundary (the swizzle pattern
    repeats every 8 rows of 128 bytes), ``after_stages`` bytes of the epilogue's, then the barriers;
    with multicast, which half of B this block loads."""
    after = f" + {after_stages}" if after_stages else ""
    rank = "\n  const unsigned cta_rank = blockIdx.x % 2;  // in the multicast pair" if lay.multicast else ""
    return f"""{rank}
  constexpr int A_BYTES = {lay.a_bytes}, STAGE_BYTES = {lay.a_bytes + lay.b_bytes};
  unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  unsigned long long* full = reinterpret_cast<unsigned long long*>(smem + STAGES * STAGE_BYTES{after});
  unsigned long long* empty = full + STAGES;"""


def init(lay: BlockLayout, pdl: bool = False) -> str:
    """Thread 0 initialises the barriers: *full* completes on thread 0's arrival with the stage's
    TMA bytes (and, gathered, the producer threads' cp.async arrivals); *empty* on every consumer
    thread's arrival, or with multicast on each consumer warp's lane 0 of both blocks.  ``pdl``:
    then ``grid_dependency``'s waits (without it the text is the same as before the option)."""
    full_count = (PRODUCER_THREADS if lay.gather else 0) + (not lay.convert)  # thread 0's TMA bytes
    empty_count = 2 * lay.readers * 4 if lay.multicast else lay.readers * 128
    if lay.multicast:
        sync = "cluster_sync();  // both blocks' barriers are initialised before either multicasts into the other"
    else:
        sync = "__syncthreads();  // the only block-wide barrier: from here the roles meet on mbarriers"
    return f"""
  if (tid == 0) {{
    for (int s = 0; s < STAGES; ++s) {{
      mbar_init(&full[s], {full_count});
      mbar_init(&empty[s], {empty_count});
    }}
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }}
  {sync}""" + (grid_dependency() if pdl else "")


def grid_dependency() -> str:
    """Programmatic Dependent Launch (``tc_gemm.pdl``): every thread waits for the kernels before
    this one (their writes visible) and then lets the next one start.  Placed after the barriers'
    initialisation and its sync, which read no global memory (nor does anything before them: the
    tile's coordinates, the ring's addresses), and before the roles part: the producer's first
    TMA or cp.async load, the consumers' scale, bias, residual and C accesses all follow."""
    return """
  asm volatile("griddepcontrol.wait;" ::: "memory");  // PDL: the kernels before this one are done
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");  // PDL: the next one may start"""


def producers(lay: BlockLayout) -> tuple[str, str]:
    """(the condition of the producer warpgroup's threads that copy, why): the others exit.  (A
    gathering producer's condition holds for all of them; its comment is the TMA one's.)"""
    if lay.convert:
        return f"tid < {PRODUCER_THREADS}", "every thread converts its chunks of A and B"
    if lay.gather:
        return f"tid < {PRODUCER_THREADS}", "TMA only: one thread issues every copy"
    if lay.row_boxes:
        return "tid < 32", "TMA only: a warp, its lanes issue the rows' boxes"
    return "tid < 1", "TMA only: one thread issues every copy"


def producer_loop(lay: BlockLayout, step: str, first_k: str, indent: str) -> str:
    """The producer's k-loop over the block's tile: step ``step`` (the ring's count: kt, or it
    across a persistent block's tiles) fills stage step % STAGES once its previous fill's readers
    are done; ``first_k``: the k-step of the loop's kt (split-K: its K slice's)."""
    i = indent
    count = "++kt" if step == "kt" else f"++kt, ++{step}"
    return f"""
{i}for (int kt = 0; kt < KT; {count}) {{
{i}  const int stage = {step} % STAGES;
{i}  if ({step} >= STAGES) mbar_wait(&empty[stage], ({step} / STAGES - 1) & 1);{_fill(lay, first_k, i + "  ")}
{i}}}"""


def producer_end(lay: BlockLayout) -> str:
    """A gathering producer waits for its last copies before it exits (a converting one's loads
    and stores are done when it arrives)."""
    return """
    asm volatile("cp.async.wait_all;" ::: "memory");""" if lay.gather and not lay.convert else ""


def consumer_acquire(step: str, indent: str) -> str:
    """A consumer's wait for the stage of ring step ``step``."""
    return f"""
{indent}const int stage = {step} % STAGES;
{indent}mbar_wait(&full[stage], ({step} / STAGES) & 1);"""


def release(lay: BlockLayout, stage: str) -> str:
    """A consumer is done with ``stage``: its thread arrives on the stage's *empty* barrier; with
    multicast, lane 0 of each warp on both blocks' barriers (the peer's producer fills it too)."""
    return f"{'release_stage_pair' if lay.multicast else 'mbar_arrive'}(&empty[{stage}]);"


def cluster_end(lay: BlockLayout) -> str:
    """With multicast, neither block of the pair exits while the other may still arrive on its barriers."""
    if not lay.multicast:
        return ""
    return "\n  cluster_sync();  // the peer may still arrive on this block's barriers until both are done"


def _fill(lay: BlockLayout, first_k: str, indent: str) -> str:
    """One stage's copies: k-step ``first_k``'s A and B tiles (k0: its first column of A)."""
    i = indent
    head = f"""
{i}unsigned char* a_s = smem + stage * STAGE_BYTES;
{i}unsigned char* b_s = a_s + A_BYTES;
{i}const int k0 = {first_k} * {lay.k_step};"""
    if lay.convert:
        return head + _convert(lay, i)
    return head + _tma_issue(lay, i) + _gather(lay, i)


def _tma_issue(lay: BlockLayout, indent: str) -> str:
    """Thread 0 posts the stage's bytes on *full* and issues the boxes: B's land as [n][k] rows or
    64-column atoms, A's as its K-major rows, all 128-byte swizzled; with multicast, this block's
    half of each B box lands in both blocks, whose barriers count the whole B.  Row boxes: the
    producer warp's lanes issue the output rows' boxes (a row past the last image reads zeros;
    bytes landing before the expect_tx are allowed, the phase cannot complete until thread 0 has
    arrived)."""
    i = indent
    half = f" + cta_rank * {lay.b_boxes[0].box[1] * ROW_BYTES}" if lay.multicast else ""
    boxes = [("map_b", f"b_s + {j * ATOM_BYTES}{half}", box) for j, box in enumerate(lay.b_boxes)]
    if lay.a_box is not None and not lay.row_boxes:
        boxes.insert(0, ("map_a", "a_s", lay.a_box))
    tx = (sum(box.bytes for _, _, box in boxes) + (lay.tile.rows * lay.a_box.bytes if lay.row_boxes else 0)
          + (sum(box.bytes for box in lay.b_boxes) if lay.multicast else 0))  # the peer's half of B
    loads = "".join(f"\n{i}  {_tma_load(lay, *box)}" for box in boxes)
    text = f"""
{i}if (tid == 0) {{
{i}  mbar_arrive_expect_tx(&full[stage], {tx});{loads}
{i}}}"""
    if lay.row_boxes:
        tile = lay.tile
        text += f"""
{i}for (int r = tid; r < {tile.rows}; r += 32) {{
{i}  const int row_img = (m_tile * {tile.rows} + r) / {tile.height}, row_oh = (m_tile * {tile.rows} + r) % {tile.height};
{i}  {_tma_load(lay, "map_a", f"a_s + r * {tile.width * ROW_BYTES}", lay.a_box)}
{i}}}"""
    return text


def _tma_load(lay: BlockLayout, tmap: str, dst: str, box: TmaBox | Im2colBox) -> str:
    if isinstance(box, Im2colBox):
        return f"tma_load_im2col_4d({dst}, {tmap}, &full[stage], {', '.join(box.coords)}, {', '.join(box.offsets)});"
    if lay.multicast and tmap == "map_b":
        return f"tma_load_2d_multicast({dst}, {tmap}, &full[stage], {', '.join(box.coords)}, 0x3);"
    return f"tma_load_{len(box.box)}d({dst}, {tmap}, &full[stage], {', '.join(box.coords)});"


def _gather(lay: BlockLayout, indent: str) -> str:
    """A gathered A: the producer warpgroup's 16-byte cp.async (zeros outside A), thread t copying
    chunks t, t + 128, ... into the swizzled rows; each thread's arrival on *full* waits for its copies."""
    if not lay.gather:
        return ""
    i, m, k = indent, lay.view.m, lay.view.k
    offset, inside = _element(lay.view.a, m, k, "m", "k")
    return f"""
{i}#pragma unroll
{i}for (int j = 0; j < {lay.bm * CHUNK // PRODUCER_THREADS}; ++j) {{  // A rows, K-major
{i}  const int r = tid / {CHUNK} + {PRODUCER_THREADS // CHUNK} * j, c = tid % {CHUNK};
{i}  const int m = m0 + r, k = k0 + c * {CHUNK};
{i}  copy16(a_s + r * {ROW_BYTES} + ((c ^ (r & 7)) << 4), A, {inside}, {offset});
{i}}}
{i}asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(smem_u32(&full[stage])) : "memory");"""


# Chunks a converting thread loads before it stores any: 8 x 32 bytes of fp32 in flight (64
# registers), so a stage's loads overlap instead of waiting one by one.
CONVERT_BATCH = 8


def _convert(lay: BlockLayout, indent: str) -> str:
    """fp32 A and B into one stage as fp16: each of the producer warpgroup's threads takes 8-element
    chunks q = t, t + 128, ... of A's rows (K-major, as a gathered A's) and of B's rows ([n][k]) or
    64-column atoms ([k][n]), loads them in batches of ``CONVERT_BATCH`` (zeros outside the
    operand), stores each as 16 bytes of fp16 at its swizzled place (row r, 16-byte column c), fences
    the stores for wgmma and arrives on *full*."""
    i = indent
    view = lay.view
    m, n, k = view.shape
    a_at = _element(view.a, m, k, "m", "k")
    b_at = _element(view.b, k, n, "k", "n")
    rows = f"const int r = q / {CHUNK}, c = q % {CHUNK};"
    a = (rows, f"const int m = m0 + r, k = k0 + c * {CHUNK};", "a_s")
    if lay.b_col_major:  # [n][k]: a row per column of the tile, as A's
        b = (rows, f"const int n = n0 + r, k = k0 + c * {CHUNK};", "b_s")
    else:  # [k][n]: 64-column atoms of k_step rows, atom after atom
        atom = WGMMA_ATOM // CHUNK * lay.k_step  # chunks of an atom
        b = (f"const int r = q % {atom} / {CHUNK}, c = q % {CHUNK};",
             f"const int k = k0 + r, n = n0 + q / {atom} * {WGMMA_ATOM} + c * {CHUNK};",
             f"b_s + q / {atom} * {ATOM_BYTES}")
    return (_convert_operand("A", lay.bm * CHUNK, *a, *a_at, i) + _convert_operand("B", lay.bn * CHUNK, *b, *b_at, i)
            + f"""
{i}asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores, visible to wgmma
{i}mbar_arrive(&full[stage]);""")


def _convert_operand(name: str, chunks: int, place: str, element: str, base: str, offset: str, inside: str,
                     indent: str) -> str:
    """One operand's converting copy: ``chunks`` 8-element chunks, chunk q's swizzled place (row r,
    16-byte column c of the 128-byte rows from ``base``) given by the C statements ``place``, its
    GEMM element by ``element``."""
    i = indent
    per_thread = chunks // PRODUCER_THREADS
    batch = max(b for b in range(1, CONVERT_BATCH + 1) if per_thread % b == 0)
    return f"""
{i}#pragma unroll
{i}for (int j0 = 0; j0 < {per_thread}; j0 += {batch}) {{  // {name}: {chunks} chunks, {batch} a batch
{i}  float4 v[{batch}][2];
{i}  #pragma unroll
{i}  for (int j = 0; j < {batch}; ++j) {{
{i}    const int q = tid + {PRODUCER_THREADS} * (j0 + j);
{i}    {place} {element}
{i}    load8_f32(v[j], {name}, {inside}, {offset});
{i}  }}
{i}  #pragma unroll
{i}  for (int j = 0; j < {batch}; ++j) {{
{i}    const int q = tid + {PRODUCER_THREADS} * (j0 + j);
{i}    {place}
{i}    store8_f16({base} + r * {ROW_BYTES} + ((c ^ (r & 7)) << 4), v[j]);
{i}  }}
{i}}}"""
