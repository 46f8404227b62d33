// Minimal hip_fp16.h for device-only compiles: __half / __half2 with ROCm's layout (one _Float16; a
// two-lane _Float16 vector, 4 bytes, convertible to it so __builtin_amdgcn_fdot2 takes it as ROCm's does).
// benchmarks/probes/hip_shim_layout.py checks sizes, alignments and member offsets against ROCm's header.
#pragma once
#include <hip/hip_runtime.h>

typedef _Float16 __shim_f16x2 __attribute__((ext_vector_type(2)));

struct __half {
  _Float16 data;
  __half() = default;
  __host__ __device__ __half(_Float16 v) : data(v) {}
  __host__ __device__ operator _Float16() const { return data; }
};
struct __half2 {
  union {
    __shim_f16x2 data;
    struct {
      unsigned short x, y;
    };
  };
  __half2() = default;
  __host__ __device__ __half2(__shim_f16x2 v) : data(v) {}
  __host__ __device__ __half2(__half a, __half b) : data{a.data, b.data} {}
  __host__ __device__ operator __shim_f16x2() const { return data; }
};
typedef __half half;
typedef __half2 half2;

__device__ __forceinline__ __half __float2half_rn(float f) { return __half((_Float16)f); }
__device__ __forceinline__ float __half2float(__half h) { return (float)h.data; }
__device__ __forceinline__ __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
__device__ __forceinline__ __half2 __hadd2(__half2 a, __half2 b) { return __half2(a.data + b.data); }
__device__ __forceinline__ __half __hadd(__half a, __half b) { return __half(a.data + b.data); }
