// Input checks shared by the CPU and CUDA implementations: each failure says
// what went wrong and what to do about it. `op` is the operator's name as the
// caller wrote it, e.g. "selu_course::selu_vectorized".
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>

namespace selu_course {

// The dtypes the kernels are compiled for. at::isFloatingType would also admit
// the float8 types, which AT_DISPATCH_FLOATING_TYPES_AND2 then refuses with a
// message about a dispatch name the caller never wrote: the check and the
// dispatch must name the same four types.
inline bool is_supported_float(at::ScalarType type) {
  return type == at::kFloat || type == at::kDouble || type == at::kHalf || type == at::kBFloat16;
}

inline void check_floating(const at::Tensor& x, const char* op) {
  TORCH_CHECK(is_supported_float(x.scalar_type()), op,
              ": expected a float32, float64, float16 or bfloat16 tensor, got ", x.scalar_type(),
              ". SELU is defined on real numbers and these kernels are compiled for those four types: "
              "convert first, e.g. x.float().");
}

inline void check_float32(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, op, ": this kernel handles float32 only, got ",
              x.scalar_type(), ". Use x.float(), or selu_course::selu_vectorized (notebook 03), "
              "which dispatches over every floating dtype.");
}

inline void check_device(const at::Tensor& x, c10::DeviceType expected, const char* op) {
  TORCH_CHECK(x.device().type() == expected, op, ": expected a ", c10::DeviceTypeName(expected),
              " tensor, got one on ", x.device(), ". Move it first: x.to('",
              c10::DeviceTypeName(expected, /*lower_case=*/true), "').");
}

// The largest block check_launch_config allows. The roofline kernels are compiled
// for it (__launch_bounds__): ptxas then keeps them within the 64 registers per
// thread that 1,024 threads may have (65,536 per SM), so that every allowed launch
// can run; without the bound, a kernel that used more would fail at launch with
// "too many resources requested".
constexpr int kMaxThreadsPerBlock = 1024;

// The launch knobs of selu_course::selu_vectorized_with_config, checked the same
// way on every device (on the CPU they change nothing, but a value the CUDA
// kernel would refuse is refused there too).
inline void check_launch_config(int64_t threads_per_block, int64_t vectors_per_thread,
                                int64_t max_blocks_per_sm, const char* op) {
  TORCH_CHECK(threads_per_block == 64 || threads_per_block == 128 || threads_per_block == 256 ||
                  threads_per_block == 512 || threads_per_block == kMaxThreadsPerBlock,
              op, ": threads_per_block must be 64, 128, 256, 512 or 1024 (whole warps, at most 1024 per "
              "block), got ", threads_per_block, ".");
  TORCH_CHECK(vectors_per_thread == 1 || vectors_per_thread == 2 || vectors_per_thread == 4 ||
                  vectors_per_thread == 8,
              op, ": vectors_per_thread must be 1, 2, 4 or 8 (the kernel is compiled for these), got ",
              vectors_per_thread, ".");
  TORCH_CHECK(max_blocks_per_sm >= 0, op, ": max_blocks_per_sm must be 0 (one block per tile, a one-shot "
              "grid) or k > 0 (at most k blocks per SM, grid-stride loop), got ", max_blocks_per_sm, ".");
}

// The independent loads per thread of selu_course::selu_naive_unrolled (notebook 03's
// control experiment), checked the same way on every device.
inline void check_elements_per_thread(int64_t elements_per_thread, const char* op) {
  TORCH_CHECK(elements_per_thread == 1 || elements_per_thread == 2 || elements_per_thread == 4 ||
                  elements_per_thread == 8,
              op, ": elements_per_thread must be 1, 2, 4 or 8 (the kernel is compiled for these), got ",
              elements_per_thread, ".");
}

}  // namespace selu_course
