#ifndef TC_WS_CLUSTER_HELPERS
#define TC_WS_CLUSTER_HELPERS
// Every non-exited thread of the cluster arrives, then waits for the others (release/acquire:
// shared-memory writes before it are visible to the cluster's blocks after it).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n barrier.cluster.wait.acquire;" ::: "memory");
}
// A float at the same shared-memory offset in block `rank` of the cluster (distributed shared memory).
__device__ __forceinline__ float peer_load(const float* p, unsigned rank) {
  unsigned addr;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(addr) : "r"(smem_u32(p)), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
#endif
