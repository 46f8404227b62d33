// Minimal hip_bf16.h for device-only compiles: ROCm 6's __hip_bfloat16 (one unsigned short `data`) and
// __hip_bfloat162 (members x, y), float conversion rounding to nearest even as ROCm's __float2bfloat16 does.
#pragma once
#include <hip/hip_runtime.h>

struct __hip_bfloat16 {
  unsigned short data;
};
struct __hip_bfloat162 {
  __hip_bfloat16 x, y;
};

__host__ __device__ __forceinline__ float __bfloat162float(__hip_bfloat16 a) {
  union { unsigned u; float f; } v = {(unsigned)a.data << 16};
  return v.f;
}
__host__ __device__ __forceinline__ __hip_bfloat16 __float2bfloat16(float f) {
  union { float f; unsigned u; } v = {f};
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return __hip_bfloat16{(unsigned short)((v.u >> 16) | 0x40)};  // NaN
  v.u += 0x7fffu + ((v.u >> 16) & 1u);  // round to nearest even
  return __hip_bfloat16{(unsigned short)(v.u >> 16)};
}
__device__ __forceinline__ __hip_bfloat162 __hadd2(__hip_bfloat162 a, __hip_bfloat162 b) {
  return __hip_bfloat162{__float2bfloat16(__bfloat162float(a.x) + __bfloat162float(b.x)),
                         __float2bfloat16(__bfloat162float(a.y) + __bfloat162float(b.y))};
}
