// selu_course::selu_naive on CUDA: the one-thread-per-element kernel of
// selu_naive.cuh, registered as the operator's CUDA implementation; and
// selu_course::selu_naive_unrolled, the same kernel with several elements per thread.
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "elementwise.h"
#include "selu_checks.h"
#include "selu_math.cuh"
#include "selu_naive.cuh"

namespace selu_course {
namespace {

// region: host
void check_input(const at::Tensor& x, const char* op) {
  check_device(x, c10::DeviceType::CUDA, op);
  check_floating(x, op);
  check_float32(x, op);
}

void selu_dense(const at::Tensor& src, at::Tensor& out) { launch_naive(src, out, SeluOp{}); }

at::Tensor selu_naive(const at::Tensor& x) {
  check_input(x, "selu_course::selu_naive");
  // Allocate and launch on x's GPU, not on whichever GPU happens to be current.
  const c10::cuda::CUDAGuard device_guard(x.device());
  return unary_new_tensor(x, selu_dense);
}
// endregion

void selu_naive_out(const at::Tensor& x, at::Tensor& out) {
  constexpr const char* op = "selu_course::selu_naive.out";
  check_input(x, op);
  const c10::cuda::CUDAGuard device_guard(x.device());
  unary_out(op, x, out, selu_dense);
}

// The control experiment: the same kernel with elements_per_thread independent loads per thread.
at::Tensor selu_naive_unrolled(const at::Tensor& x, int64_t elements_per_thread) {
  constexpr const char* op = "selu_course::selu_naive_unrolled";
  check_input(x, op);
  check_elements_per_thread(elements_per_thread, op);
  const c10::cuda::CUDAGuard device_guard(x.device());
  return unary_new_tensor(x, [&](const at::Tensor& src, at::Tensor& out) {
    launch_naive_unrolled(src, out, elements_per_thread, SeluOp{});
  });
}

}  // namespace

// region: registration
TORCH_LIBRARY_IMPL(selu_course, CUDA, m) {
  m.impl("selu_naive", &selu_naive);
  m.impl("selu_naive.out", &selu_naive_out);
  m.impl("selu_naive_unrolled", &selu_naive_unrolled);
}
// endregion

}  // namespace selu_course
