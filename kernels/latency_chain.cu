// selu_course::pointer_chase on CUDA: one thread follows the chain (latency_chain.h).
// Notebook 02 times it over a table far larger than the L2 cache, so that almost
// every step is a load from DRAM: the latency that Little's law multiplies by the
// bandwidth to give the bytes that must be in flight.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "latency_chain.h"

namespace selu_course {
namespace {

// region: kernel
// One thread, one chain: each load waits for the one before it.
__global__ void pointer_chase_kernel(const int64_t* next, int64_t mask, int64_t steps, int64_t* reached) {
  int64_t index = 0;
  for (int64_t step = 0; step < steps; ++step) {
    index = chain_step(next, index, mask);
  }
  *reached = index;
}
// endregion

at::Tensor pointer_chase(const at::Tensor& next, int64_t steps) {
  constexpr const char* op = "selu_course::pointer_chase";
  check_chain(next, steps, c10::DeviceType::CUDA, op);
  const c10::cuda::CUDAGuard device_guard(next.device());
  at::Tensor reached = at::empty({}, next.options());
  pointer_chase_kernel<<<1, 1, 0, c10::cuda::getCurrentCUDAStream()>>>(
      next.const_data_ptr<int64_t>(), next.numel() - 1, steps, reached.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return reached;
}

}  // namespace

TORCH_LIBRARY_IMPL(selu_course, CUDA, m) { m.impl("pointer_chase", &pointer_chase); }

}  // namespace selu_course
