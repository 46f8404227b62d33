// A tiny HIP translation unit for tests/unit/test_compile_hip.py, shaped like vLLM's RDNA3 kernels: a template
// kernel whose body is guarded by the target macro (compiled out for any arch but gfx1100) and an unguarded one
// that stages through LDS; the host launcher instantiates both, as vLLM's does.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>

namespace tiny {

template <typename T, int N>
__global__ void guarded(const T* a, T* c, int n) {
#if defined(__gfx1100__)
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = __float2half_rn(__half2float(a[i]) * (float)N);
#endif
}

template <typename T>
__global__ void staged(const T* a, T* c, int n) {
  __shared__ T buf[256];
  int t = threadIdx.x;
  int i = blockIdx.x * 256 + t;
  buf[t] = i < n ? a[i] : __float2half_rn(0.0f);
  __syncthreads();
  if (i < n) c[i] = buf[255 - t];
}

}  // namespace tiny

void launch(const half* a, half* c, int n, hipStream_t s) {
  tiny::guarded<half, 4><<<(n + 255) / 256, 256, 0, s>>>(a, c, n);
  tiny::staged<half><<<(n + 255) / 256, 256, 0, s>>>(a, c, n);
}
