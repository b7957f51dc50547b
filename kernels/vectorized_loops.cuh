// The loops of the roofline kernels, written once: out[i] = op(inputs[i]...) over
// dense tensors of one layout, for one input (the forward kernel of notebook 03,
// selu_vectorized.cu) or several (the backward kernels of notebook 04, which read
// grad and the saved tensor: selu_backward.cu). Each kernel is a one-line
// __global__ function that calls these with its element function, so its name
// (and its PTX entry) stays its own.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "realign.cuh"
#include "vectors.cuh"

namespace selu_course {

// region: loads
// One element of an input, through the read-only path unless the kernel also
// writes this memory (IN_PLACE). __ldg has no overload for c10::Half and
// c10::BFloat16, so every type is loaded as the unsigned integer of its size.
template <bool IN_PLACE, typename T>
__device__ __forceinline__ T load_element(const T* address) {
  if constexpr (IN_PLACE) {
    return *address;
  } else {
    using Bits = std::conditional_t<sizeof(T) == 2, unsigned short,
                                    std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>>;
    const Bits bits = __ldg(reinterpret_cast<const Bits*>(address));
    T value;
    memcpy(&value, &bits, sizeof(T));
    return value;
  }
}

// Vector i of an input. ALIGNED: one 16-byte load (ld.global.v4), plain where
// the kernel also writes this memory (IN_PLACE), otherwise read-only
// (ld.global.nc), which is undefined for memory the same kernel writes.
// Not ALIGNED (a view that starts inside a 16-byte chunk, e.g. x[1:]): a
// 16-byte load there would fault. fp32 and fp64 load the vector's elements one
// by one; across a warp those loads still cover whole contiguous lines, and
// the stores stay 16 bytes wide. fp16 and bf16 would need 8 loads and the
// instructions to assemble them, so they are realigned in registers instead
// (map_realigned_tiles, realign.cuh) and never come here.
template <bool IN_PLACE, bool ALIGNED, typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* input, int64_t i) {
  Pack<T> pack;
  if constexpr (ALIGNED) {
    const auto* address = reinterpret_cast<const typename VectorOf<T>::type*>(input) + i;
    if constexpr (IN_PLACE) {
      pack.vector = *address;
    } else {
      pack.vector = __ldg(address);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kElementsPerVector<T>; ++e) {
      pack.elements[e] = load_element<IN_PLACE>(input + i * kElementsPerVector<T> + e);
    }
  }
  return pack;
}
// endregion


// region: tile_loop
// The roofline loop: out[k] = op(inputs[k]...) for k < numel, op taking and
// returning the math type (apply, vectors.cuh).
//
// out must start on a 16-byte boundary: the launcher does the elements before
// it (the head) with a launch of its own and passes out and every input
// advanced past them, so that no thread of this loop spends instructions on a
// head that is almost always empty. The launcher picks ALIGNED when every input
// is then 16-byte aligned too (fresh tensors, an in-place x[1:], x[1:] into
// y[1:]); otherwise the inputs are read element by element (load_pack).
//
// The vectors are cut into tiles of blockDim.x * VECTORS_PER_THREAD; block b
// handles tiles b, b + gridDim.x, ... (a grid-stride loop over tiles: once per
// block with a one-shot grid, several times with a capped grid). Within a
// tile, thread t handles vectors t, t + blockDim.x, t + 2 * blockDim.x, ...:
// at each step the threads of a warp touch 32 consecutive vectors, 512
// contiguous bytes, so every access is fully coalesced.
//
// IN_PLACE says whether out is one of the inputs: then that input is written by
// this kernel, and the loads must be plain ones.
template <typename T, int VECTORS_PER_THREAD, bool IN_PLACE, bool ALIGNED, typename Op, typename... Inputs>
__device__ __forceinline__ void map_tiles(Op op, T* out, int64_t numel, const Inputs*... inputs) {
  using Vector = typename VectorOf<T>::type;
  constexpr int kInputs = sizeof...(Inputs);
  static_assert(ALIGNED || !IN_PLACE, "in place, x is out: both aligned alike");
  const T* in_body[kInputs] = {inputs...};
  Vector* out_vectors = reinterpret_cast<Vector*>(out);
  const int64_t num_vectors = numel > 0 ? numel / kElementsPerVector<T> : 0;
  const int64_t tile = static_cast<int64_t>(blockDim.x) * VECTORS_PER_THREAD;

  for (int64_t tile_start = blockIdx.x * tile; tile_start < num_vectors; tile_start += gridDim.x * tile) {
    Pack<T> packs[kInputs][VECTORS_PER_THREAD];
    // 1. Load. The loads do not depend on each other and nothing uses them yet,
    //    so all of them are in flight at once: the thread waits for memory once
    //    per tile, not once per vector.
#pragma unroll
    for (int v = 0; v < VECTORS_PER_THREAD; ++v) {
      const int64_t i = tile_start + static_cast<int64_t>(v) * blockDim.x + threadIdx.x;
      if (i < num_vectors) {  // the last tile may be partial
#pragma unroll
        for (int k = 0; k < kInputs; ++k) {
          packs[k][v] = load_pack<IN_PLACE, ALIGNED>(in_body[k], i);
        }
      }
    }
    // 2. Compute in registers and store, 16 bytes at a time.
#pragma unroll
    for (int v = 0; v < VECTORS_PER_THREAD; ++v) {
      const int64_t i = tile_start + static_cast<int64_t>(v) * blockDim.x + threadIdx.x;
      if (i < num_vectors) {
        apply_to_vector<T>(op, packs, v, std::make_index_sequence<kInputs>{});
        out_vectors[i] = packs[0][v].vector;
      }
    }
  }
  // 3. The tail: the elements after the last whole vector (at most 7).
  map_tail(op, out, num_vectors * kElementsPerVector<T>, numel, inputs...);
}
// endregion

