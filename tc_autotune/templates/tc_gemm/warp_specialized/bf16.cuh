#ifndef TC_WS_BF16
#define TC_WS_BF16
// A gathered bf16 A: copy16 moves 16 bytes of any 2-byte element, so bf16 takes fp16's.
__device__ __forceinline__ void copy16(void* dst, const __nv_bfloat16* base, bool inside, long long offset) {
  copy16(dst, reinterpret_cast<const half*>(base), inside, offset);
}
#endif
