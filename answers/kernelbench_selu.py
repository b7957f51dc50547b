"""The course's answer to KernelBench level 1, problem 27_SELU_, as KernelBench takes it: one
self-contained file, the kernel compiled with load_inline, nothing of the course imported.

The kernel is notebook 03's: 16-byte loads and stores (4 floats, 8 halves), a grid-stride loop
with 64-bit indices, the tail (and a view that is not 16-byte aligned) one element at a time,
launched on the current stream and checked. The math is torch's: λx above 0, λα·expm1(x) otherwise, in float for 16-bit inputs.
"""
import torch
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr double SELU_ALPHA = 1.6732632423543772848170429916717;
constexpr double SELU_SCALE = 1.0507009873554804934193349852946;

template <typename T> struct Math { using type = float; };  // 16-bit and float: compute in float
template <> struct Math<double> { using type = double; };

template <typename T>
__device__ __forceinline__ T selu_one(T value) {
  using M = typename Math<T>::type;
  const M x = static_cast<M>(value);
  M below;
  if constexpr (std::is_same_v<M, float>) below = expm1f(x); else below = expm1(x);
  const M y = x > M(0) ? x * M(SELU_SCALE) : below * M(SELU_ALPHA * SELU_SCALE);
  return static_cast<T>(y);
}

template <typename T>
struct alignas(16) Vector { T v[16 / sizeof(T)]; };

template <typename T>
__global__ void selu_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, bool aligned) {
  constexpr int width = 16 / sizeof(T);
  const int64_t vectors = aligned ? n / width : 0;  // misaligned: every element in the tail loop
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < vectors; i += stride) {
    Vector<T> in = reinterpret_cast<const Vector<T>*>(x)[i], out;
#pragma unroll
    for (int k = 0; k < width; ++k) out.v[k] = selu_one(in.v[k]);
    reinterpret_cast<Vector<T>*>(y)[i] = out;
  }
  for (int64_t i = vectors * width + first; i < n; i += stride) y[i] = selu_one(x[i]);  // the tail
}

torch::Tensor selu(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "selu: expected a CUDA tensor");
  x = x.contiguous();
  auto y = torch::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return y;
  const int threads = 256;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "selu", [&] {
    const int64_t vectors = std::max<int64_t>(n / (16 / sizeof(scalar_t)), 1);
    const int blocks = int(std::min<int64_t>((vectors + threads - 1) / threads, int64_t(sms) * 8));
    // A view that starts mid-vector (x[1:]) is contiguous but not 16-byte aligned.
    const bool aligned = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0;
    selu_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n, aligned);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}
"""

selu_cuda = load_inline(name="kernelbench_selu", cpp_sources="torch::Tensor selu(torch::Tensor x);",
                        cuda_sources=CUDA_SOURCE, functions=["selu"],
                        extra_cuda_cflags=["-O3"])


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return selu_cuda.selu(x)
