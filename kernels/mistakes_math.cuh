// MISTAKES, ON PURPOSE. The first drafts of SELU's scalar math that appendix A9
// runs, measures and fixes, kept apart from the production math (selu_math.cuh)
// so that no real kernel can call them by accident. Each is an element functor
// of the same shape as selu_math.cuh's SeluOp, so one kernel template runs both.
#pragma once

#include "selu_math.cuh"

namespace selu_course {
namespace mistakes {

// region: missing_minus_one
// Forgets the "- 1": off by lambda*alpha = 1.758 for every input <= 0 (NaN stays NaN).
SELU_HOST_DEVICE float selu_missing_minus_one(float x) {
  const float scale = static_cast<float>(kSeluScale);
  return x > 0.f ? x * scale : expf(x) * (static_cast<float>(kSeluAlpha) * scale);
}
// endregion

// region: expf_minus_one
// exp(x) - 1 instead of expm1(x): right for large |x|, but near 0 exp(x) rounds
// to 1 +- an ulp and the subtraction keeps only that rounding error.
SELU_HOST_DEVICE float selu_expf_minus_one(float x) {
  const float scale = static_cast<float>(kSeluScale);
  return x > 0.f ? x * scale : (expf(x) - 1.f) * (static_cast<float>(kSeluAlpha) * scale);
}
// endregion

struct MissingMinusOneOp {
  SELU_HOST_DEVICE float operator()(float x) const { return selu_missing_minus_one(x); }
};
struct ExpfMinusOneOp {
  SELU_HOST_DEVICE float operator()(float x) const { return selu_expf_minus_one(x); }
};

}  // namespace mistakes
}  // namespace selu_course
