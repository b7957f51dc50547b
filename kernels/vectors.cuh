// 16-byte vectors of every floating dtype, for the kernels that move memory at the
// roofline: the forward kernel of notebook 03 (selu_vectorized.cu) and the
// backward kernel of notebook 04 (selu_backward.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <ATen/OpMathType.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

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

// One 16-byte vector seen three ways: as `vector` by the load and the store, as
// `elements` by the math, and as four 32-bit `words` by the math of the 16-bit
// types, which converts two elements at a time. Indexed only with compile-time
// constants (unrolled loops), the union lives in registers.
template <typename T>
union Pack {
  typename VectorOf<T>::type vector;
  T elements[kElementsPerVector<T>];
  uint32_t words[4];
};
// endregion

// region: pairs
// Two fp16 or bf16 values in a 32-bit word, to and from two floats. One
// instruction converts both on the way out (cvt.rn.bf16x2.f32, cvt.rn.f16x2.f32),
// with the rounding of the one-at-a-time conversion; a bf16 is the top half of
// a float, so on the way in a shift and a mask do. One at a time through the
// union, the compiler assembled each 16-bit result into a 64-bit register with
// bit-field inserts: about 3 more instructions per element, which the H200,
// where fp16 and bf16 are instruction-bound, pays in time.
__device__ __forceinline__ float2 unpack_pair(uint32_t word, c10::BFloat16) {
  return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
}
__device__ __forceinline__ float2 unpack_pair(uint32_t word, c10::Half) {
  __half2 pair;
  memcpy(&pair, &word, sizeof word);
  return __half22float2(pair);
}
__device__ __forceinline__ uint32_t pack_pair(float2 values, c10::BFloat16) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(values.x, values.y);
  uint32_t word;
  memcpy(&word, &pair, sizeof word);
  return word;
}
__device__ __forceinline__ uint32_t pack_pair(float2 values, c10::Half) {
  const __half2 pair = __floats2half2_rn(values.x, values.y);
  uint32_t word;
  memcpy(&word, &pair, sizeof word);
  return word;
}
// endregion

// region: apply
// op on one element of every input, in the math type: out = T(op(M(a), M(b)...)),
// with M = at::opmath_type<T> (float for fp16 and bf16: one rounding, on the
// way out, as torch does; T itself for fp32 and fp64).
//
// Identity is the element function of a copy (copy_vectorized_kernel): the loops
// then move the bytes and compute nothing, with no round trip through the math
// type, which for fp16 and bf16 would change the payload of a NaN.
struct Identity {};

template <typename T, typename Op, typename... Inputs>
__device__ __forceinline__ T apply(Op op, Inputs... values) {
  if constexpr (std::is_same_v<Op, Identity>) {
    static_assert(sizeof...(Inputs) == 1, "a copy has one input");
    return (values, ...);
  } else {
    using opmath_t = at::opmath_type<T>;
    return static_cast<T>(op(static_cast<opmath_t>(values)...));
  }
}

// op on vector v of every input, into packs[0][v]. 16-bit types two at a time:
// each 32-bit word is unpacked to two floats, and the two results packed with
// one conversion (vectors.cuh, pairs).
template <typename T, typename Op, typename Packs, std::size_t... K>
__device__ __forceinline__ void apply_to_vector(Op op, Packs& packs, int v, std::index_sequence<K...>) {
  if constexpr (std::is_same_v<Op, Identity>) {
    return;  // packs[0][v] is the input's vector, stored as it was loaded
  } else if constexpr (sizeof(T) == 2) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 pairs[] = {unpack_pair(packs[K][v].words[w], T{})...};
      const float low = op(pairs[K].x...);
      const float high = op(pairs[K].y...);
      packs[0][v].words[w] = pack_pair(make_float2(low, high), T{});
    }
  } else {
#pragma unroll
    for (int e = 0; e < kElementsPerVector<T>; ++e) {
      packs[0][v].elements[e] = apply<T>(op, packs[K][v].elements[e]...);
    }
  }
}

// The elements after the last whole vector (fewer than a vector's, or a few
// more where a loop leaves slack), one by one, by the first threads of block 0.
template <typename T, typename Op, typename... Inputs>
__device__ __forceinline__ void map_tail(Op op, T* out, int64_t first, int64_t numel, const Inputs*... inputs) {
  const int64_t i = first + threadIdx.x;
  if (blockIdx.x == 0 && i < numel) {
    out[i] = apply<T>(op, inputs[i]...);
  }
}
// endregion

// region: alignment
// A 16-byte access must start at a multiple of 16 bytes, or it faults.
inline __host__ __device__ bool is_16_byte_aligned(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % kVectorBytes == 0;
}

// Every tensor of T starts at a multiple of sizeof(T); only memory reinterpreted
// from bytes can fail this.
template <typename T>
inline __host__ __device__ bool is_element_aligned(const T* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % sizeof(T) == 0;
}
// endregion

}  // namespace selu_course
