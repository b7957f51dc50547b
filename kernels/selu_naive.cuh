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

// region: launch
// gridDim.x for numel elements, one thread each.
inline unsigned int naive_blocks_for(int64_t numel) {
  const int64_t blocks = (numel + kNaiveThreadsPerBlock - 1) / kNaiveThreadsPerBlock;
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

}  // namespace selu_course
