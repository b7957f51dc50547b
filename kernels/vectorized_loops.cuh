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

#include <ATen/OpMathType.h>

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
// (realign.cuh) and never come here.
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
// op on one element of every input, in the math type: out = T(op(M(a), M(b)...)),
// with M = at::opmath_type<T> (float for fp16 and bf16: one rounding, on the
// way out, as torch does; T itself for fp32 and fp64).
//
// Identity is the element function of a copy (copy_vectorized_kernel): the loops
// then move the bytes and compute nothing, with no round trip through the math
// type, which for fp16 and bf16 would change the payload of a NaN.
struct Identity {};

// The vector that this thread handles at step v of the tile that starts at
// tile_start (blockDim.x * VECTORS_PER_THREAD vectors): thread t takes t,
// t + blockDim.x, t + 2 * blockDim.x, ..., so each step of a warp covers 32
// consecutive vectors, 512 contiguous bytes, and every access is fully
// coalesced. WARP_RUNS (realigned inputs): each warp takes a run of consecutive
// vectors instead (warp_run_vector, realign.cuh).
template <bool WARP_RUNS, int VECTORS_PER_THREAD>
__device__ __forceinline__ int64_t vector_index(int64_t tile_start, int v) {
  if constexpr (WARP_RUNS) {
    return warp_run_vector<VECTORS_PER_THREAD>(tile_start, v);
  } else {
    return tile_start + static_cast<int64_t>(v) * blockDim.x + threadIdx.x;
  }
}

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

// A tile of realigned inputs (fp16 or bf16 read from a misaligned view, realign.cuh;
// notebook 03b) that lies whole inside the tensor: its vectors, and
// the chunk after its last, are all at most num_vectors. Every tile but the
// last is one. So map_tiles' steps 1 and 2, without a bounds test: realigned
// vectors cost more instructions than aligned ones, and where a GPU issues
// instructions at the limit of its clock (the H200 in fp16 and bf16) each one
// costs time.
template <int WORDS, typename T, int VECTORS_PER_THREAD, typename Op, int INPUTS>
__device__ __forceinline__ void whole_realigned_tile(Op op, typename VectorOf<T>::type* out_vectors,
                                                     const T* (&inputs)[INPUTS], int64_t tile_start,
                                                     int64_t num_vectors) {
  Pack<T> packs[INPUTS][VECTORS_PER_THREAD];
  realigned_loads<true, WORDS>(packs, inputs, tile_start, num_vectors);
#pragma unroll
  for (int v = 0; v < VECTORS_PER_THREAD; ++v) {
    apply_to_vector<T>(op, packs, v, std::make_index_sequence<INPUTS>{});
    out_vectors[vector_index<true, VECTORS_PER_THREAD>(tile_start, v)] = packs[0][v].vector;
  }
}

