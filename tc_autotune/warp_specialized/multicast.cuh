#ifndef TC_WS_MULTICAST_HELPERS
#define TC_WS_MULTICAST_HELPERS
// One 2-D box into dst in both blocks of the cluster (ctaMask), each block's bar counting its bytes.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, unsigned long long map, unsigned long long* bar,
                                                      int x, int y, unsigned short mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(smem_u32(dst)), "l"(map), "r"(x), "r"(y), "r"(smem_u32(bar)), "h"(mask) : "memory");
}
// The warp is done with a stage: its lane 0 arrives on the stage's empty barrier in both blocks.
__device__ __forceinline__ void release_stage_pair(unsigned long long* bar) {
  __syncwarp();
  if (threadIdx.x % 32 == 0) {
    for (unsigned rank = 0; rank < 2; ++rank) {
      unsigned addr;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(addr) : "r"(smem_u32(bar)), "r"(rank));
      asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(addr) : "memory");
    }
  }
}
#endif
