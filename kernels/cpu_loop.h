// The one elementwise loop of the CPU implementations (selu_cpu.cpp and
// mistakes_cpu.cpp): out[k] = op(src[k]) over two dense tensors of one layout
// (see elementwise.h).
#pragma once

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace selu_course {

// at::opmath_type<scalar_t> is float for float16/bfloat16 (and the type itself
// for float32/float64): each element is widened, computed in float and rounded
// once on the way out, as torch does. Half-precision arithmetic would round
// after every operation.
template <typename scalar_t, typename Op>
void cpu_elementwise(const at::Tensor& src, at::Tensor& out, Op op, int64_t count) {
  using opmath_t = at::opmath_type<scalar_t>;
  const scalar_t* in = src.const_data_ptr<scalar_t>();
  scalar_t* result = out.mutable_data_ptr<scalar_t>();
  // Chunks of at least GRAIN_SIZE elements per thread: below that, waking up
  // threads costs more than the loop they would share. Each element is read
  // before it is written, by the same thread, so out may be src itself.
  at::parallel_for(0, count, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      result[k] = static_cast<scalar_t>(op(static_cast<opmath_t>(in[k])));
    }
  });
}

template <typename scalar_t, typename Op>
void cpu_elementwise(const at::Tensor& src, at::Tensor& out, Op op) {
  cpu_elementwise<scalar_t>(src, out, op, src.numel());
}

// out[k] = op(a[k], b[k]): the backward pass, over three dense tensors of one layout.
template <typename scalar_t, typename Op>
void cpu_elementwise_binary(const at::Tensor& a, const at::Tensor& b, at::Tensor& out, Op op) {
  using opmath_t = at::opmath_type<scalar_t>;
  const scalar_t* first = a.const_data_ptr<scalar_t>();
  const scalar_t* second = b.const_data_ptr<scalar_t>();
  scalar_t* result = out.mutable_data_ptr<scalar_t>();
  at::parallel_for(0, out.numel(), at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      result[k] = static_cast<scalar_t>(op(static_cast<opmath_t>(first[k]), static_cast<opmath_t>(second[k])));
    }
  });
}

}  // namespace selu_course