// The roofline loop: out[k] = op(inputs[k]...) for k < numel, op taking and
// returning the math type (apply).
//
// out must start on a 16-byte boundary: the launcher does the elements before
// it (the head) with a launch of its own and passes out and every input
// advanced past them, so that no thread of this loop spends instructions on a
// head that is almost always empty. The launcher picks ALIGNED when every input
// is then 16-byte aligned too (fresh tensors, an in-place x[1:], x[1:] into
// y[1:]); otherwise fp32 and fp64 inputs are read element by element
// (load_pack) and fp16 and bf16 inputs realigned in registers (realign.cuh).
//
// The vectors are cut into tiles of blockDim.x * VECTORS_PER_THREAD; block b
// handles tiles b, b + gridDim.x, ... (a grid-stride loop over tiles: once per
// block with a one-shot grid, several times with a capped grid). Within a
// tile, thread t handles vectors t, t + blockDim.x, t + 2 * blockDim.x, ...
// (realigned inputs: each warp a run of them, see vector_index): at each step
// the threads of a warp touch 32 consecutive vectors, 512 contiguous bytes, so
// every access is fully coalesced.
//
// IN_PLACE says whether out is one of the inputs: then that input is written by
// this kernel, and the loads must be plain ones. WORDS: see realign (realign.cuh).
template <typename T, int VECTORS_PER_THREAD, bool IN_PLACE, bool ALIGNED, int WORDS, typename Op, typename... Inputs>
__device__ __forceinline__ void map_tiles(Op op, T* out, int64_t numel, const Inputs*... inputs) {
  using Vector = typename VectorOf<T>::type;
  constexpr int kInputs = sizeof...(Inputs);
  static_assert(ALIGNED || !IN_PLACE, "in place, x is out: both aligned alike");
  const T* in_body[kInputs] = {inputs...};
  Vector* out_vectors = reinterpret_cast<Vector*>(out);
  const int64_t slack = kSlackElements<T, ALIGNED>;
  const int64_t num_vectors = numel > slack ? (numel - slack) / kElementsPerVector<T> : 0;
  const int64_t tile = static_cast<int64_t>(blockDim.x) * VECTORS_PER_THREAD;

  for (int64_t tile_start = blockIdx.x * tile; tile_start < num_vectors; tile_start += gridDim.x * tile) {
    if constexpr (kRealigns<T, ALIGNED>) {
      if (tile_start + tile <= num_vectors) {  // every tile but the last: no test needed
        whole_realigned_tile<WORDS, T, VECTORS_PER_THREAD>(op, out_vectors, in_body, tile_start, num_vectors);
        continue;
      }
    }
    Pack<T> packs[kInputs][VECTORS_PER_THREAD];
    // 1. Load. The loads do not depend on each other and nothing uses them yet,
    //    so all of them are in flight at once: the thread waits for memory once
    //    per tile, not once per vector.
    if constexpr (kRealigns<T, ALIGNED>) {
      realigned_loads<false, WORDS>(packs, in_body, tile_start, num_vectors);
    } else {
#pragma unroll
      for (int v = 0; v < VECTORS_PER_THREAD; ++v) {
        const int64_t i = vector_index<false, VECTORS_PER_THREAD>(tile_start, v);
        if (i < num_vectors) {  // the last tile may be partial
#pragma unroll
          for (int k = 0; k < kInputs; ++k) {
            packs[k][v] = load_pack<IN_PLACE, ALIGNED>(in_body[k], i);
          }
        }
      }
    }
    // 2. Compute in registers and store, 16 bytes at a time.
#pragma unroll
    for (int v = 0; v < VECTORS_PER_THREAD; ++v) {
      const int64_t i = vector_index<kRealigns<T, ALIGNED>, VECTORS_PER_THREAD>(tile_start, v);
      if (i < num_vectors) {
        apply_to_vector<T>(op, packs, v, std::make_index_sequence<kInputs>{});
        out_vectors[i] = packs[0][v].vector;
      }
    }
  }

  // 3. The tail: the elements after the last whole vector (at most 7, or 15
  //    with the slack) are done one by one by the first threads of block 0.
  const int64_t tail_index = num_vectors * kElementsPerVector<T> + threadIdx.x;
  if (blockIdx.x == 0 && tail_index < numel) {
    out[tail_index] = apply<T>(op, inputs[tail_index]...);
  }
}

template <typename T, int VECTORS_PER_THREAD, bool IN_PLACE, bool ALIGNED, typename Op, typename... Inputs>
__device__ __forceinline__ void map_vectors(Op op, T* out, int64_t numel, const Inputs*... inputs) {
  if constexpr (kRealigns<T, ALIGNED> && sizeof...(Inputs) == 1) {
    // One input, realigned: its word offset, the same for the whole launch,
    // picks one of four copies of the loop, in each of which it is a constant.
    switch (realignment(inputs...).words) {
      case 0: return map_tiles<T, VECTORS_PER_THREAD, IN_PLACE, ALIGNED, 0>(op, out, numel, inputs...);
      case 1: return map_tiles<T, VECTORS_PER_THREAD, IN_PLACE, ALIGNED, 1>(op, out, numel, inputs...);
      case 2: return map_tiles<T, VECTORS_PER_THREAD, IN_PLACE, ALIGNED, 2>(op, out, numel, inputs...);
      default: return map_tiles<T, VECTORS_PER_THREAD, IN_PLACE, ALIGNED, 3>(op, out, numel, inputs...);
    }
  } else {
    // Several inputs (the backward kernels), each with its own offset: chosen at run time.
    map_tiles<T, VECTORS_PER_THREAD, IN_PLACE, ALIGNED, -1>(op, out, numel, inputs...);
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
