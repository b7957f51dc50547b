// Misaligned fp16 and bf16 inputs read 16 bytes at a time anyway, realigned in
// registers (notebook A4_realignment): the roofline loop of vectorized_loops.cuh
// (map_tiles), as map_realigned_tiles, for a 16-bit input that is not 16-byte
// aligned where out is, e.g. x[1:] into a fresh result.
#pragma once

#include <cstdint>
#include <utility>

#include "vectors.cuh"

namespace selu_course {

// region: realign
// A misaligned fp16 or bf16 input, read 16 bytes at a time anyway. Vector i of
// the input starts `words` 32-bit words and `shift` bits past a 16-byte boundary
// (the same for every i: vectors are 16 bytes apart), so it is the end of the
// aligned 16-byte chunk i that holds its first element and the start of chunk
// i + 1. Each lane loads its chunk i with one aligned 16-byte load, and takes
// chunk i + 1 from the lane that loaded it as its own, with a shuffle. For that
// the chunk must be in the same warp, so here each warp takes a run of
// consecutive vectors (warp_run_vector): at each step its lanes hold 32 consecutive
// chunks, the chunk after lane 31's is lane 0's at the next step, and only the
// chunk after the warp's whole run is loaded twice (for lane 31 at the last
// step, and by the warp that owns it). So each byte is requested from memory
// about once, as in the aligned kernel, where reading each vector as five 4-byte
// words would request the same sectors up to five times over.
//
// Chunk 0 starts up to 14 bytes before the input's first element: memory of the
// same allocation, since CUDA's allocators return memory aligned to 256 bytes.
// It is read, never written. The chunk after the last vector's is kept inside
// the tensor by map_realigned_tiles, which leaves one vector's worth of elements
// (kSlackElements) to its one-by-one tail.
struct Realignment {
  const uint4* chunks;  // the 16-byte boundary at or before the input's first element
  unsigned words;       // whole 32-bit words from there to the first element: 0 to 3
  unsigned shift;       // and the bits past them: 0 or 16
};

template <typename T>
__device__ __forceinline__ Realignment realignment(const T* first) {
  static_assert(sizeof(T) == 2, "fp16 and bf16 only");
  const auto address = reinterpret_cast<std::uintptr_t>(first);
  const auto bytes = static_cast<unsigned>(address % kVectorBytes);
  return {reinterpret_cast<const uint4*>(address - bytes), bytes / 4, (bytes % 4) * 8};
}

// Whether map_vectors realigns its inputs in registers: fp16 and bf16 whose
// inputs are not all 16-byte aligned where out is.
template <typename T, bool ALIGNED>
constexpr bool kRealigns = !ALIGNED && sizeof(T) == 2;

// Elements the vector loop leaves to the tail, so that the chunk after the last
// vector's, which a realigned load reads, lies inside the tensor.
template <typename T, bool ALIGNED>
constexpr int64_t kSlackElements = kRealigns<T, ALIGNED> ? kElementsPerVector<T> : 0;

// The vector that this lane handles at step v of the tile that starts at
// tile_start (blockDim.x * VECTORS_PER_THREAD vectors) when each warp takes a
// run of consecutive vectors: warp w takes vectors [32 * VECTORS_PER_THREAD * w,
// 32 * VECTORS_PER_THREAD * (w + 1)) of the tile, 32 per step, so each step of a
// warp still covers 32 consecutive vectors, 512 contiguous bytes.
template <int VECTORS_PER_THREAD>
__device__ __forceinline__ int64_t warp_run_vector(int64_t tile_start, int v) {
  const int64_t run_start = tile_start + static_cast<int64_t>(threadIdx.x / 32) * 32 * VECTORS_PER_THREAD;
  return run_start + v * 32 + threadIdx.x % 32;
}

// One vector of a realigned input, for all lanes of the warp at once (all 32
// must call it: it shuffles). `own` is this lane's chunk; `sent` is what this
// lane passes to the lane before it (its own chunk, or lane 0's next one, which
// lane 31 needs); `after` is the chunk lane 31 loaded itself at the last step,
// used where `use_after`. WORDS is the word offset where it is known at compile
// time (map_vectors makes it so for one input, and the realignment then selects
// nothing at run time), or -1 for the run-time `realignment.words`.
template <int WORDS>
__device__ __forceinline__ uint4 realign(uint4 own, uint4 sent, uint4 after, bool use_after,
                                         const Realignment& realignment) {
  uint32_t chunks[8] = {own.x, own.y, own.z, own.w, 0, 0, 0, 0};
  const uint32_t sent_words[4] = {sent.x, sent.y, sent.z, sent.w};
  const uint32_t after_words[4] = {after.x, after.y, after.z, after.w};
  // The next chunk's first words, from the next lane (lane 31's from lane 0):
  // with the offset known, only those the vector reaches into.
  constexpr int kShared = WORDS < 0 ? 4 : WORDS + 1;
  const unsigned next_lane = (threadIdx.x + 1) % 32;
#pragma unroll
  for (int k = 0; k < kShared; ++k) {
    const uint32_t shared = __shfl_sync(0xffffffffu, sent_words[k], next_lane);
    chunks[4 + k] = use_after ? after_words[k] : shared;
  }
  // The five words the vector overlaps: chunks[words] to chunks[words + 4].
  uint32_t window[5];
  if constexpr (WORDS >= 0) {
#pragma unroll
    for (int k = 0; k < 5; ++k) {
      window[k] = chunks[WORDS + k];
    }
  } else {
    // A register array indexed at run time would live in local memory: select
    // instead, by two words and then by one.
    uint32_t by_two[6];
#pragma unroll
    for (int k = 0; k < 6; ++k) {
      by_two[k] = (realignment.words & 2) ? chunks[k + 2] : chunks[k];
    }
#pragma unroll
    for (int k = 0; k < 5; ++k) {
      window[k] = (realignment.words & 1) ? by_two[k + 1] : by_two[k];
    }
  }
  // Each word of the vector: the high half of one word and the low half of the
  // next (little-endian: the element at the lower address is the low half).
  return make_uint4(__funnelshift_r(window[0], window[1], realignment.shift),
                    __funnelshift_r(window[1], window[2], realignment.shift),
                    __funnelshift_r(window[2], window[3], realignment.shift),
                    __funnelshift_r(window[3], window[4], realignment.shift));
}

// Step 1 of map_realigned_tiles: the tile's vectors of every input,
// into packs. The shuffles need every lane of the warp, so this runs outside
// the `i < num_vectors` test, on whatever a lane past the end holds. WHOLE:
// the tile and the chunk after it lie inside the tensor (whole_realigned_tile),
// so no load is tested.
template <bool WHOLE, int WORDS, typename T, int VECTORS_PER_THREAD, int INPUTS>
__device__ __forceinline__ void realigned_loads(Pack<T> (&packs)[INPUTS][VECTORS_PER_THREAD],
                                                const T* (&inputs)[INPUTS], int64_t tile_start,
                                                int64_t num_vectors) {
  Realignment realignments[INPUTS];
#pragma unroll
  for (int k = 0; k < INPUTS; ++k) {
    realignments[k] = realignment(inputs[k]);
  }
  const unsigned lane = threadIdx.x % 32;
  // All loads first, so that they are in flight together: chunks 0 to
  // num_vectors (the last one is the chunk after the last vector's), and the
  // chunk after the warp's run, which lane 31 needs. Every lane loads that one,
  // at the same address: one request for the warp, and fewer instructions
  // than a load for lane 31 alone, which needs a test and zeros for the rest.
  uint4 own[INPUTS][VECTORS_PER_THREAD], after[INPUTS];
  const uint4 none = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int v = 0; v < VECTORS_PER_THREAD; ++v) {
    const int64_t i = warp_run_vector<VECTORS_PER_THREAD>(tile_start, v);
#pragma unroll
    for (int k = 0; k < INPUTS; ++k) {
      own[k][v] = (WHOLE || i <= num_vectors) ? __ldg(realignments[k].chunks + i) : none;
    }
  }
  // The vector at step VECTORS_PER_THREAD, less the lane: the run's end, the same in every lane.
  const int64_t after_run = warp_run_vector<VECTORS_PER_THREAD>(tile_start, VECTORS_PER_THREAD) - lane;
#pragma unroll
  for (int k = 0; k < INPUTS; ++k) {
    after[k] = (WHOLE || after_run <= num_vectors) ? __ldg(realignments[k].chunks + after_run) : none;
  }
#pragma unroll
  for (int v = 0; v < VECTORS_PER_THREAD; ++v) {
    const bool last_step = v == VECTORS_PER_THREAD - 1;
#pragma unroll
    for (int k = 0; k < INPUTS; ++k) {
      const uint4 sent = (lane == 0 && !last_step) ? own[k][last_step ? v : v + 1] : own[k][v];
      packs[k][v].vector = realign<WORDS>(own[k][v], sent, after[k], lane == 31 && last_step, realignments[k]);
    }
  }
}
// endregion

