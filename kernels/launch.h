// The launch of selu_vectorized, as host arithmetic and nothing else: its default,
// how it shrinks for a small tensor, and the grid it makes. Written once, here:
// the CUDA launcher (selu_vectorized.cu) launches with it, and the CPU library
// (selu_cpu.cpp), which every machine builds, registers it as the operators
// selu_course::default_launch_config and selu_course::launch_for_size, so that
// Python asks C++ what the kernel does instead of copying the rule.
#pragma once

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "selu_checks.h"

namespace selu_course {
// Internal linkage: the CPU and the CUDA library each include this header and are loaded
// (and unloaded) on their own, so neither may bind to the other's copy of these functions.
namespace {

constexpr int64_t kLaunchVectorBytes = 16;  // the kernel moves 16-byte vectors (vectors.cuh)
constexpr int64_t kMaxBlocks = 2147483647;  // gridDim.x is at most 2^31 - 1

struct LaunchConfig {
  int threads_per_block;
  int vectors_per_thread;
  int64_t max_blocks_per_sm;  // 0: one block per tile (one-shot grid)
};

// region: default_config
// The launch until a notebook calls helpers.tuning.configure(device), which
// measures this GPU: 128 threads, two 16-byte vectors per thread, one-shot grid.
// It is what torch's own elementwise kernels do for fp32 (8 elements per thread
// in 128-thread blocks), a sound start on any GPU; the best on a given one is
// measured, not assumed (notebook 03).
inline LaunchConfig default_config(at::ScalarType) { return LaunchConfig{128, 2, 0}; }
// endregion

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Tiles of threads_per_block x vectors_per_thread vectors over numel elements.
inline int64_t tiles_for(int64_t numel, int64_t element_size, const LaunchConfig& config) {
  const int64_t num_vectors = numel / (kLaunchVectorBytes / element_size);
  return ceil_div(num_vectors, int64_t{config.threads_per_block} * config.vectors_per_thread);
}

// region: grid_for
// gridDim.x for a kernel that needs `blocks_needed` blocks to cover the tensor
// once: all of them for a one-shot grid, at most k per SM for a capped grid
// (the kernels' grid-stride loops do the rest), on a GPU of `sms` SMs (read
// only for a capped grid). At least one block, so that the tail of a tensor
// smaller than a vector is still done.
inline unsigned int grid_for(int64_t blocks_needed, const LaunchConfig& config, int64_t sms) {
  int64_t limit = kMaxBlocks;
  if (config.max_blocks_per_sm > 0) {
    limit = std::min(config.max_blocks_per_sm, kMaxBlocks / sms) * sms;
  }
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min(blocks_needed, limit)));
}
// endregion

// region: small_tensors
// A configuration tuned on 6.4 GB gives a smaller tensor few, long-lived blocks:
// 2^16 bf16 elements in tiles of 256 threads x 8 vectors are 4 blocks, on a GPU
// of 132 SMs, and most SMs then sit idle. Below kMinBlocksPerSM blocks per SM,
// halve the vectors per thread, then the threads per block (down to 128), until
// there are enough or nothing is left to halve. The reference size, with
// hundreds of thousands of tiles, is untouched.
constexpr int64_t kMinBlocksPerSM = 8;

inline LaunchConfig for_size(LaunchConfig config, int64_t numel, int64_t element_size, int64_t sms) {
  const int64_t wanted = kMinBlocksPerSM * sms;
  while (tiles_for(numel, element_size, config) < wanted && config.vectors_per_thread > 1) {
    config.vectors_per_thread /= 2;
  }
  while (tiles_for(numel, element_size, config) < wanted && config.threads_per_block > 128) {
    config.threads_per_block /= 2;
  }
  return config;
}
// endregion

// The operators that answer for this header on every machine (registered by
// selu_cpu.cpp). [threads_per_block, vectors_per_thread, max_blocks_per_sm]:
inline std::vector<int64_t> default_launch_config_op() {
  const LaunchConfig config = default_config(at::kFloat);
  return {config.threads_per_block, config.vectors_per_thread, config.max_blocks_per_sm};
}

// [threads_per_block, vectors_per_thread, blocks]: the launch selu_vectorized makes
// for a contiguous tensor of numel elements of dtype at `config`, on a GPU of `sms` SMs.
inline std::vector<int64_t> launch_for_size_op(int64_t numel, at::ScalarType dtype, int64_t threads_per_block,
                                               int64_t vectors_per_thread, int64_t max_blocks_per_sm, int64_t sms) {
  constexpr const char* op = "selu_course::launch_for_size";
  TORCH_CHECK(is_supported_float(dtype), op, ": expected float32, float64, float16 or bfloat16, got ", dtype, ".");
  TORCH_CHECK(numel >= 0 && sms > 0, op, ": numel must be 0 or more and sms more than 0, got ", numel, " and ",
              sms, ".");
  check_launch_config(threads_per_block, vectors_per_thread, max_blocks_per_sm, op);
  const int64_t element_size = c10::elementSize(dtype);
  const LaunchConfig launch = for_size(LaunchConfig{static_cast<int>(threads_per_block),
                                                    static_cast<int>(vectors_per_thread), max_blocks_per_sm},
                                       numel, element_size, sms);
  return {launch.threads_per_block, launch.vectors_per_thread,
          grid_for(tiles_for(numel, element_size, launch), launch, sms)};
}

// check_launch_config as an operator, for the fake kernel of selu_vectorized_with_config.
inline void check_launch_config_op(int64_t threads_per_block, int64_t vectors_per_thread,
                                   int64_t max_blocks_per_sm) {
  check_launch_config(threads_per_block, vectors_per_thread, max_blocks_per_sm,
                      "selu_course::selu_vectorized_with_config");
}

inline void check_elements_per_thread_op(int64_t elements_per_thread) {
  check_elements_per_thread(elements_per_thread, "selu_course::selu_naive_unrolled");
}

}  // namespace
}  // namespace selu_course
