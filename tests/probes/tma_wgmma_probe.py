"""Driver of tma_wgmma_probe.cu (issue #13, TMA loads): writes the package's wgmma device
functions into a header, compiles the probe for sm_90a, runs it on random fp16 matrices and
checks its outputs with numpy.

    python tests/probes/tma_wgmma_probe.py      # on a Hopper GPU: build, run, check, report

The checks: the raw shared-memory bytes TMA wrote (128-byte swizzle) are exactly the layout the
package's wgmma descriptors read, for A and a K-major B (an (N, K) weight) and for the two
64-column atoms of an MN-major B (a (K, N) weight); C of one m64n64k64 call (K-major B), of one
m64n128k64 call (MN-major B), and of the 3-stage warp-specialised pipeline over 1, 2, 4 and 8
k-steps, match numpy's matmul.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "tma_wgmma_probe.cu"
HEADER = "tc_wgmma_package.cuh"
# Global shapes and box offsets: M != N != K and nonzero offsets, so a swapped dimension or
# coordinate in the tensor map or the instruction loads another box.
M, N, K = 128, 192, 512
M0, N0, K0 = 64, 128, 128
N1 = 64  # first column of the (K, N) B's two atoms
K_TILES = (1, 2, 4, 8)  # fewer steps than stages, one round, a wrap (4 = K of 4 x 64), 3 rounds
TILE = 64
# -gencode, not -arch=sm_90a: nvcc 13 adds compute_90 PTX to -arch=sm_90a, where wgmma does not exist
NVCC_FLAGS = ("-O3", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-Xptxas", "-v")


def package_header() -> str:
    """The device functions the package injects for a 64-column warpgroup with a K-major
    (col_major) B: the waiting call, the in-flight call and the drain of 4 fragments; and the
    waiting call for 128 columns of an MN-major (row_major) B, two 64-column atoms."""
    import tvm

    from tc_autotune.templates.tc_gemm.operand_layout import COL_MAJOR, ROW_MAJOR
    from tc_autotune.templates.tc_gemm.wgmma_intrinsic import wgmma_drain
    from tc_autotune.templates.tc_gemm.wgmma_source import wgmma_source

    drain = wgmma_drain(tvm.tirx.Var("c", "handle"), 4).value.args[-1].value
    return "\n".join([
        "// Written by tests/probes/tma_wgmma_probe.py from tc_autotune.templates.tc_gemm.wgmma_intrinsic: do not edit.",
        "#pragma once", "#include <mma.h>",
        wgmma_source(64, COL_MAJOR), wgmma_source(64, COL_MAJOR, in_flight=True), drain,
        wgmma_source(128, ROW_MAJOR)])


def build(out_dir: Path, nvcc: str) -> tuple[Path, str]:
    """Compile and link the probe into ``out_dir``: (the executable, ptxas's -v messages).
    Raises RuntimeError with nvcc's diagnostics when it fails."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / HEADER).write_text(package_header())
    binary = out_dir / "tma_wgmma_probe"
    # NVIDIA's pip wheels (the test extra's nvcc) keep the CUDA runtime's static libraries in
    # nvidia/cu13/lib, beside bin/, where their nvcc.profile does not look (targets/<arch>/lib)
    lib = Path(nvcc).parent.parent / "lib"
    libs = ["-L", str(lib)] if (lib / "libcudart_static.a").exists() else []
    cmd = [nvcc, *NVCC_FLAGS, *libs, "-I", str(out_dir), "-o", str(binary), str(SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    return binary, proc.stderr


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    """Random fp16 row-major A (M, K), B (N, K) and Bkn (K, N) (no zeros to hide a miss)."""
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1, 1, shape).astype(np.float16)
            for name, shape in (("a", (M, K)), ("b", (N, K)), ("bkn", (K, N)))}


def run(binary: Path, work: Path, mats: dict[str, np.ndarray], timeout: float = 120) -> dict:
    """Run the probe on ``inputs``' matrices: {"tiles": 16384 raw bytes (A tile, B tile),
    "single": C (64, 64), "multi": {k_tiles: C (64, 64)}, "tiles_kn": 16384 raw bytes (two
    atoms), "kn": C (64, 128)}."""
    work.mkdir(parents=True, exist_ok=True)
    for name, mat in mats.items():
        mat.tofile(work / f"{name}.bin")
    args = [str(binary), str(work), *map(str, (M, N, K, M0, N0, K0, N1, *K_TILES))]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"the probe failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")

    def c(name, cols=TILE):
        return np.fromfile(work / f"{name}.bin", np.float32).reshape(TILE, cols)

    return {"tiles": (work / "tiles.bin").read_bytes(), "single": c("c_single"),
            "multi": {kt: c(f"c_multi_{kt}") for kt in K_TILES},
            "tiles_kn": (work / "tiles_kn.bin").read_bytes(), "kn": c("c_kn", 2 * TILE)}


