// Declarations of every function the SELU extensions export to Python.
//
// Each kernel file (selu_naive.cu, selu_vectorized.cu, selu_cpu.cpp) includes
// this header, and so does the binding file that helpers.build generates. The
// compiler then checks every definition against the one declaration that the
// bindings use: a signature that drifts, or an extern "C" on one side only,
// is a compile error instead of an "undefined symbol" at import.
#pragma once

#include <torch/extension.h>

namespace selu_course {

// ---- every backend (CPU and CUDA) -----------------------------------------
// y = selu(x), a new tensor (empty_like: every element is written once).
torch::Tensor selu(const torch::Tensor& x);
// Writes selu(x) into `out` (same shape, dtype and device, contiguous); returns out.
torch::Tensor selu_out(const torch::Tensor& x, torch::Tensor out);
// First-draft mistakes, for notebook 02 (fp32 only).
torch::Tensor selu_missing_minus_one(const torch::Tensor& x);
torch::Tensor selu_expf_minus_one(const torch::Tensor& x);

// ---- CUDA only: demonstrations of launch mistakes (selu_naive.cu) -----------
// The right kernel, launched on the legacy default stream instead of torch's
// current stream: races with work queued on a side stream.
torch::Tensor selu_on_legacy_default_stream(const torch::Tensor& x);
// The right kernel, given the element count as a 32-bit int: past 2^31
// elements the count wraps and elements are silently left unwritten.
torch::Tensor selu_with_int32_count(const torch::Tensor& x);

// ---- CUDA only: launch knobs of the vectorized kernel (selu_vectorized.cu) ---
// threads_per_block in {64, 128, 256, 512, 1024}; vectors_per_thread in
// {1, 2, 4, 8} (16-byte vectors each thread loads before it computes);
// max_blocks_per_sm = 0 launches one block per tile (a "one-shot" grid),
// k > 0 caps the grid at k blocks per SM and loops over tiles (grid-stride).
torch::Tensor selu_with_config(const torch::Tensor& x, int64_t threads_per_block,
                               int64_t vectors_per_thread, int64_t max_blocks_per_sm);

}  // namespace selu_course
