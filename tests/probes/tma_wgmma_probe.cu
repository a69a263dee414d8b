// Standalone probe for issue #13's first lever: TMA loads feeding the package's wgmma path.
//
// A CUtensorMap in tile mode with CU_TENSOR_MAP_SWIZZLE_128B copies a 64 x 64 fp16 box
// (64 rows of 128 B) into shared memory; completion is counted in bytes on an mbarrier.
// The question is whether the bytes land where the package's wgmma descriptors look for them:
// 16-byte chunk c of 128-byte row r at chunk c ^ (r % 8), i.e. element (r, k) at byte
//   r * 128 + ((2k / 16) ^ (r % 8)) * 16 + (2k) % 16
// (tc_autotune/templates/tc_gemm/wgmma_source.py, its opening comment).  Four checks:
//   tiles   : the raw shared bytes of an A and a B tile, written back to global (check A);
//   single  : one warpgroup, the package's own m64n64k64 call on TMA-loaded A (M, K) and
//             B (N, K), both K-major (b_layout col_major), C = A B^T in fp32 (check B);
//   multi   : a warp-specialised pipeline, S stages over k_tiles k-steps, a full/empty mbarrier
//             pair per stage; the consumers keep one wgmma group in flight (the package's
//             _in_flight call) and free a stage once its group is done;
//   kn      : B as a (K, N) row-major matrix (conv2d's HWIO weight, dense b=kn): two boxes of
//             (64 k rows, 64 n) are the package's two 64-column MN-major atoms of an m64n128k64
//             call (b_layout row_major, LBO = the atom stride); raw atom bytes and C checked.
// The wgmma device functions are not copied here: the driver (tma_wgmma_probe.py) writes
// tc_wgmma_package.cuh from tc_autotune.intrinsics, so this probe checks the package's encoding.
// Build (what the driver runs; -gencode because nvcc 13's -arch=sm_90a also makes compute_90
// PTX, which has no wgmma):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I DIR_OF_HEADER tma_wgmma_probe.cu
// No -lcuda: cuTensorMapEncodeTiled comes from the driver through the runtime's entry-point query.
//
// Usage: tma_wgmma_probe DIR M N K m0 n0 k0 n1 KT...   (sm_90a; DIR holds a.bin, b.bin, bkn.bin)
//   a.bin: M x K fp16 row-major (K contiguous); b.bin: N x K fp16 row-major; bkn.bin: K x N.
//   writes DIR/tiles.bin (A then B tile, 8192 B each, at rows m0 / n0, column k0),
//   DIR/c_single.bin (64 x 64 fp32 = A[m0:+64, k0:+64] B[n0:+64, k0:+64]^T), for each KT
//   DIR/c_multi_KT.bin (64 x 64 fp32 = A[m0:+64, :64 KT] B[n0:+64, :64 KT]^T), and
//   DIR/tiles_kn.bin (the two atoms of Bkn[k0:+64, n1:+128]), DIR/c_kn.bin (64 x 128 fp32 =
//   A[m0:+64, k0:+64] Bkn[k0:+64, n1:+128]).
#include <cuda.h>  // CUtensorMap and cuTensorMapEncodeTiled's types (the function comes from the runtime)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tc_wgmma_package.cuh"  // tc_wgmma_m64n64k64_bcol{,_in_flight}, tc_wgmma_drain_4, tc_wgmma_m64n128k64

