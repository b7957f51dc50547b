// The first draft of a SELU kernel: one thread per element, float32 only.
//
// It is correct, and it is the baseline the later notebooks measure against:
// every thread loads one 4-byte float, so each warp asks memory for only 128
// bytes at a time. A header, because the mistakes of notebook 02
// (mistakes.cu) launch this same kernel with wrong math or in wrong ways.
#pragma once

#include <ATen/core/Tensor.h>
// The c10 headers, not <ATen/cuda/CUDAContext.h>: they are all this file uses
// (c10::cuda::getCurrentCUDAStream is what at::cuda::getCurrentCUDAStream
// names), and they compile without the cuBLAS and cuSPARSE headers that
// CUDAContext.h pulls in, so that helpers.nvcc can compile the kernels to PTX
// on a machine with only the CUDA compiler installed.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>

namespace selu_course {

constexpr int kNaiveThreadsPerBlock = 256;
constexpr int64_t kMaxGridBlocks = 2147483647;  // gridDim.x is at most 2^31 - 1

// region: kernel
// Thread i computes y[i] = op(x[i]); `op` is SeluOp or one of the first-draft
// mistakes, so every variant runs this one kernel. x and y may be the same
// memory (in place): each element is read before it is written, by one thread.
template <typename Op>
__global__ void selu_naive_kernel(const float* x, float* y, int64_t numel, Op op) {
  // In 64 bits: blockIdx.x * blockDim.x in 32-bit arithmetic wraps past 2^32
  // elements (16 GiB of float32), and threads would then overwrite the start.
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // The last block runs past the end unless numel is a multiple of 256.
  if (i < numel) {
    y[i] = op(x[i]);
  }
}
// endregion

// The control experiment of notebooks 02 (1 to 8 elements per thread) and 03 (section 1, ELEMENTS = 4
// beside the float4 kernel): the naive kernel with ELEMENTS elements per thread, their ELEMENTS
// 4-byte loads all issued before the first is used.
// A 16-byte vector changes three things at once against one 4-byte load: the
// bytes each thread has in flight, the memory instructions per byte, and the
// number of blocks. With ELEMENTS = 4 this kernel has the bytes in flight and
// the block count of one 16-byte vector per thread, and the instructions of four
// scalar loads: the same loads as the naive kernel (plain ld.global.f32), only
// more of them in flight. Element k of a block's tile of ELEMENTS x blockDim.x
// goes to thread k % blockDim.x, so that at every step a warp touches 32
// consecutive floats.
// region: unrolled
template <int ELEMENTS, typename Op>
__global__ void selu_naive_unrolled_kernel(const float* x, float* y, int64_t numel, Op op) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x * ELEMENTS + threadIdx.x;
  float values[ELEMENTS];
#pragma unroll
  for (int e = 0; e < ELEMENTS; ++e) {
    const int64_t i = first + static_cast<int64_t>(e) * blockDim.x;
    if (i < numel) {
      values[e] = x[i];
    }
  }
#pragma unroll
  for (int e = 0; e < ELEMENTS; ++e) {
    const int64_t i = first + static_cast<int64_t>(e) * blockDim.x;
    if (i < numel) {
      y[i] = op(values[e]);
    }
  }
}
// endregion

// region: launch
// gridDim.x for numel elements, `elements_per_thread` per thread.
inline unsigned int naive_blocks_for(int64_t numel, int64_t elements_per_thread = 1) {
  const int64_t per_block = kNaiveThreadsPerBlock * elements_per_thread;
  const int64_t blocks = (numel + per_block - 1) / per_block;
  TORCH_CHECK(blocks <= kMaxGridBlocks, "selu_course::selu_naive: ", numel, " elements need more than "
              "2^31 - 1 blocks of ", kNaiveThreadsPerBlock, " threads; use selu_course::selu_vectorized "
              "(notebook 03), whose grid-stride loop covers any size.");
  return static_cast<unsigned int>(blocks);
}

// The right launch: on torch's current stream, checked. src and out are dense
// float32 tensors of one layout (see elementwise.h).
template <typename Op>
void launch_naive(const at::Tensor& src, at::Tensor& out, Op op) {
  const int64_t numel = src.numel();
  if (numel == 0) {
    return;  // a grid of 0 blocks is an invalid launch configuration
  }
  selu_naive_kernel<<<naive_blocks_for(numel), kNaiveThreadsPerBlock, 0, c10::cuda::getCurrentCUDAStream()>>>(
      src.const_data_ptr<float>(), out.mutable_data_ptr<float>(), numel, op);
  // Launch errors (a bad configuration, no kernel image for this GPU) are only
  // reported when asked for; without this check they surface at some later,
  // unrelated CUDA call.
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
// endregion

// region: launch_unrolled
template <int ELEMENTS, typename Op>
void launch_naive_unrolled_as(const at::Tensor& src, at::Tensor& out, Op op) {
  const int64_t numel = src.numel();
  if (numel == 0) {
    return;
  }
  selu_naive_unrolled_kernel<ELEMENTS>
      <<<naive_blocks_for(numel, ELEMENTS), kNaiveThreadsPerBlock, 0, c10::cuda::getCurrentCUDAStream()>>>(
          src.const_data_ptr<float>(), out.mutable_data_ptr<float>(), numel, op);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ELEMENTS sizes a register array, so it is a compile-time constant: one
// instantiation per allowed value (selu_checks.h, check_elements_per_thread).
template <typename Op>
void launch_naive_unrolled(const at::Tensor& src, at::Tensor& out, int64_t elements_per_thread, Op op) {
  switch (elements_per_thread) {
    case 1: return launch_naive_unrolled_as<1>(src, out, op);
    case 2: return launch_naive_unrolled_as<2>(src, out, op);
    case 4: return launch_naive_unrolled_as<4>(src, out, op);
    case 8: return launch_naive_unrolled_as<8>(src, out, op);
  }
  TORCH_CHECK(false, "selu_course::selu_naive_unrolled: no kernel for elements_per_thread = ", elements_per_thread);
}
// endregion

}  // namespace selu_course
