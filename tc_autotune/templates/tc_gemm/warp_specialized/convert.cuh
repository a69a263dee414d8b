#ifndef TC_WS_CONVERT
#define TC_WS_CONVERT
// fp32 input folded into the producer's load: 8 fp32 elements (two 16-byte loads through the
// read-only path), or zeros where the chunk is outside the operand.
__device__ __forceinline__ void load8_f32(float4 (&v)[2], const float* base, bool inside, long long offset) {
  if (inside) {
    const float4* src = reinterpret_cast<const float4*>(base + offset);
    v[0] = __ldg(src);
    v[1] = __ldg(src + 1);
  } else {
    v[0] = v[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}
// The 8 elements as fp16 (round to nearest, as PyTorch's cast), one 16-byte shared-memory store.
__device__ __forceinline__ void store8_f16(unsigned char* dst, const float4 (&v)[2]) {
  __half2 h[4] = {__floats2half2_rn(v[0].x, v[0].y), __floats2half2_rn(v[0].z, v[0].w),
                  __floats2half2_rn(v[1].x, v[1].y), __floats2half2_rn(v[1].z, v[1].w)};
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(h);
}
#endif