using namespace nvcuda;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int TILE_ROWS = 64;                           // box rows (one wgmma M, one B n-block)
constexpr int TILE_K = 64;                              // box columns: 64 fp16 = one 128-byte row
constexpr int TILE_BYTES = TILE_ROWS * TILE_K * 2;      // 8192
constexpr int STAGES = 3;
constexpr int CONSUMERS = 128;                          // one warpgroup
constexpr unsigned long long WAIT_LIMIT_NS = 2000000000ull;  // a lost arrival traps (2 s), not hangs

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The 128-byte swizzle is a function of shared-memory address bits [4:6] ^ [7:9] (TMA writes
// and wgmma reads alike), and the descriptors carry base offset 0: a tile must start on a
// 1024-byte boundary (8 rows x 128 B) for its pattern to be chunk c ^ (r % 8) from its row 0.
// The dynamic window's start is not promised to be 1024-aligned, so round up (1 KB spare).
__device__ __forceinline__ unsigned char* align1024(unsigned char* p) {
  return p + ((1024u - (smem_addr(p) & 1023u)) & 1023u);
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the async proxy (TMA's complete_tx); the
// __syncthreads that follows makes them visible to the other threads.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival plus the bytes the phase must still receive: the phase completes when the
// arrivals reach the count AND the transaction count is back at zero.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Wait until the phase with this parity has completed (try_wait.parity is true once the
// barrier's current phase parity differs from `parity`).  The braces keep the predicate
// register local, so the asm can be inlined many times.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const unsigned long long start = global_ns();
  for (;;) {
    uint32_t done;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
    if (done) return;
    // No printf here: a call inside the k-loop makes ptxas serialize the wgmmas (C7510).
    if (global_ns() - start > WAIT_LIMIT_NS) __trap();
  }
}

// One box of `map` at (x = column in elements, innermost first; y = row) into `dst`, its
// bytes counted on `bar`.  The map is a __grid_constant__ kernel parameter: its generic
// address is what the instruction takes (it lives in the param/constant space).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
}

// The warpgroup's 64 x (16 FRAGS) fp32 tile: warp w holds rows 16w..16w+15, fragment f
// columns 16f.. (the package's WMMA store serves wgmma's accumulators the same way).
template <int FRAGS>
__device__ __forceinline__ void store_c(Acc* c, float* out) {
  const int warp = threadIdx.x / 32 % 4;
#pragma unroll
  for (int f = 0; f < FRAGS; ++f)
    wmma::store_matrix_sync(out + warp * 16 * 16 * FRAGS + f * 16, c[f], 16 * FRAGS, wmma::mem_row_major);
}

// Checks A and B: one TMA phase, one m64n64k64 call.
__global__ void __launch_bounds__(CONSUMERS) single_stage(const __grid_constant__ CUtensorMap map_a,
                                                          const __grid_constant__ CUtensorMap map_b, int m0,
                                                          int n0, int k0, uint4* tiles_out, float* c_out) {
  extern __shared__ unsigned char dyn_smem[];
  unsigned char* base = align1024(dyn_smem);
  half* a_tile = reinterpret_cast<half*>(base);
  half* b_tile = reinterpret_cast<half*>(base + TILE_BYTES);
  uint64_t* bar = reinterpret_cast<uint64_t*>(base + 2 * TILE_BYTES);
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);  // the one expect_tx arrival below
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar, 2 * TILE_BYTES);
    tma_load_2d(a_tile, &map_a, bar, k0, m0);
    tma_load_2d(b_tile, &map_b, bar, k0, n0);
  }
  mbar_wait(bar, 0);  // phase 0 completes when both boxes have landed
  __syncwarp();       // wgmma is .aligned: the warp must be converged after the polling loop
  for (int i = threadIdx.x; i < 2 * TILE_BYTES / 16; i += CONSUMERS)  // raw bytes, swizzle and all
    tiles_out[i] = reinterpret_cast<const uint4*>(base)[i];
  Acc c[4];
#pragma unroll
  for (int f = 0; f < 4; ++f) wmma::fill_fragment(c[f], 0.0f);
  tc_wgmma_m64n64k64_bcol(c, 0, a_tile, b_tile, 0);  // every warp passes the slab's start
  store_c<4>(c, c_out);
}

// The warp-specialised pipeline: warps 0-3 consume (one warpgroup), warp 4's lane 0 produces.
//   full[s]:  count 1 (the producer's expect_tx arrival) + the stage's bytes;
//   empty[s]: count CONSUMERS (every consumer thread arrives once its wgmma read the stage).
// Step kt uses stage s = kt % STAGES in round r = kt / STAGES; the round-r fill of s completes
// full[s]'s phase r (parity r & 1), and the release of round r completes empty[s]'s phase r.
__global__ void __launch_bounds__(CONSUMERS + 32) multi_stage(const __grid_constant__ CUtensorMap map_a,
                                                              const __grid_constant__ CUtensorMap map_b, int m0,
                                                              int n0, int k_tiles, float* c_out) {
  extern __shared__ unsigned char dyn_smem[];
  unsigned char* base = align1024(dyn_smem);
  auto a_tile = [&](int s) { return base + s * 2 * TILE_BYTES; };
  auto b_tile = [&](int s) { return base + s * 2 * TILE_BYTES + TILE_BYTES; };
  uint64_t* full = reinterpret_cast<uint64_t*>(base + STAGES * 2 * TILE_BYTES);
  uint64_t* empty = full + STAGES;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], CONSUMERS);
    }
    mbar_init_fence();
  }
  __syncthreads();  // the last block-wide barrier: the roles never meet again but on mbarriers

  if (threadIdx.x >= CONSUMERS) {  // producer warp
    if (threadIdx.x == CONSUMERS) {  // one thread issues every copy
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES, round = kt / STAGES;
        // Round r > 0 reuses the stage of step kt - STAGES: wait for its release (phase r - 1).
        if (round > 0) mbar_wait(&empty[s], (round - 1) & 1);
        mbar_arrive_expect_tx(&full[s], 2 * TILE_BYTES);
        tma_load_2d(a_tile(s), &map_a, &full[s], kt * TILE_K, m0);
        tma_load_2d(b_tile(s), &map_b, &full[s], kt * TILE_K, n0);
      }
    }
    return;  // the copies complete on the barriers; the consumers keep the block alive
  }

  Acc c[4];
