// The memory latency probe of notebook 02, written once for the CPU and the CUDA
// implementation: follow a chain of indices through memory, each load's address
// the value the one before it returned, so that no two loads are ever in flight
// together and the time per step is the latency of one load.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>

#if defined(__CUDACC__)
#define CHAIN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define CHAIN_HOST_DEVICE inline
#endif

namespace selu_course {

// region: step
// One step of the chain: the next index, masked to the table's size (a power of
// two), so that a table holding any values at all is still read in bounds. On the
// GPU the load skips L1 (__ldcg, cached in L2 only): the table is made far larger
// than L2, and L1 hits on a small one would only blur what is measured.
CHAIN_HOST_DEVICE int64_t chain_step(const int64_t* next, int64_t index, int64_t mask) {
#if defined(__CUDA_ARCH__)
  return __ldcg(reinterpret_cast<const long long*>(next + index)) & mask;
#else
  return next[index] & mask;
#endif
}
// endregion

// What the operator accepts, on every device: a 1-D int64 table whose size is a
// power of two, and a number of steps that is not negative.
inline void check_chain(const at::Tensor& next, int64_t steps, c10::DeviceType device, const char* op) {
  TORCH_CHECK(next.device().type() == device, op, ": expected a ", c10::DeviceTypeName(device),
              " tensor, got one on ", next.device(), ".");
  TORCH_CHECK(next.scalar_type() == at::kLong, op, ": the chain holds int64 indices, got ", next.scalar_type(),
              "; build it with helpers.demos.random_cycle.");
  TORCH_CHECK(next.dim() == 1 && next.is_contiguous(), op, ": the chain must be a contiguous 1-D tensor, got "
              "shape ", next.sizes(), "; pass chain.contiguous().view(-1).");
  const int64_t size = next.numel();
  TORCH_CHECK(size > 0 && (size & (size - 1)) == 0, op, ": the chain's length must be a power of two (each "
              "index is masked to it), got ", size, ".");
  TORCH_CHECK(steps >= 0, op, ": steps must be 0 or more, got ", steps, ".");
}

}  // namespace selu_course
