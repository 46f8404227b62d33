// Host-side declarations of the torch / ATen API a HIP extension's launcher uses, for device-only compiles:
// the launcher is parsed (its kernel launches say which kernels to emit) but never code-generated, so nothing
// here is defined. Not an ABI: only what vLLM's csrc/rocm/q_gemm_rdna3.cu names.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <hip/hip_runtime.h>

typedef hipStream_t cudaStream_t;  // a ROCm build of torch names HIP streams with CUDA's spelling

namespace c10 {
enum class ScalarType { Half, BFloat16, Float, Int };
enum class DeviceType { CUDA };
struct Device {
  Device(DeviceType, int);
};
namespace cuda {
int current_device();
}
}  // namespace c10

namespace at {
using c10::ScalarType;
constexpr auto kHalf = ScalarType::Half;
constexpr auto kBFloat16 = ScalarType::BFloat16;
constexpr auto kFloat = ScalarType::Float;
constexpr auto kInt = ScalarType::Int;
constexpr auto kCUDA = c10::DeviceType::CUDA;
using c10::Device;
struct TensorOptions {
  TensorOptions dtype(ScalarType) const;
  TensorOptions dtype(const struct Dtype&) const;
  TensorOptions device(const Device&) const;
};
struct Dtype {};
struct Tensor {
  int64_t dim() const;
  int64_t size(int64_t) const;
  ScalarType scalar_type() const;
  Dtype dtype() const;
  Device device() const;
  bool is_cuda() const;
  void* data_ptr() const;
  template <typename T>
  T* data_ptr() const;
};
Tensor empty(std::initializer_list<int64_t>, TensorOptions);
Tensor zeros(std::initializer_list<int64_t>, TensorOptions);
namespace cuda {
struct CUDAStream {
  operator cudaStream_t() const;
};
CUDAStream getCurrentCUDAStream();
struct OptionalCUDAGuard {
  explicit OptionalCUDAGuard(Device);
};
}  // namespace cuda
Device device_of(const Tensor&);
}  // namespace at

namespace torch {
using at::Tensor;
using at::TensorOptions;
using at::empty;
using at::zeros;
using at::kHalf;
using at::kBFloat16;
}  // namespace torch

void __shim_torch_check(bool, ...);
#define TORCH_CHECK(cond, ...) __shim_torch_check((cond), ##__VA_ARGS__)