#pragma unroll
  for (int f = 0; f < 4; ++f) wmma::fill_fragment(c[f], 0.0f);
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % STAGES;
    mbar_wait(&full[s], (kt / STAGES) & 1);
    __syncwarp();  // wgmma is .aligned: the warp must be converged after the polling loop
    // Commits step kt's group and returns once step kt - 1's group is done (wait_group 1):
    // only then may step kt - 1's stage be refilled.
    tc_wgmma_m64n64k64_bcol_in_flight(c, 0, a_tile(s), b_tile(s), 0);
    if (kt > 0) mbar_arrive(&empty[(kt - 1) % STAGES]);
  }
  tc_wgmma_drain_4(c);  // the last group (nobody refills its stage)
  store_c<4>(c, c_out);
}

// An MN-major B: boxes of (64 k rows, 64 n) of a (K, N) row-major matrix are the package's
// 64-column atoms (row k of an atom = 128 B of n, swizzled like A's rows); atom j at
// b_tile + j * TILE_BYTES, so the descriptor's LBO (the atom stride) is TILE_BYTES.
__global__ void __launch_bounds__(CONSUMERS) single_stage_kn(const __grid_constant__ CUtensorMap map_a,
                                                             const __grid_constant__ CUtensorMap map_bkn, int m0,
                                                             int n1, int k0, uint4* atoms_out, float* c_out) {
  extern __shared__ unsigned char dyn_smem[];
  unsigned char* base = align1024(dyn_smem);
  unsigned char* a_tile = base;
  unsigned char* b_tile = base + TILE_BYTES;  // two atoms
  uint64_t* bar = reinterpret_cast<uint64_t*>(base + 3 * TILE_BYTES);
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar, 3 * TILE_BYTES);
    tma_load_2d(a_tile, &map_a, bar, k0, m0);
    for (int j = 0; j < 2; ++j) tma_load_2d(b_tile + j * TILE_BYTES, &map_bkn, bar, n1 + j * 64, k0);
  }
  mbar_wait(bar, 0);
  __syncwarp();
  for (int i = threadIdx.x; i < 2 * TILE_BYTES / 16; i += CONSUMERS)
    atoms_out[i] = reinterpret_cast<const uint4*>(b_tile)[i];
  Acc c[8];
#pragma unroll
  for (int f = 0; f < 8; ++f) wmma::fill_fragment(c[f], 0.0f);
  tc_wgmma_m64n128k64(c, 0, a_tile, b_tile, TILE_BYTES);
  store_c<8>(c, c_out);
}

// ---- host ------------------------------------------------------------------------------

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) {                                                        \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's encoder through the runtime: no -lcuda at link time (the ABI of the 12.0 version).
static EncodeTiled encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    fprintf(stderr, "cuTensorMapEncodeTiled not found in the driver\n");
    exit(1);
  }
  return reinterpret_cast<EncodeTiled>(fn);
}

// A row-major fp16 (rows x cols) matrix, cols contiguous, read in 64 x 64 boxes, 128 B swizzle.
static CUtensorMap tile_map(EncodeTiled encode, void* data, uint64_t rows, uint64_t cols) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cols, rows};                 // innermost first
  const cuuint64_t strides[1] = {cols * sizeof(half)};     // bytes between rows (dim 0's is implied)
  const cuuint32_t box[2] = {TILE_K, TILE_ROWS};           // 64 x 2 B = 128 B: the swizzle span
  const cuuint32_t elem_strides[2] = {1, 1};
  CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, data, dims, strides, box, elem_strides,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
    exit(1);
  }
  return map;
}

static std::vector<char> read_file(const std::string& path, size_t bytes) {
  std::vector<char> buf(bytes);
  FILE* f = fopen(path.c_str(), "rb");
  if (!f || fread(buf.data(), 1, bytes, f) != bytes) {
    fprintf(stderr, "cannot read %zu bytes from %s\n", bytes, path.c_str());
    exit(1);
  }
  fclose(f);
  return buf;
}

// DIR/name <- the first `bytes` of device memory `dev`.
static void save(const std::string& path, const void* dev, size_t bytes) {
  std::vector<char> host(bytes);
  CHECK(cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost));
  FILE* f = fopen(path.c_str(), "wb");
  if (!f || fwrite(host.data(), 1, bytes, f) != bytes) {
    fprintf(stderr, "cannot write %s\n", path.c_str());
    exit(1);
  }
  fclose(f);
}

