#ifndef TC_WS_IM2COL_HELPERS
#define TC_WS_IM2COL_HELPERS
// One im2col box of a 4-D (c, w, h, n) tensor map into dst: the map's pixels (output pixels,
// walked with the conv's stride from the one whose first tap reads (w, h) of image n) x its
// channels from c, each read at its pixel shifted by the tap's offset (ow, oh); reads outside
// the data (the padding) land as zeros.
__device__ __forceinline__ void tma_load_im2col_4d(void* dst, unsigned long long map, unsigned long long* bar,
                                                   int c, int w, int h, int n, unsigned short ow, unsigned short oh) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};"
               :: "r"(smem_u32(dst)), "l"(map), "r"(c), "r"(w), "r"(h), "r"(n), "r"(smem_u32(bar)),
                  "h"(ow), "h"(oh) : "memory");
}
#endif
