// MISTAKES, ON PURPOSE: the CPU implementations of appendix A9's first-draft
// operators, so that every operator runs on every device. The wrong math is
// the same as on the GPU (mistakes_math.cuh). Of the launch mistakes, the 32-bit
// count and index are wrong here too (the loop stops at the narrowed count, or at
// 2^32); a CPU has no streams, so the legacy-default-stream operator computes
// selu(x) here.
#include <algorithm>

#include <torch/library.h>

#include "cpu_loop.h"
#include "elementwise.h"
#include "mistakes_math.cuh"
#include "selu_checks.h"
#include "selu_math.cuh"

namespace selu_course {
namespace {

template <typename Fill>
at::Tensor run_on_cpu(const at::Tensor& x, const char* op, Fill fill) {
  check_device(x, c10::DeviceType::CPU, op);
  check_floating(x, op);
  check_float32(x, op);
  return unary_new_tensor(x, fill);
}

at::Tensor missing_minus_one(const at::Tensor& x) {
  return run_on_cpu(x, "selu_course::mistake_missing_minus_one", [](const at::Tensor& src, at::Tensor& out) {
    cpu_elementwise<float>(src, out, mistakes::MissingMinusOneOp{});
  });
}

at::Tensor expf_minus_one(const at::Tensor& x) {
  return run_on_cpu(x, "selu_course::mistake_expf_minus_one", [](const at::Tensor& src, at::Tensor& out) {
    cpu_elementwise<float>(src, out, mistakes::ExpfMinusOneOp{});
  });
}

at::Tensor legacy_default_stream(const at::Tensor& x) {
  return run_on_cpu(x, "selu_course::mistake_legacy_default_stream", [](const at::Tensor& src, at::Tensor& out) {
    cpu_elementwise<float>(src, out, SeluOp{});
  });
}

at::Tensor int32_count(const at::Tensor& x) {
  return run_on_cpu(x, "selu_course::mistake_int32_count", [](const at::Tensor& src, at::Tensor& out) {
    const int count = static_cast<int>(src.numel());  // the bug: int64_t narrowed to int
    if (count > 0) {
      cpu_elementwise<float>(src, out, SeluOp{}, count);
    }
  });
}

at::Tensor int32_index(const at::Tensor& x) {
  return run_on_cpu(x, "selu_course::mistake_int32_index", [](const at::Tensor& src, at::Tensor& out) {
    // Indices wrapped to 32 bits reach only the first 2^32 elements; each of those gets its right value.
    const int64_t reached = std::min<int64_t>(src.numel(), int64_t{1} << 32);
    if (reached > 0) {
      cpu_elementwise<float>(src, out, SeluOp{}, reached);
    }
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(selu_course, CPU, m) {
  m.impl("mistake_missing_minus_one", &missing_minus_one);
  m.impl("mistake_expf_minus_one", &expf_minus_one);
  m.impl("mistake_legacy_default_stream", &legacy_default_stream);
  m.impl("mistake_int32_count", &int32_count);
  m.impl("mistake_int32_index", &int32_index);
}

}  // namespace selu_course
