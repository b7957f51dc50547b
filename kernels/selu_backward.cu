// The backward pass of notebook 04 on CUDA: grad_in = grad * d selu / dx, from the
// forward's input x or its output y, in every floating dtype.
//
// The forward kernel of notebook 03 with two inputs, through the same loop
// (vectorized_loops.cuh): each thread loads 16-byte vectors of grad and of the
// saved tensor, all before any math, computes in at::opmath_type (float for
// fp16/bf16, one rounding on the way out) and stores 16 bytes of grad_in. grad_in is always a new tensor, so both inputs are only
// read, through the read-only path (ld.global.nc); it is never grad itself,
// since autograd may hand one gradient buffer to several backward functions.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
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

constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxBlocks = 2147483647;  // gridDim.x is at most 2^31 - 1

// region: kernel
// The forward kernel's tile loop (vectorized_loops.cuh) over two inputs, grad and
// the saved tensor; never in place, so both go through the read-only path.
// grad_in is 16-byte aligned (the launcher does the head first); ALIGNED: grad
// and saved are too.
template <typename T, int VECTORS_PER_THREAD, bool ALIGNED, typename Op>
__global__ void selu_backward_kernel(const T* grad, const T* saved, T* grad_in, int64_t numel, Op op) {
  map_vectors<T, VECTORS_PER_THREAD, /*IN_PLACE=*/false, ALIGNED>(op, grad_in, numel, grad, saved);
}
// endregion

// region: launch
// One element per thread per step, for pointers that are not a multiple of sizeof(T).
template <typename T, typename Op>
__global__ void selu_backward_scalar_kernel(const T* grad, const T* saved, T* grad_in, int64_t numel, Op op) {
  map_elements(op, grad_in, numel, grad, saved);
}

unsigned int grid_for(int64_t blocks_needed) {
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min(blocks_needed, kMaxBlocks)));
}

// grad, saved and grad_in: dense tensors of one layout (elementwise.h). A fixed
// launch, not the forward's tuned one: kThreadsPerBlock threads, one vector per
// thread for 4- and 8-byte types, four for the 2-byte ones.
template <typename T, typename Op>
void launch_backward(const T* grad, const T* saved, T* grad_in, int64_t numel, Op op, cudaStream_t stream) {
  if (!is_element_aligned(grad) || !is_element_aligned(saved) || !is_element_aligned(grad_in)) {
    selu_backward_scalar_kernel<T><<<grid_for((numel + kThreadsPerBlock - 1) / kThreadsPerBlock), kThreadsPerBlock, 0,
                                     stream>>>(grad, saved, grad_in, numel, op);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  constexpr int kVectors = sizeof(T) >= 4 ? 1 : 4;
  // The head (the elements before grad_in's first 16-byte boundary) in a launch of
  // its own, then the rest with grad_in aligned.
  const int64_t head = std::min(elements_before_alignment(grad_in), numel);
  if (head > 0) {
    selu_backward_scalar_kernel<T><<<1, static_cast<int>(head), 0, stream>>>(grad, saved, grad_in, head, op);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    grad += head;
    saved += head;
    grad_in += head;
    numel -= head;
    if (numel == 0) {
      return;
    }
  }
  const int64_t tile = int64_t{kThreadsPerBlock} * kVectors;
  const int64_t tiles = (numel / kElementsPerVector<T> + tile - 1) / tile;
  if (is_16_byte_aligned(grad) && is_16_byte_aligned(saved)) {
    selu_backward_kernel<T, kVectors, true>
        <<<grid_for(tiles), kThreadsPerBlock, 0, stream>>>(grad, saved, grad_in, numel, op);
  } else {
    selu_backward_kernel<T, kVectors, false>
        <<<grid_for(tiles), kThreadsPerBlock, 0, stream>>>(grad, saved, grad_in, numel, op);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
// endregion

void check_input(const at::Tensor& t, const char* op) {
  check_device(t, c10::DeviceType::CUDA, op);
  check_floating(t, op);
}

// region: operators
template <typename Op>
at::Tensor backward_with(const at::Tensor& grad, const at::Tensor& saved, const char* op, Op element_op) {
  check_input(grad, op);
  check_input(saved, op);
  const c10::cuda::CUDAGuard device_guard(saved.device());
  return binary_new_tensor(op, grad, saved, [&](const at::Tensor& g, const at::Tensor& s, at::Tensor& out) {
    const int64_t numel = out.numel();
    if (numel == 0) {
      return;  // a grid of 0 blocks is an invalid launch configuration
    }
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, s.scalar_type(), "selu_backward_cuda", [&] {
      launch_backward<scalar_t>(g.const_data_ptr<scalar_t>(), s.const_data_ptr<scalar_t>(),
                                out.mutable_data_ptr<scalar_t>(), numel, element_op, stream);
    });
  });
}

at::Tensor backward_from_input(const at::Tensor& grad, const at::Tensor& x) {
  return backward_with(grad, x, "selu_course::selu_backward", SeluBackwardFromInputOp{});
}

at::Tensor backward_from_output(const at::Tensor& grad, const at::Tensor& y) {
  return backward_with(grad, y, "selu_course::selu_backward_from_output", SeluBackwardFromOutputOp{});
}
// endregion

}  // namespace

// region: registration
TORCH_LIBRARY_IMPL(selu_course, CUDA, m) {
  m.impl("selu_backward", &backward_from_input);
  m.impl("selu_backward_from_output", &backward_from_output);
}
// endregion

}  // namespace selu_course
