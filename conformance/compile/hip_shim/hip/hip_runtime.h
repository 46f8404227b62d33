// Minimal HIP runtime declarations for DEVICE-ONLY compiles by the conformance compile lane
// (clang -x hip --cuda-device-only -nogpulib -nogpuinc). Not a HIP runtime: host functions are declared, never
// defined, because a device-only compile parses host code but never emits it. Device builtins map to the same
// AMDGPU builtins ROCm's own headers use, so the code generated for a kernel is the code a ROCm build emits.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <type_traits>
#include <algorithm>

#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((amdgpu_flat_work_group_size(1, __VA_ARGS__)))
#ifndef __HIPCC__
#define __HIPCC__ 1
#endif

struct dim3 {
  unsigned x, y, z;
  __host__ __device__ constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
// int4 as ROCm's HIP_vector_type<int, 4>: 16 bytes, 16-byte aligned (one 128-bit load), members x y z w.
typedef int __shim_i32x4 __attribute__((ext_vector_type(4)));
struct alignas(16) int4 {
  union {
    __shim_i32x4 data;
    struct {
      int x, y, z, w;
    };
  };
};
typedef struct ihipStream_t* hipStream_t;
typedef int hipError_t;
// clang lowers `k<<<grid, block, shmem, stream>>>(...)` to a call of this function (HIP's launch ABI).
extern "C" __host__ hipError_t __hipPushCallConfiguration(dim3 grid, dim3 block, size_t shmem = 0,
                                                          hipStream_t stream = 0);

// threadIdx / blockIdx / blockDim / gridDim: the work-item and work-group id builtins, as ROCm's headers use.
#define __SHIM_DIM(NAME, X, Y, Z)                                                   \
  struct NAME##_t {                                                                 \
    __declspec(property(get = gx)) unsigned x;                                      \
    __declspec(property(get = gy)) unsigned y;                                      \
    __declspec(property(get = gz)) unsigned z;                                      \
    static __device__ __forceinline__ unsigned gx() { return X; }                   \
    static __device__ __forceinline__ unsigned gy() { return Y; }                   \
    static __device__ __forceinline__ unsigned gz() { return Z; }                   \
  };                                                                                \
  extern const __device__ NAME##_t NAME;
__SHIM_DIM(threadIdx, __builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(),
           __builtin_amdgcn_workitem_id_z())
__SHIM_DIM(blockIdx, __builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(),
           __builtin_amdgcn_workgroup_id_z())
__SHIM_DIM(blockDim, __builtin_amdgcn_workgroup_size_x(), __builtin_amdgcn_workgroup_size_y(),
           __builtin_amdgcn_workgroup_size_z())
__SHIM_DIM(gridDim, __builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x(),
           __builtin_amdgcn_grid_size_y() / __builtin_amdgcn_workgroup_size_y(),
           __builtin_amdgcn_grid_size_z() / __builtin_amdgcn_workgroup_size_z())
#undef __SHIM_DIM

__device__ __forceinline__ void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
__device__ __forceinline__ void __threadfence() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent"); }

__device__ __forceinline__ int min(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int max(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ float __fmaf_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

// Device-scope atomics (HIP's atomicCAS / atomicAdd are agent-scope, relaxed).
__device__ __forceinline__ unsigned long long atomicCAS(unsigned long long* p, unsigned long long cmp,
                                                        unsigned long long val) {
  __hip_atomic_compare_exchange_strong(p, &cmp, val, __ATOMIC_RELAXED, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  return cmp;
}
__device__ __forceinline__ int atomicCAS(int* p, int cmp, int val) {
  __hip_atomic_compare_exchange_strong(p, &cmp, val, __ATOMIC_RELAXED, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  return cmp;
}
__device__ __forceinline__ int atomicAdd(int* p, int v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
__device__ __forceinline__ float atomicAdd(float* p, float v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
