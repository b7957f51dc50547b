// How a unary elementwise operator meets PyTorch's conventions, written once for
// the CPU and the CUDA implementations: the layout of its result, its out=
// variant, and what it does when out overlaps x.
//
// Every kernel of the course walks memory linearly: element k of the input's
// memory span goes to element k of the output's. That is right whenever input
// and output have the same strides and both are dense (no gaps, no element
// stored twice), whatever those strides are: a transpose or a channels_last
// tensor is computed in its own layout, with no copy. `dense_kernel(src, out)`
// is only ever called on such a pair.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/Exception.h>

namespace selu_course {

// x itself when it is laid out as `out` is; otherwise a copy of x in out's
// layout: one extra pass, paid only by inputs with gaps (x[::3]) or with
// elements stored twice (expand), or by an out= whose layout differs from x's.
inline at::Tensor in_layout_of(const at::Tensor& x, const at::Tensor& out) {
  if (x.is_non_overlapping_and_dense() && x.strides() == out.strides()) {
    return x;
  }
  return at::empty_like(out).copy_(x);
}

// region: new_tensor
// y = f(x) in a new tensor with x's sizes, dtype and device and, as torch.selu
// gives, x's strides when x is dense (empty_like keeps them; for an x with gaps
// it picks a dense layout). empty_like, not zeros_like: the kernel writes every
// element, and a zero fill would be a whole extra pass over memory.
template <typename DenseKernel>
at::Tensor unary_new_tensor(const at::Tensor& x, DenseKernel&& dense_kernel) {
  at::Tensor out = at::empty_like(x);
  dense_kernel(in_layout_of(x, out), out);
  return out;
}
// endregion

// region: out_variant
// out = f(x), for the `.out` overloads (schema `Tensor(a!) out`). out must have
// x's shape, dtype and device: it is not resized. The overlap rules are
// torch's own for out= operators:
//   * out is x (same memory, same strides): computed in place. Each element is
//     read before it is written, by the same thread, so the kernels must not
//     assume that x and out never alias (no __restrict__, no read-only loads).
//   * out partly overlaps x: refused, since the kernel would read elements it has
//     already overwritten.
//   * out has gaps or elements stored twice: the result is computed into a new
//     tensor first and copied into out.
template <typename DenseKernel>
void unary_out(const char* op, const at::Tensor& x, at::Tensor& out, DenseKernel&& dense_kernel) {
  TORCH_CHECK(out.sizes() == x.sizes(), op, ": out has shape ", out.sizes(), " but x has shape ", x.sizes(),
              "; allocate it with torch.empty_like(x).");
  TORCH_CHECK(out.scalar_type() == x.scalar_type(), op, ": out is ", out.scalar_type(), " but x is ",
              x.scalar_type(), "; allocate it with torch.empty_like(x).");
  TORCH_CHECK(out.device() == x.device(), op, ": out is on ", out.device(), " but x is on ", x.device(),
              "; allocate it with torch.empty_like(x).");
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, op,
              ": several elements of out share one memory location (an expanded tensor?), so they cannot "
              "all be written; allocate out with torch.empty_like(x).");
  TORCH_CHECK(at::get_overlap_status(x, out) != at::MemOverlapStatus::Partial, op,
              ": out partly overlaps x, so the kernel would read elements it has already overwritten. "
              "Write into a separate tensor (torch.empty_like(x)), or into x itself to compute in place.");
  if (out.is_non_overlapping_and_dense()) {
    dense_kernel(in_layout_of(x, out), out);
  } else {
    out.copy_(unary_new_tensor(x, dense_kernel));
  }
}
// endregion

// region: binary_new_tensor
// z = f(a, b) for two tensors of one shape, dtype and device (the backward pass:
// a is the incoming gradient, b what the forward saved), in a new tensor laid
// out as b (empty_like), with a and b brought into that layout where they are
// not in it already. The result never aliases a: autograd may hand the same
// gradient buffer to several backward functions, so none may write into it.
template <typename DenseKernel>
at::Tensor binary_new_tensor(const char* op, const at::Tensor& a, const at::Tensor& b, DenseKernel&& dense_kernel) {
  TORCH_CHECK(a.sizes() == b.sizes(), op, ": grad has shape ", a.sizes(), " but the saved tensor has shape ",
              b.sizes(), "; both must have the forward result's shape.");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": grad is ", a.scalar_type(), " but the saved tensor is ",
              b.scalar_type(), "; convert one, e.g. grad.to(x.dtype).");
  TORCH_CHECK(a.device() == b.device(), op, ": grad is on ", a.device(), " but the saved tensor is on ", b.device(),
              "; move one, e.g. grad.to(x.device).");
  at::Tensor out = at::empty_like(b);
  dense_kernel(in_layout_of(a, out), in_layout_of(b, out), out);
  return out;
}
// endregion

}  // namespace selu_course
