#ifndef TC_WS_STORE_HELPERS
#define TC_WS_STORE_HELPERS
// One 2-D box of src (shared memory) to the tensor map's (x: column, y: row), in this thread's
// current bulk group; rows and columns past the map's dims are not written.
__device__ __forceinline__ void tma_store_2d(unsigned long long map, const void* src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               :: "l"(map), "r"(x), "r"(y), "r"(smem_u32(src)) : "memory");
}
#endif