def swizzled_128b(tile: np.ndarray) -> bytes:
    """The bytes of a (64 rows, 64 k) fp16 tile as the package's wgmma descriptors read them:
    element (r, k) at byte r * 128 + ((2k / 16) ^ (r % 8)) * 16 + (2k) % 16.  (A B atom is
    (64 k, 64 n): the same with r = k and the column n.)"""
    r, k = np.meshgrid(np.arange(TILE), np.arange(TILE), indexing="ij")
    offset = r * 128 + ((k * 2 // 16) ^ (r % 8)) * 16 + (k * 2) % 16
    out = np.empty(TILE * TILE, np.uint16)
    out[offset // 2] = np.ascontiguousarray(tile).view(np.uint16)
    return out.tobytes()


def expected(mats: dict[str, np.ndarray]) -> dict:
    """What ``run`` must return (C in float64: fp16 products are exact in fp32)."""
    a, b, bkn = mats["a"], mats["b"], mats["bkn"]
    rows, k = slice(M0, M0 + TILE), slice(K0, K0 + TILE)
    atoms = [bkn[k, N1 + j * TILE:N1 + (j + 1) * TILE] for j in range(2)]
    a64, b64, bkn64 = (x.astype(np.float64) for x in (a, b, bkn))
    return {
        "tiles": swizzled_128b(a[rows, k]) + swizzled_128b(b[N0:N0 + TILE, k]),
        "single": a64[rows, k] @ b64[N0:N0 + TILE, k].T,
        "multi": {kt: a64[rows, :kt * TILE] @ b64[N0:N0 + TILE, :kt * TILE].T for kt in K_TILES},
        "tiles_kn": swizzled_128b(atoms[0]) + swizzled_128b(atoms[1]),
        "kn": a64[rows, k] @ bkn64[k, N1:N1 + 2 * TILE],
    }


def mismatches(got: dict, want: dict) -> list[str]:
    """Every check that fails, in words (empty: the probe passed)."""
    found = []
    tiles = [("A tile", "tiles", 0), ("B (N, K) tile", "tiles", 1),
             ("B (K, N) atom 0", "tiles_kn", 0), ("B (K, N) atom 1", "tiles_kn", 1)]
    for name, key, i in tiles:
        g = np.frombuffer(got[key][i * 8192:(i + 1) * 8192], np.uint16)
        w = np.frombuffer(want[key][i * 8192:(i + 1) * 8192], np.uint16)
        if g.shape != w.shape or not np.array_equal(g, w):
            found.append(f"{name}: {int(np.sum(g != w)) if g.shape == w.shape else 'size'} "
                         f"of {w.size} fp16 elements are not where the descriptors expect them")
    cs = [("single-stage C", got["single"], want["single"])]
    cs += [(f"{kt}-step pipelined C", got["multi"][kt], want["multi"][kt]) for kt in K_TILES]
    cs += [("(K, N) B C", got["kn"], want["kn"])]
    for name, g, w in cs:
        if not np.isfinite(g).all():
            found.append(f"{name}: {int(np.sum(~np.isfinite(g)))} elements unwritten (NaN)")
        elif not np.allclose(g, w, rtol=1e-3, atol=1e-2):
            found.append(f"{name}: max |error| {np.max(np.abs(g - w)):.3g} "
                         f"({int(np.sum(~np.isclose(g, w, rtol=1e-3, atol=1e-2)))} of {g.size} off)")
    return found


def main() -> int:
    import tempfile

    from tc_autotune.backends.cuda.toolkit import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        print("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
        return 2
    with tempfile.TemporaryDirectory(prefix="tma_probe_") as tmp:
        binary, ptxas = build(Path(tmp), nvcc)
        print(ptxas.strip())
        mats = inputs()
        found = mismatches(run(binary, Path(tmp) / "work", mats), expected(mats))
    print("\n".join(found) if found else f"TMA probe passed: tiles exact, every C matches (k-steps {K_TILES})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent.parent))  # the checkout's tc_autotune
    sys.exit(main())
