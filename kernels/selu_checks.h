// Input checks shared by the CPU and CUDA entry points: each failure says what
// went wrong and what to do about it.
#pragma once

#include <torch/extension.h>

namespace selu_course {

inline void check_floating(const torch::Tensor& x, const char* op) {
  TORCH_CHECK(at::isFloatingType(x.scalar_type()), op,
              ": expected a floating-point tensor (float32, float64, float16 or bfloat16), got ",
              x.scalar_type(), ". SELU is defined on real numbers: convert first, e.g. x.float().");
}

inline void check_float32(const torch::Tensor& x, const char* op) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, op, ": this kernel handles float32 only, got ",
              x.scalar_type(), ". Use x.float(), or the vectorized kernel of notebook 03, "
              "which dispatches over every floating dtype.");
}

inline void check_device(const torch::Tensor& x, c10::DeviceType expected, const char* op) {
  TORCH_CHECK(x.device().type() == expected, op, ": expected a ", c10::DeviceTypeName(expected),
              " tensor, got one on ", x.device(), ". Move it first: x.to('",
              c10::DeviceTypeName(expected, /*lower_case=*/true), "').");
}

inline void check_out(const torch::Tensor& x, const torch::Tensor& out, const char* op) {
  TORCH_CHECK(out.sizes() == x.sizes(), op, ": out has shape ", out.sizes(), " but x has shape ",
              x.sizes(), "; allocate it with torch.empty_like(x).");
  TORCH_CHECK(out.scalar_type() == x.scalar_type(), op, ": out is ", out.scalar_type(),
              " but x is ", x.scalar_type(), "; allocate it with torch.empty_like(x).");
  TORCH_CHECK(out.device() == x.device(), op, ": out is on ", out.device(), " but x is on ",
              x.device(), "; allocate it with torch.empty_like(x).");
  TORCH_CHECK(out.is_contiguous(), op, ": out must be contiguous; allocate it with torch.empty_like(x).");
}

}  // namespace selu_course
