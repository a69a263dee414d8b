"""An operand's layout: which matrix axis its tensor is contiguous along, and the suffix the names
of code made for a B of that layout take.  Data only (no import): what the GEMM view, the
intrinsics and wgmma's CUDA text all read."""

# An operand's layout: which matrix axis its tensor is contiguous along (the names WMMA
# gives a fragment's layout).  ROW_MAJOR: along the columns, the inner axis (A: K, B and C:
# N); COL_MAJOR: along the rows (B: K, an nn.Linear (N, K) weight).
ROW_MAJOR = "row_major"
COL_MAJOR = "col_major"


def b_tag(b_layout: str) -> str:
    """The suffix of the names of code made for a B tile stored in ``b_layout`` (the intrinsics'
    and wgmma's device functions): none for row_major, the layout every name had before."""
    return "" if b_layout == ROW_MAJOR else "_bcol"
