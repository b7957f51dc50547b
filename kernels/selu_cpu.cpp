// The CPU implementation of the course's SELU extension.
//
// On a machine without a GPU, helpers.build compiles this file in place of the
// .cu kernels, so that every notebook cell still runs. It calls the same scalar
// functions as the CUDA kernels (selu_math.cuh), in the same math type, so the
// two differ only where the host's and the device's expm1f round differently.
#include "selu_ops.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include "selu_checks.h"
#include "selu_math.cuh"

namespace selu_course {
namespace {

// The one elementwise loop of this file: out[i] = op(x[i]) for every functor
// (SeluOp and the two first-draft mistakes). `x` and `out` are contiguous, so
// element i is at data + i.
//
// at::opmath_type<scalar_t> is float for float16/bfloat16 (and the type itself
// for float32/float64): each element is widened, computed in float and rounded
// once on the way out, as torch does. Half-precision arithmetic would round
// after every operation.
template <typename scalar_t, typename Op>
void apply_elementwise(const torch::Tensor& x, torch::Tensor& out, Op op) {
  using opmath_t = at::opmath_type<scalar_t>;
  const scalar_t* in = x.const_data_ptr<scalar_t>();
  scalar_t* result = out.mutable_data_ptr<scalar_t>();
  // Chunks of at least GRAIN_SIZE elements per thread: below that, waking up
  // threads costs more than the loop they would share.
  at::parallel_for(0, x.numel(), at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      result[i] = static_cast<scalar_t>(op(static_cast<opmath_t>(in[i])));
    }
  });
}

void check_input(const torch::Tensor& x, const char* op) {
  check_device(x, c10::DeviceType::CPU, op);
  check_floating(x, op);
}

// selu over every floating dtype; `x` and `out` are contiguous.
void selu_into(const torch::Tensor& x, torch::Tensor& out) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "selu_cpu", [&] {
    apply_elementwise<scalar_t>(x, out, SeluOp{});
  });
}

// Non-contiguous input (a transpose, a strided slice) is not an error: every
// entry point computes on x.contiguous(), so the result is correct, at the cost
// of one extra pass over memory (contiguous() returns x itself when it already is).
//
// The result is allocated with empty_like, not zeros_like: every element is
// about to be written, and zero-filling first would be a whole extra pass over
// memory. It is empty_like of the contiguous copy, so that the result is
// contiguous too (empty_like of a transposed x would copy its strides, and the
// loop writes linearly).
template <typename Fill>
torch::Tensor into_new_tensor(const torch::Tensor& x, Fill fill) {
  const torch::Tensor x_contiguous = x.contiguous();
  torch::Tensor out = torch::empty_like(x_contiguous);
  fill(x_contiguous, out);
  return out;
}

}  // namespace

torch::Tensor selu(const torch::Tensor& x) {
  check_input(x, "selu");
  return into_new_tensor(x, selu_into);
}

torch::Tensor selu_out(const torch::Tensor& x, torch::Tensor out) {
  check_input(x, "selu_out");
  check_out(x, out, "selu_out");
  selu_into(x.contiguous(), out);
  return out;
}

// The first-draft mistakes: float32 only, like the CUDA kernel they mirror.
torch::Tensor selu_missing_minus_one(const torch::Tensor& x) {
  check_input(x, "selu_missing_minus_one");
  check_float32(x, "selu_missing_minus_one");
  return into_new_tensor(x, [](const torch::Tensor& xc, torch::Tensor& out) {
    apply_elementwise<float>(xc, out, SeluMissingMinusOneOp{});
  });
}

torch::Tensor selu_expf_minus_one(const torch::Tensor& x) {
  check_input(x, "selu_expf_minus_one");
  check_float32(x, "selu_expf_minus_one");
  return into_new_tensor(x, [](const torch::Tensor& xc, torch::Tensor& out) {
    apply_elementwise<float>(xc, out, SeluExpfMinusOneOp{});
  });
}

}  // namespace selu_course
