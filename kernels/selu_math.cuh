// The scalar math of the course, written once and compiled twice: by nvcc for
// the CUDA kernels and by the host compiler for the CPU implementation.
//
// No torch headers here, so nvcc can compile this file on its own and the
// tests can look at the PTX it produces.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

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

// region: economical
// SELU for a result that will be rounded to fp16 or bf16, in fewer instructions.
//
// In fp32 SELU is memory-bound, but fp16 and bf16 move half the bytes per
// element for the same math, and on a GPU with more bandwidth per SM (the H200)
// the instructions, not the bytes, set the time: CUDA's expm1f is about 30
// instructions with its special cases, the whole element about 45. This is the
// same function in about 20, and with no branch:
//   * x is clamped to [-32, 0] first: below -17.4, expm1 is -1 in fp32 anyway,
//     and the clamp keeps 2^n below in range. fmaxf turns a NaN into -32, so
//     NaN must take the other side of the final select (!(x < 0) is true).
//   * e^x = 2^n * e^r with n = round(x / ln 2) and |r| <= ln(2) / 2. Adding
//     1.5 * 2^23 rounds x / ln 2 to an integer n held in the low bits of j,
//     so 2^n is built from j's bits with a shift and an add: no conversion.
//   * r = x - n ln 2 in one fused multiply-add, with ln 2 rounded to fp32: for
//     |n| <= 47 its error moves e^x by under 1e-7 relative.
//   * expm1(r) = r + r^2 (1/2 + r/6 + ... + r^5/5040), Taylor to degree 7: its
//     truncation error is about 2^-26 relative at |r| = ln(2) / 2.
//   * expm1(x) = 2^n * expm1(r) + (2^n - 1), one fused multiply-add.
// Only fmaf, *, - and integer operations: IEEE rounds each of them the same way
// on every machine, so the CPU computes exactly what the GPU does, and the
// tests can prove the claim below on a machine without a GPU.
//
// It is not expm1f: it differs from it by up to 2 fp32 ulps (a degree-6
// polynomial would be 6 ulps off, and degree 5 over 100). What is proved, by
// trying all 65,536 inputs of each 16-bit type (tests/test_exhaustive.py), is
// that once rounded to fp16 or bf16 the result is the one torch gives, for
// every input.
constexpr float kMagicRound = 12582912.0f;     // 1.5 * 2^23
constexpr float kLog2E = 1.44269502f;         // 1 / ln 2
constexpr float kLn2 = 0.693147182f;          // ln 2, rounded to fp32

SELU_HOST_DEVICE uint32_t float_bits(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits;
}
SELU_HOST_DEVICE float bits_float(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

// expm1(x) for x <= 0 (any other x gives a finite value that the caller discards).
SELU_HOST_DEVICE float expm1_nonpositive(float x) {
  x = fmaxf(x, -32.0f);
  const float j = fmaf(x, kLog2E, kMagicRound);  // n + 1.5 * 2^23, n = round(x / ln 2)
  const float n = j - kMagicRound;
  const float r = fmaf(n, -kLn2, x);
  float q = 1.0f / 5040;
  q = fmaf(q, r, 1.0f / 720);
  q = fmaf(q, r, 1.0f / 120);
  q = fmaf(q, r, 1.0f / 24);
  q = fmaf(q, r, 1.0f / 6);
  q = fmaf(q, r, 0.5f);
  const float expm1_r = fmaf(r * r, q, r);
  const float two_to_n = bits_float((float_bits(j) << 23) + 0x3f800000u);  // n + 127 in the exponent field
  return fmaf(two_to_n, expm1_r, two_to_n - 1.0f);
}

// selu in float, for a result rounded to a 16-bit type. The test is !(x < 0):
// NaN and +-0 take the x * scale side, which keeps them (and the sign of zero).
SELU_HOST_DEVICE float selu_economical(float x) {
  const float scale = static_cast<float>(kSeluScale);
  const float negative_coef = static_cast<float>(kSeluAlpha) * scale;
  const float negative = expm1_nonpositive(x) * negative_coef;
  return x < 0.0f ? negative : x * scale;
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
// The economical selu, for fp16 and bf16 tensors only (computed in float).
struct SeluEconomicalOp {
  SELU_HOST_DEVICE float operator()(float x) const { return selu_economical(x); }
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
