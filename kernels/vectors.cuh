// 16-byte vectors of every floating dtype, for the kernels that move memory at the
// roofline: the forward kernel of notebook 03 (selu_vectorized.cu) and the
// backward kernel of notebook 04 (selu_backward.cu).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>

namespace selu_course {

// region: vectors
constexpr int kVectorBytes = 16;            // the widest load a thread can issue

// The built-in type that moves 16 bytes of T in one instruction (ld.global.v4,
// ld.global.v2.f64). Half types travel as four 32-bit words.
template <typename T> struct VectorOf;
template <> struct VectorOf<float> { using type = float4; };
template <> struct VectorOf<double> { using type = double2; };
template <> struct VectorOf<c10::Half> { using type = uint4; };
template <> struct VectorOf<c10::BFloat16> { using type = uint4; };

template <typename T>
constexpr int kElementsPerVector = kVectorBytes / sizeof(T);  // 4 fp32, 2 fp64, 8 fp16/bf16

// One 16-byte vector seen two ways: as `vector` by the load and the store, as
// `elements` by the math. Indexed only with compile-time constants (unrolled
// loops), the union lives in registers.
template <typename T>
union Pack {
  typename VectorOf<T>::type vector;
  T elements[kElementsPerVector<T>];
};
// endregion

// region: alignment
// A 16-byte access must start at a multiple of 16 bytes, or it faults.
inline __host__ __device__ bool is_16_byte_aligned(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % kVectorBytes == 0;
}
// endregion

}  // namespace selu_course