// region: realigned_tiles
// A tile of realigned inputs that lies whole inside the tensor: its vectors,
// and the chunk after its last, are all at most num_vectors. Every tile but the
// last is one. So map_realigned_tiles' steps 1 and 2, without a bounds test: realigned
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
    out_vectors[warp_run_vector<VECTORS_PER_THREAD>(tile_start, v)] = packs[0][v].vector;
  }
}

// map_tiles (vectorized_loops.cuh) for fp16 and bf16 inputs realigned in
// registers: the same tiles, loads first, but each warp takes a run of
// consecutive vectors (warp_run_vector), and one vector's worth of elements
// (kSlackElements) is left to the one-by-one tail so that the chunk after the
// last vector's lies inside the tensor. WORDS: see realign.
template <typename T, int VECTORS_PER_THREAD, int WORDS, typename Op, typename... Inputs>
__device__ __forceinline__ void map_realigned_tiles(Op op, T* out, int64_t numel, const Inputs*... inputs) {
  using Vector = typename VectorOf<T>::type;
  constexpr int kInputs = sizeof...(Inputs);
  const T* in_body[kInputs] = {inputs...};
  Vector* out_vectors = reinterpret_cast<Vector*>(out);
  const int64_t slack = kSlackElements<T, false>;
  const int64_t num_vectors = numel > slack ? (numel - slack) / kElementsPerVector<T> : 0;
  const int64_t tile = static_cast<int64_t>(blockDim.x) * VECTORS_PER_THREAD;

  for (int64_t tile_start = blockIdx.x * tile; tile_start < num_vectors; tile_start += gridDim.x * tile) {
    if (tile_start + tile <= num_vectors) {  // every tile but the last: no test needed
      whole_realigned_tile<WORDS, T, VECTORS_PER_THREAD>(op, out_vectors, in_body, tile_start, num_vectors);
      continue;
    }
    Pack<T> packs[kInputs][VECTORS_PER_THREAD];
    realigned_loads<false, WORDS>(packs, in_body, tile_start, num_vectors);
#pragma unroll
    for (int v = 0; v < VECTORS_PER_THREAD; ++v) {
      const int64_t i = warp_run_vector<VECTORS_PER_THREAD>(tile_start, v);
      if (i < num_vectors) {
        apply_to_vector<T>(op, packs, v, std::make_index_sequence<kInputs>{});
        out_vectors[i] = packs[0][v].vector;
      }
    }
  }
  map_tail(op, out, num_vectors * kElementsPerVector<T>, numel, inputs...);
}
// endregion

}  // namespace selu_course
