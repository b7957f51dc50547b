// The scalar math of the course, written once and compiled twice: by nvcc for
// the CUDA kernels and by the host compiler for the CPU implementation.
//
// No torch headers here, so nvcc can compile this file on its own and the
// tests can look at the PTX it produces.
#pragma once

#include <math.h>

#if defined(__CUDACC__)
#define SELU_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SELU_HOST_DEVICE inline
#endif

namespace selu_course {

// PyTorch's constants (aten/src/ATen/native/Activation.cpp), from the
// self-normalizing networks paper (Klambauer et al., 2017).
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

// region: expm1
// expm1 with the precision of its argument. expm1(x) is exact to an ulp even
// where exp(x) - 1 cancels catastrophically (|x| << 1).
SELU_HOST_DEVICE float expm1_of(float x) { return expm1f(x); }
SELU_HOST_DEVICE double expm1_of(double x) { return expm1(x); }

// SELU in the "math" type T (float for fp32/fp16/bf16, double for fp64).
// The coefficients are rounded to T first and multiplied in T, as torch does
// (negcoef = alpha * scale in opmath_t), so results match torch eager bit for
// bit wherever expm1 agrees.
// The comparison is x > 0, so NaN and -0.0 take the exp branch:
// expm1(NaN) = NaN, and expm1(-0.0) * c = -0.0 keeps the sign of zero.
template <typename T>
SELU_HOST_DEVICE T selu(T x) {
  const T scale = static_cast<T>(kSeluScale);
  const T negative_coef = static_cast<T>(kSeluAlpha) * scale;
  return x > T(0) ? x * scale : expm1_of(x) * negative_coef;
}
// endregion

// exp with the precision of its argument, for the backward pass.
SELU_HOST_DEVICE float exp_of(float x) { return expf(x); }
SELU_HOST_DEVICE double exp_of(double x) { return exp(x); }

// region: backward
// The backward pass: grad_in = grad * d selu / dx, in the math type T, with the
// coefficients rounded to T first and the products taken left to right as
// torch's elu_backward takes them. The derivative is lambda for x > 0 and
// lambda * alpha * e^x otherwise.
//
// From the input x. The test is x > 0, as in the forward pass: a NaN input takes
// the e^x side and gives NaN, so a NaN in the forward pass shows in the
// gradient too (torch's vectorized CPU loop does the same).
template <typename T>
SELU_HOST_DEVICE T selu_backward_from_input(T grad, T x) {
  const T scale = static_cast<T>(kSeluScale);
  const T negative_coef = static_cast<T>(kSeluAlpha) * scale;
  return x > T(0) ? grad * scale : grad * negative_coef * exp_of(x);
}

// From the output y = selu(x): for x <= 0, y = lambda * alpha * (e^x - 1), so
// lambda * alpha * e^x = y + lambda * alpha, and y > 0 exactly where x > 0.
// This is what lets an in-place selu_ keep only its result for the backward.
// Where x is very negative, y is within rounding of -lambda * alpha and the sum
// cancels: the tiny derivative there is known only to the rounding of y.
template <typename T>
SELU_HOST_DEVICE T selu_backward_from_output(T grad, T y) {
  const T scale = static_cast<T>(kSeluScale);
  const T negative_coef = static_cast<T>(kSeluAlpha) * scale;
  return y > T(0) ? grad * scale : grad * (y + negative_coef);
}
// endregion

// ReLU that propagates NaN like torch.relu: NaN < 0 is false, so NaN passes through.
template <typename T>
SELU_HOST_DEVICE T relu(T x) {
  return x < T(0) ? T(0) : x;
}

// Element functors, so that one kernel template serves every variant (the
// first drafts of mistakes_math.cuh are functors of the same shape).
struct SeluOp {
  template <typename T>
  SELU_HOST_DEVICE T operator()(T x) const { return selu(x); }
};
struct ReluOp {
  template <typename T>
  SELU_HOST_DEVICE T operator()(T x) const { return relu(x); }
};
// Two inputs: the incoming gradient and what the forward pass saved.
struct SeluBackwardFromInputOp {
  template <typename T>
  SELU_HOST_DEVICE T operator()(T grad, T x) const { return selu_backward_from_input(grad, x); }
};
struct SeluBackwardFromOutputOp {
  template <typename T>
  SELU_HOST_DEVICE T operator()(T grad, T y) const { return selu_backward_from_output(grad, y); }
};

}  // namespace selu_course
