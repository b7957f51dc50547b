// SELU at the memory roofline: 16-byte vector loads and stores, every
// floating dtype.
//
// SELU does a few flops per element and moves 2 x sizeof(T) bytes, so its speed
// is the speed at which memory is read and written. What this kernel changes
// against the naive one, each to keep more bytes in flight per instruction:
//   * 16-byte accesses: one load instruction moves 4 floats, 8 halves or 2
//     doubles, where the naive kernel's moves one element;
//   * VECTORS_PER_THREAD independent loads issued before any math, so that each
//     thread has several requests outstanding instead of waiting on each one;
//   * 64-bit indexing, and a grid that can be capped and loop over tiles.
//   * read-only loads (ld.global.nc, through __ldg) where x is only read, and
//     plain coherent loads where out is x itself (an in-place out=): a read-only
//     load of memory that the same kernel writes is undefined, so each launch
//     picks one of two instantiations by whether the pointers are equal. The
//     pointers are never declared __restrict__, for the same reason.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

// The c10 headers, not <ATen/cuda/CUDAContext.h>: they are all this file uses,
// and they compile without the cuBLAS and cuSPARSE headers that CUDAContext.h
// pulls in, so that helpers.nvcc can compile this file to PTX on a machine with
// only the CUDA compiler installed.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

#include "elementwise.h"
#include "selu_checks.h"
#include "selu_math.cuh"
#include "vectorized_loops.cuh"
#include "vectors.cuh"

