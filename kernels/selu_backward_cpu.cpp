// The CPU implementation of the backward operators of notebook 04:
// grad_in = grad * d selu / dx, from the forward's input x or from its output y.
//
// The same scalar functions as the CUDA kernels (selu_math.cuh), in the same math
// type: float for fp16/bf16, widened once and rounded once, as torch does.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "cpu_loop.h"
#include "elementwise.h"
#include "selu_checks.h"
#include "selu_math.cuh"

namespace selu_course {
namespace {

void check_input(const at::Tensor& t, const char* op) {
  check_device(t, c10::DeviceType::CPU, op);
  check_floating(t, op);
}

// grad and the saved tensor into a new tensor, never into grad: autograd may pass
// one gradient buffer to several backward functions.
template <typename Op>
at::Tensor backward_with(const at::Tensor& grad, const at::Tensor& saved, const char* op, Op element_op) {
  check_input(grad, op);
  check_input(saved, op);
  return binary_new_tensor(op, grad, saved, [&](const at::Tensor& g, const at::Tensor& s, at::Tensor& out) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, s.scalar_type(), "selu_backward_cpu", [&] {
      cpu_elementwise_binary<scalar_t>(g, s, out, element_op);
    });
  });
}

at::Tensor backward_from_input(const at::Tensor& grad, const at::Tensor& x) {
  return backward_with(grad, x, "selu_course::selu_backward", SeluBackwardFromInputOp{});
}

at::Tensor backward_from_output(const at::Tensor& grad, const at::Tensor& y) {
  return backward_with(grad, y, "selu_course::selu_backward_from_output", SeluBackwardFromOutputOp{});
}

}  // namespace

TORCH_LIBRARY_IMPL(selu_course, CPU, m) {
  m.impl("selu_backward", &backward_from_input);
  m.impl("selu_backward_from_output", &backward_from_output);
}

}  // namespace selu_course