// region: dispatch
// The loop every launch runs: map_tiles, except for fp16 and bf16 inputs that
// are not 16-byte aligned where out is, which are read 16 bytes at a time
// anyway and realigned in registers (map_realigned_tiles, realign.cuh).
template <typename T, int VECTORS_PER_THREAD, bool IN_PLACE, bool ALIGNED, typename Op, typename... Inputs>
__device__ __forceinline__ void map_vectors(Op op, T* out, int64_t numel, const Inputs*... inputs) {
  if constexpr (kRealigns<T, ALIGNED>) {
    static_assert(!IN_PLACE, "in place, x is out: both aligned alike");
    if constexpr (sizeof...(Inputs) == 1) {
      // One input: its word offset, the same for the whole launch, picks one
      // of four copies of the loop, in each of which it is a constant.
      switch (realignment(inputs...).words) {
        case 0: return map_realigned_tiles<T, VECTORS_PER_THREAD, 0>(op, out, numel, inputs...);
        case 1: return map_realigned_tiles<T, VECTORS_PER_THREAD, 1>(op, out, numel, inputs...);
        case 2: return map_realigned_tiles<T, VECTORS_PER_THREAD, 2>(op, out, numel, inputs...);
        default: return map_realigned_tiles<T, VECTORS_PER_THREAD, 3>(op, out, numel, inputs...);
      }
    } else {
      // Several inputs (the backward kernels), each with its own offset: chosen at run time.
      map_realigned_tiles<T, VECTORS_PER_THREAD, -1>(op, out, numel, inputs...);
    }
  } else {
    map_tiles<T, VECTORS_PER_THREAD, IN_PLACE, ALIGNED>(op, out, numel, inputs...);
  }
}

// Elements before out's first 16-byte boundary: the head, which the launchers do first. Every
// pointer of a tensor is a multiple of sizeof(T) (the launcher checks), so this
// is a whole number of elements.
template <typename T>
inline int64_t elements_before_alignment(const T* out) {
  const auto misalignment = reinterpret_cast<std::uintptr_t>(out) % kVectorBytes;
  return misalignment == 0 ? 0 : static_cast<int64_t>((kVectorBytes - misalignment) / sizeof(T));
}
// endregion

// region: scalar_loop
// The fallback for a pointer that is not even a multiple of sizeof(T) (memory
// reinterpreted from bytes, never a view of a tensor of T): one element per
// thread per step, grid-stride.
template <typename T, typename Op, typename... Inputs>
__device__ __forceinline__ void map_elements(Op op, T* out, int64_t numel, const Inputs*... inputs) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += stride) {
    out[i] = apply<T>(op, inputs[i]...);
  }
}
// endregion

}  // namespace selu_course