namespace selu_course {
namespace {

constexpr int64_t kMaxBlocks = 2147483647;  // gridDim.x is at most 2^31 - 1

// region: element
// selu of one element, computed in at::opmath_type<T>: float for fp16/bf16 (one
// rounding, on the way out, as torch does), T itself for fp32/fp64.
template <typename T>
__device__ __forceinline__ T selu_element(T value) {
  using opmath_t = at::opmath_type<T>;
  return static_cast<T>(selu(static_cast<opmath_t>(value)));
}
// endregion

// region: kernel
// The roofline kernel: the tile loop of vectorized_loops.cuh with selu_element.
// x and y must be 16-byte aligned (the launcher checks). IN_PLACE says whether y
// is x: then x's loads must be plain ones (ld.global), since this kernel also
// writes x; otherwise they go through the read-only path (ld.global.nc).
template <typename T, int VECTORS_PER_THREAD, bool IN_PLACE>
__global__ void selu_vectorized_kernel(const T* x, T* y, int64_t numel) {
  map_vectors<T, VECTORS_PER_THREAD, IN_PLACE>([](T value) { return selu_element(value); }, y, numel, x);
}
// endregion

// region: scalar_fallback
// The fallback when x or y is not 16-byte aligned: one element per thread per
// step (map_elements in vectorized_loops.cuh says why).
template <typename T>
__global__ void selu_scalar_kernel(const T* x, T* y, int64_t numel) {
  map_elements([](T value) { return selu_element(value); }, y, numel, x);
}
// endregion

// ---------------------------------------------------------------------------
// Host side: choosing the grid and the kernel.
// ---------------------------------------------------------------------------

struct LaunchConfig {
  int threads_per_block;
  int vectors_per_thread;
  int64_t max_blocks_per_sm;  // 0: one block per tile (one-shot grid)
};

// region: default_config
// The default launch, chosen from notebook 03's measurements on an H100 at the
// reference size (section 5 times every configuration; its tables are the
// evidence). fp32 and fp64: one 16-byte vector per thread already puts several
// times the bytes in flight that Little's law asks for; more vectors made each
// block's loads and stores come in longer bursts and gave small tensors fewer
// blocks. fp16 and bf16 do twice the math per byte, and need several vectors
// per thread to overlap it with memory. A one-shot grid: no loop overhead, and
// the hardware schedules blocks as SMs free up.
LaunchConfig default_config(at::ScalarType dtype) {
  const int vectors_per_thread = c10::elementSize(dtype) >= 4 ? 1 : 4;
  return LaunchConfig{256, vectors_per_thread, 0};
}
// endregion

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int multiprocessor_count(c10::DeviceIndex device) {
  int count = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

// region: grid
// gridDim.x for a kernel that needs `blocks_needed` blocks to cover the tensor
// once: all of them for a one-shot grid, at most k per SM for a capped grid
// (the kernels' grid-stride loops do the rest). At least one block, so that
// the tail of a tensor smaller than a vector is still done.
unsigned int grid_size(int64_t blocks_needed, const LaunchConfig& config, c10::DeviceIndex device) {
  int64_t limit = kMaxBlocks;
  if (config.max_blocks_per_sm > 0) {
    const int64_t sms = multiprocessor_count(device);
    limit = std::min(config.max_blocks_per_sm, kMaxBlocks / sms) * sms;
  }
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min(blocks_needed, limit)));
}

template <typename T, int VECTORS_PER_THREAD>
void launch_vectorized(const T* x, T* y, int64_t numel, const LaunchConfig& config,
                       c10::cuda::CUDAStream stream) {
  const int64_t num_vectors = numel / kElementsPerVector<T>;
  const int64_t tiles = ceil_div(num_vectors, int64_t{config.threads_per_block} * VECTORS_PER_THREAD);
  const unsigned int blocks = grid_size(tiles, config, stream.device_index());
  // x and y either are the same memory (in place) or do not overlap at all: the
  // operators refuse a partial overlap before they get here (elementwise.h).
  if (x == y) {
    selu_vectorized_kernel<T, VECTORS_PER_THREAD, true><<<blocks, config.threads_per_block, 0, stream>>>(x, y, numel);
  } else {
    selu_vectorized_kernel<T, VECTORS_PER_THREAD, false><<<blocks, config.threads_per_block, 0, stream>>>(x, y, numel);
  }
  // Launch errors are only reported when asked for; without this check they
  // surface at some later, unrelated CUDA call.
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
// endregion

// region: launch
template <typename T>
void launch_selu(const T* x, T* y, int64_t numel, const LaunchConfig& config, c10::cuda::CUDAStream stream) {
  if (!is_16_byte_aligned(x) || !is_16_byte_aligned(y)) {
    const int64_t blocks_needed = ceil_div(numel, config.threads_per_block);
    const unsigned int blocks = grid_size(blocks_needed, config, stream.device_index());
    selu_scalar_kernel<T><<<blocks, config.threads_per_block, 0, stream>>>(x, y, numel);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  // VECTORS_PER_THREAD sizes a register array, so it must be a compile-time
  // constant: one instantiation per allowed value, chosen here at run time.
  switch (config.vectors_per_thread) {
    case 1: return launch_vectorized<T, 1>(x, y, numel, config, stream);
    case 2: return launch_vectorized<T, 2>(x, y, numel, config, stream);
    case 4: return launch_vectorized<T, 4>(x, y, numel, config, stream);
    case 8: return launch_vectorized<T, 8>(x, y, numel, config, stream);
  }
  TORCH_CHECK(false, "selu_course::selu_vectorized: no kernel for vectors_per_thread = ", config.vectors_per_thread);
}
// endregion

void check_input(const at::Tensor& x, const char* op) {
  check_device(x, c10::DeviceType::CUDA, op);
  check_floating(x, op);
}

// region: dispatch
// selu over src into out: dense tensors of one layout (see elementwise.h), so
// the kernel walks both linearly. AT_DISPATCH_FLOATING_TYPES_AND2 instantiates
// the launcher for fp64, fp32, fp16 and bf16, naming the type scalar_t.
void selu_dense(const at::Tensor& src, at::Tensor& out, const LaunchConfig& config) {
  const int64_t numel = src.numel();
  if (numel == 0) {
    return;  // a grid of 0 blocks is an invalid launch configuration
  }
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "selu_vectorized", [&] {
    launch_selu<scalar_t>(src.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), numel, config,
                          stream);
  });
}
// endregion

at::Tensor selu_with(const at::Tensor& x, const LaunchConfig& config) {
  // Allocate and launch on x's GPU, not on whichever GPU happens to be current.
  const c10::cuda::CUDAGuard device_guard(x.device());
  return unary_new_tensor(x, [&](const at::Tensor& src, at::Tensor& out) { selu_dense(src, out, config); });
}

at::Tensor selu_vectorized(const at::Tensor& x) {
  check_input(x, "selu_course::selu_vectorized");
  return selu_with(x, default_config(x.scalar_type()));
}

void selu_vectorized_out(const at::Tensor& x, at::Tensor& out) {
  constexpr const char* op = "selu_course::selu_vectorized.out";
  check_input(x, op);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const LaunchConfig config = default_config(x.scalar_type());
  unary_out(op, x, out, [&](const at::Tensor& src, at::Tensor& dst) { selu_dense(src, dst, config); });
}

// The mutating form (notebook 04): x's own memory is the output, as for torch.selu_;
// the launcher then picks the instantiation with plain loads (src == out).
void selu_vectorized_inplace(at::Tensor& x) {
  constexpr const char* op = "selu_course::selu_vectorized_";
  check_input(x, op);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const LaunchConfig config = default_config(x.scalar_type());
  unary_out(op, x, x, [&](const at::Tensor& src, at::Tensor& dst) { selu_dense(src, dst, config); });
}

at::Tensor selu_vectorized_with_config(const at::Tensor& x, int64_t threads_per_block, int64_t vectors_per_thread,
                                       int64_t max_blocks_per_sm) {
  constexpr const char* op = "selu_course::selu_vectorized_with_config";
  check_input(x, op);
  check_launch_config(threads_per_block, vectors_per_thread, max_blocks_per_sm, op);
  return selu_with(x, LaunchConfig{static_cast<int>(threads_per_block), static_cast<int>(vectors_per_thread),
                                   max_blocks_per_sm});
}

}  // namespace

TORCH_LIBRARY_IMPL(selu_course, CUDA, m) {
  m.impl("selu_vectorized", &selu_vectorized);
  m.impl("selu_vectorized.out", &selu_vectorized_out);
  m.impl("selu_vectorized_", &selu_vectorized_inplace);
  m.impl("selu_vectorized_with_config", &selu_vectorized_with_config);
}

}  // namespace selu_course
