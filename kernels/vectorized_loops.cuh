// The loops of the roofline kernels, written once: out[i] = op(inputs[i]...) over
// dense tensors of one layout, for one input (the forward kernel of notebook 03,
// selu_vectorized.cu) or several (the backward kernels of notebook 04, which read
// grad and the saved tensor: selu_backward.cu). Each kernel is a one-line
// __global__ function that calls these with its element function, so its name
// (and its PTX entry) stays its own.
#pragma once

#include <cstdint>
#include <utility>

#include "vectors.cuh"

namespace selu_course {

// region: tile_loop
// One 16-byte vector of an input. A plain load (ld.global) where the kernel also
// writes this memory (IN_PLACE); otherwise the read-only path (ld.global.nc),
// which is undefined for memory the same kernel writes.
template <bool IN_PLACE, typename Vector>
__device__ __forceinline__ Vector load_vector(const Vector* address) {
  if constexpr (IN_PLACE) {
    return *address;
  } else {
    return __ldg(address);
  }
}

// op applied to element e of vector v of every input: op(packs[0][v].elements[e], packs[1][v]...).
template <typename Op, typename Packs, std::size_t... K>
__device__ __forceinline__ auto apply_to_element(Op op, const Packs& packs, int v, int e,
                                                 std::index_sequence<K...>) {
  return op(packs[K][v].elements[e]...);
}

// The roofline loop. Every pointer must be 16-byte aligned (the launcher checks).
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
template <typename T, int VECTORS_PER_THREAD, bool IN_PLACE, typename Op, typename... Inputs>
__device__ __forceinline__ void map_vectors(Op op, T* out, int64_t numel, const Inputs*... inputs) {
  using Vector = typename VectorOf<T>::type;
  constexpr int kInputs = sizeof...(Inputs);
  const Vector* in_vectors[kInputs] = {reinterpret_cast<const Vector*>(inputs)...};
  Vector* out_vectors = reinterpret_cast<Vector*>(out);
  const int64_t num_vectors = numel / kElementsPerVector<T>;
  const int64_t tile = static_cast<int64_t>(blockDim.x) * VECTORS_PER_THREAD;

  for (int64_t tile_start = blockIdx.x * tile; tile_start < num_vectors; tile_start += gridDim.x * tile) {
    Pack<T> packs[kInputs][VECTORS_PER_THREAD];
    // 1. Load. The loads do not depend on each other and nothing uses them yet,
    //    so all of them are in flight at once: the thread waits for memory once
    //    per tile, not once per vector.
#pragma unroll
    for (int v = 0; v < VECTORS_PER_THREAD; ++v) {
      const int64_t i = tile_start + v * blockDim.x + threadIdx.x;
      if (i < num_vectors) {  // the last tile may be partial
#pragma unroll
        for (int k = 0; k < kInputs; ++k) {
          packs[k][v].vector = load_vector<IN_PLACE>(in_vectors[k] + i);
        }
      }
    }
    // 2. Compute in registers and store, 16 bytes at a time.
#pragma unroll
    for (int v = 0; v < VECTORS_PER_THREAD; ++v) {
      const int64_t i = tile_start + v * blockDim.x + threadIdx.x;
      if (i < num_vectors) {
#pragma unroll
        for (int e = 0; e < kElementsPerVector<T>; ++e) {
          packs[0][v].elements[e] = apply_to_element(op, packs, v, e, std::make_index_sequence<kInputs>{});
        }
        out_vectors[i] = packs[0][v].vector;
      }
    }
  }

  // 3. The tail: the last numel % kElementsPerVector elements (at most 7) do
  //    not fill a vector, so the first threads of block 0 do them one by one.
  const int64_t tail_index = num_vectors * kElementsPerVector<T> + threadIdx.x;
  if (blockIdx.x == 0 && tail_index < numel) {
    out[tail_index] = op(inputs[tail_index]...);
  }
}
// endregion

// region: scalar_loop
// The fallback when a pointer is not 16-byte aligned (a view such as x[1:] starts
// 4 bytes into an allocation): a 16-byte load from an address that is not a
// multiple of 16 is a misaligned-address fault, so this loop does one element
// per thread per step, grid-stride. (A faster fallback would peel the first
// elements until the pointers align, when their misalignments are equal.)
template <typename T, typename Op, typename... Inputs>
__device__ __forceinline__ void map_elements(Op op, T* out, int64_t numel, const Inputs*... inputs) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += stride) {
    out[i] = op(inputs[i]...);
  }
}
// endregion

}  // namespace selu_course