// Before a launch: tiles zeroed, C all NaN (0xFF bytes), so an unwritten element shows.
static void poison(void* tiles, float* c) {
  CHECK(cudaMemset(tiles, 0, 2 * TILE_BYTES));
  CHECK(cudaMemset(c, 0xFF, 64 * 128 * sizeof(float)));
}

// After a launch: its errors, including a trap on an mbarrier wait that timed out.
static void finish(const char* kernel) {
  CHECK(cudaGetLastError());
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    fprintf(stderr, "%s failed: %s (a trap is an mbarrier wait that timed out after 2 s: a lost "
            "arrival, a wrong parity or byte count, or a TMA that never completed)\n", kernel,
            cudaGetErrorString(err));
    exit(1);
  }
}

template <typename T>
static T* to_device(const std::vector<char>& host) {
  void* p;
  CHECK(cudaMalloc(&p, host.size()));
  CHECK(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

int main(int argc, char** argv) {
  if (argc < 9) {
    fprintf(stderr, "usage: %s DIR M N K m0 n0 k0 n1 [KT...]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int M = atoi(argv[2]), N = atoi(argv[3]), K = atoi(argv[4]);
  const int m0 = atoi(argv[5]), n0 = atoi(argv[6]), k0 = atoi(argv[7]), n1 = atoi(argv[8]);
  if (K % TILE_K || m0 + TILE_ROWS > M || n0 + TILE_ROWS > N || k0 + TILE_K > K || n1 + 128 > N) {
    fprintf(stderr, "bad shape or offsets\n");
    return 2;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) {
    fprintf(stderr, "needs an sm_90 GPU, this is sm_%d%d\n", prop.major, prop.minor);
    return 3;
  }
  half* a = to_device<half>(read_file(dir + "/a.bin", size_t(M) * K * 2));
  half* b = to_device<half>(read_file(dir + "/b.bin", size_t(N) * K * 2));
  half* bkn = to_device<half>(read_file(dir + "/bkn.bin", size_t(K) * N * 2));
  const EncodeTiled encode = encoder();
  const CUtensorMap map_a = tile_map(encode, a, M, K), map_b = tile_map(encode, b, N, K);
  const CUtensorMap map_bkn = tile_map(encode, bkn, K, N);

  uint4* tiles;
  float* c;
  CHECK(cudaMalloc(&tiles, 2 * TILE_BYTES));
  CHECK(cudaMalloc(&c, 64 * 128 * sizeof(float)));

  const int single_smem = 1024 + 2 * TILE_BYTES + 8;  // 1 KB for the alignment, 2 tiles, 1 barrier
  CHECK(cudaFuncSetAttribute(single_stage, cudaFuncAttributeMaxDynamicSharedMemorySize, single_smem));
  poison(tiles, c);
  single_stage<<<1, CONSUMERS, single_smem>>>(map_a, map_b, m0, n0, k0, tiles, c);
  finish("single_stage");
  save(dir + "/tiles.bin", tiles, 2 * TILE_BYTES);
  save(dir + "/c_single.bin", c, 64 * 64 * sizeof(float));

  const int kn_smem = 1024 + 3 * TILE_BYTES + 8;
  CHECK(cudaFuncSetAttribute(single_stage_kn, cudaFuncAttributeMaxDynamicSharedMemorySize, kn_smem));
  poison(tiles, c);
  single_stage_kn<<<1, CONSUMERS, kn_smem>>>(map_a, map_bkn, m0, n1, k0, tiles, c);
  finish("single_stage_kn");
  save(dir + "/tiles_kn.bin", tiles, 2 * TILE_BYTES);
  save(dir + "/c_kn.bin", c, 64 * 128 * sizeof(float));

  const int multi_smem = 1024 + STAGES * 2 * TILE_BYTES + 2 * STAGES * 8;  // > 48 KB: the attribute
  CHECK(cudaFuncSetAttribute(multi_stage, cudaFuncAttributeMaxDynamicSharedMemorySize, multi_smem));
  for (int i = 9; i < argc; ++i) {
    const int k_tiles = atoi(argv[i]);
    if (k_tiles < 1 || k_tiles * TILE_K > K) {
      fprintf(stderr, "bad KT %d\n", k_tiles);
      return 2;
    }
    poison(tiles, c);
    multi_stage<<<1, CONSUMERS + 32, multi_smem>>>(map_a, map_b, m0, n0, k_tiles, c);
    finish("multi_stage");
    save(dir + "/c_multi_" + std::to_string(k_tiles) + ".bin", c, 64 * 64 * sizeof(float));
  }
  printf("ok\n");
  return 0;
}
