// SELU at the memory roofline: 16-byte vector loads and stores, every
// floating dtype.
//
// SELU does a few flops per element and moves 2 x sizeof(T) bytes, so its speed
// is the speed at which memory is read and written. What this kernel changes
// against the naive one, each to keep more bytes in flight per instruction:
//   * 16-byte accesses: one load instruction moves 4 floats, 8 halves or 2
//     doubles, where the naive kernel's moves one element;
//   * VECTORS_PER_THREAD independent loads issued before any math, so that each
//     thread has several requests outstanding instead of waiting on each one;
//   * 64-bit indexing, and a grid that can be capped and loop over tiles.
//   * read-only loads (ld.global.nc, through __ldg) where x is only read, and
//     plain coherent loads where out is x itself (an in-place out=): a read-only
//     load of memory that the same kernel writes is undefined, so each launch
//     picks one of two instantiations by whether the pointers are equal. The
//     pointers are never declared __restrict__, for the same reason.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

// The c10 headers, not <ATen/cuda/CUDAContext.h>: they are all this file uses,
// and they compile without the cuBLAS and cuSPARSE headers that CUDAContext.h
// pulls in, so that helpers.nvcc can compile this file to PTX on a machine with
// only the CUDA compiler installed.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "elementwise.h"
#include "launch.h"
#include "selu_checks.h"
#include "selu_math.cuh"
#include "vectorized_loops.cuh"
#include "vectors.cuh"

namespace selu_course {
namespace {

static_assert(kLaunchVectorBytes == kVectorBytes, "launch.h counts the vectors of vectors.cuh");

// region: element
// selu of one element in the math type (float for fp16/bf16, T itself for fp32
// and fp64; the loop converts, vectorized_loops.cuh). The 16-bit types take the
// economical path of selu_math.cuh: the same roundings as expm1f's, in about
// half the instructions, which is what the H200 needs for them.
template <typename T>
struct SeluElement {
  template <typename M>
  __device__ __forceinline__ M operator()(M value) const {
    if constexpr (sizeof(T) == 2) {
      return selu_economical(value);
    } else {
      return selu(value);
    }
  }
};
// endregion

// region: kernel
// The roofline kernel: the tile loop of vectorized_loops.cuh with SeluElement.
// y must be 16-byte aligned (the launcher does the elements before that
// boundary first, and passes x and y past them). IN_PLACE says whether y is x:
// then x's loads must be plain ones (ld.global), since this kernel also writes
// x; otherwise they go through the read-only path (ld.global.nc). ALIGNED says
// whether x is 16-byte aligned too, so that x is read 16 bytes at a time; if
// not, element by element (fp32, fp64) or realigned in registers (fp16, bf16).
template <typename T, int VECTORS_PER_THREAD, bool IN_PLACE, bool ALIGNED>
__global__ void __launch_bounds__(kMaxThreadsPerBlock) selu_vectorized_kernel(const T* x, T* y, int64_t numel) {
  map_vectors<T, VECTORS_PER_THREAD, IN_PLACE, ALIGNED>(SeluElement<T>{}, y, numel, x);
}
// endregion

// region: scalar_fallback
// The fallback when x or y is not even a multiple of sizeof(T): one element per
// thread per step (map_elements in vectorized_loops.cuh).
template <typename T>
__global__ void selu_scalar_kernel(const T* x, T* y, int64_t numel) {
  map_elements(SeluElement<T>{}, y, numel, x);
}
// endregion

// region: copy
// The same tile loop with no math (Identity, vectorized_loops.cuh): the bytes SELU
// moves, moved the way the SELU kernel moves them, with the same launch: the
// memory side alone. Beside the SELU kernel and torch's copy, the SELU kernel's
// gap to it is the math's, and its gap to torch's copy is the access pattern's.
// No notebook times it; tests/test_ops.py and test_nvcc.py check it. The type
// comes last among its template arguments, so that a search of the PTX for
// "<float, 4, false, true>" finds the SELU kernel only.
template <int VECTORS_PER_THREAD, bool IN_PLACE, bool ALIGNED, typename T>
__global__ void __launch_bounds__(kMaxThreadsPerBlock) copy_vectorized_kernel(const T* x, T* y, int64_t numel) {
  map_vectors<T, VECTORS_PER_THREAD, IN_PLACE, ALIGNED>(Identity{}, y, numel, x);
}

template <typename T>
__global__ void copy_scalar_kernel(const T* x, T* y, int64_t numel) {
  map_elements(Identity{}, y, numel, x);
}
// endregion

// ---------------------------------------------------------------------------
// Host side: choosing the grid and the kernel. The arithmetic of the launch
// (default_config, for_size, grid_for) is in launch.h.
// ---------------------------------------------------------------------------

// region: launch_table
// The launch configuration in use, per GPU and dtype. What is fastest depends on
// the GPU: the H200 moves 1.43x the H100's bytes with the same SMs, and needs
// more of them in flight per thread. helpers.tuning times the candidates on the
// GPU at hand and sets the winner here (selu_course::set_launch_config), cached
// per GPU model; until then, default_config (launch.h).
struct LaunchTable {
  std::mutex mutex;
  std::map<std::pair<c10::DeviceIndex, at::ScalarType>, LaunchConfig> configs;
};

LaunchTable& launch_table() {
  static LaunchTable table;  // one per loaded library, for the life of the process
  return table;
}

c10::DeviceIndex cuda_index(const c10::Device& device, const char* op) {
  TORCH_CHECK(device.is_cuda(), op, ": launch configurations are per CUDA device, got ", device,
              "; pass e.g. torch.device('cuda', 0).");
  return device.has_index() ? device.index() : c10::cuda::current_device();
}

LaunchConfig launch_config_for(c10::DeviceIndex device, at::ScalarType dtype) {
  LaunchTable& table = launch_table();
  const std::lock_guard<std::mutex> lock(table.mutex);
  const auto found = table.configs.find({device, dtype});
  return found == table.configs.end() ? default_config(dtype) : found->second;
}

void set_launch_config(c10::Device device, at::ScalarType dtype, int64_t threads_per_block,
                       int64_t vectors_per_thread, int64_t max_blocks_per_sm) {
  constexpr const char* op = "selu_course::set_launch_config";
  const c10::DeviceIndex index = cuda_index(device, op);
  TORCH_CHECK(is_supported_float(dtype), op, ": expected float32, float64, float16 or bfloat16, got ", dtype, ".");
  check_launch_config(threads_per_block, vectors_per_thread, max_blocks_per_sm, op);
  LaunchTable& table = launch_table();
  const std::lock_guard<std::mutex> lock(table.mutex);
  table.configs[{index, dtype}] = LaunchConfig{static_cast<int>(threads_per_block),
                                               static_cast<int>(vectors_per_thread), max_blocks_per_sm};
}

// [threads_per_block, vectors_per_thread, max_blocks_per_sm] in use on `device` for `dtype`.
std::vector<int64_t> launch_config(c10::Device device, at::ScalarType dtype) {
  constexpr const char* op = "selu_course::launch_config";
  const c10::DeviceIndex index = cuda_index(device, op);
  TORCH_CHECK(is_supported_float(dtype), op, ": expected float32, float64, float16 or bfloat16, got ", dtype, ".");
  const LaunchConfig config = launch_config_for(index, dtype);
  return {config.threads_per_block, config.vectors_per_thread, config.max_blocks_per_sm};
}
// endregion

int multiprocessor_count(c10::DeviceIndex device) {
  int count = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

// region: grid
// gridDim.x: launch.h's grid_for on this GPU, whose SMs are counted only for a
// capped grid.
unsigned int grid_size(int64_t blocks_needed, const LaunchConfig& config, c10::DeviceIndex device) {
  return grid_for(blocks_needed, config, config.max_blocks_per_sm > 0 ? multiprocessor_count(device) : 0);
}

// One launch of the tile loop: the SELU kernel, or with COPY the same loop with no math.
template <bool COPY, typename T, int VECTORS_PER_THREAD, bool IN_PLACE, bool ALIGNED>
void launch_tiles(unsigned int blocks, int threads, c10::cuda::CUDAStream stream, const T* x, T* y, int64_t numel) {
  if constexpr (COPY) {
    copy_vectorized_kernel<VECTORS_PER_THREAD, IN_PLACE, ALIGNED, T><<<blocks, threads, 0, stream>>>(x, y, numel);
  } else {
    selu_vectorized_kernel<T, VECTORS_PER_THREAD, IN_PLACE, ALIGNED><<<blocks, threads, 0, stream>>>(x, y, numel);
  }
}

// One element per thread, grid-stride: the fallback for pointers that are not a
// multiple of sizeof(T), and the head of launch_vectorized.
template <bool COPY, typename T>
void launch_elements(unsigned int blocks, int threads, c10::cuda::CUDAStream stream, const T* x, T* y, int64_t numel) {
  if constexpr (COPY) {
    copy_scalar_kernel<T><<<blocks, threads, 0, stream>>>(x, y, numel);
  } else {
    selu_scalar_kernel<T><<<blocks, threads, 0, stream>>>(x, y, numel);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
// endregion

// region: launch_vectorized
template <bool COPY, typename T, int VECTORS_PER_THREAD>
void launch_vectorized(const T* x, T* y, int64_t numel, const LaunchConfig& config, c10::cuda::CUDAStream stream) {
  // The head: the elements before y's first 16-byte boundary (none for a fresh
  // y), one per thread, in a launch of their own, so that the tile loop's
  // threads never spend instructions on it. Then everything after them, with y
  // aligned; x may or may not be (x[1:] into a fresh y: it is not).
  const int64_t head = std::min(elements_before_alignment(y), numel);
  if (head > 0) {
    launch_elements<COPY, T>(1, static_cast<int>(head), stream, x, y, head);
    x += head;
    y += head;
    numel -= head;
    if (numel == 0) {
      return;
    }
  }
  const bool x_aligned = is_16_byte_aligned(x);
  const int64_t num_vectors = numel / kElementsPerVector<T>;  // at most: the kernel may leave one more vector to its tail
  const int64_t tiles = ceil_div(num_vectors, int64_t{config.threads_per_block} * VECTORS_PER_THREAD);
  const unsigned int blocks = grid_size(tiles, config, stream.device_index());
  // x and y either are the same memory (in place) or do not overlap at all: the
  // operators refuse a partial overlap before they get here (elementwise.h).
  const int threads = config.threads_per_block;
  if (x == y) {
    launch_tiles<COPY, T, VECTORS_PER_THREAD, true, true>(blocks, threads, stream, x, y, numel);
  } else if (x_aligned) {
    launch_tiles<COPY, T, VECTORS_PER_THREAD, false, true>(blocks, threads, stream, x, y, numel);
  } else {
    launch_tiles<COPY, T, VECTORS_PER_THREAD, false, false>(blocks, threads, stream, x, y, numel);
  }
  // Launch errors are only reported when asked for; without this check they
  // surface at some later, unrelated CUDA call.
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
// endregion

// region: launch
// COPY: the copy kernels (copy_vectorized), otherwise the SELU kernels.
template <bool COPY, typename T>
void launch_kernels(const T* x, T* y, int64_t numel, const LaunchConfig& config, c10::cuda::CUDAStream stream) {
  if (!is_element_aligned(x) || !is_element_aligned(y)) {
    const int64_t blocks_needed = ceil_div(numel, config.threads_per_block);
    launch_elements<COPY, T>(grid_size(blocks_needed, config, stream.device_index()), config.threads_per_block, stream,
                             x, y, numel);
    return;
  }
  // VECTORS_PER_THREAD sizes a register array, so it must be a compile-time
  // constant: one instantiation per allowed value, chosen here at run time.
  switch (config.vectors_per_thread) {
    case 1: return launch_vectorized<COPY, T, 1>(x, y, numel, config, stream);
    case 2: return launch_vectorized<COPY, T, 2>(x, y, numel, config, stream);
    case 4: return launch_vectorized<COPY, T, 4>(x, y, numel, config, stream);
    case 8: return launch_vectorized<COPY, T, 8>(x, y, numel, config, stream);
  }
  TORCH_CHECK(false, "selu_course::selu_vectorized: no kernel for vectors_per_thread = ", config.vectors_per_thread);
}
// endregion

void check_input(const at::Tensor& x, const char* op) {
  check_device(x, c10::DeviceType::CUDA, op);
  check_floating(x, op);
}

// region: dispatch
// selu over src into out: dense tensors of one layout (see elementwise.h), so
// the kernel walks both linearly. AT_DISPATCH_FLOATING_TYPES_AND2 instantiates
// the launcher for fp64, fp32, fp16 and bf16, naming the type scalar_t.
// `exact`: launch `config` as given (selu_vectorized_with_config, which measures
// configurations); otherwise fit it to the tensor's size first (for_size, launch.h).
// `copy`: the copy kernels instead of the SELU kernels (copy_vectorized).
void selu_dense(const at::Tensor& src, at::Tensor& out, const LaunchConfig& config, bool exact = false,
                bool copy = false) {
  const int64_t numel = src.numel();
  if (numel == 0) {
    return;  // a grid of 0 blocks is an invalid launch configuration
  }
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "selu_vectorized", [&] {
    const LaunchConfig launch =
        exact ? config : for_size(config, numel, sizeof(scalar_t), multiprocessor_count(stream.device_index()));
    const scalar_t* x = src.const_data_ptr<scalar_t>();
    scalar_t* y = out.mutable_data_ptr<scalar_t>();
    if (copy) {
      launch_kernels<true, scalar_t>(x, y, numel, launch, stream);
    } else {
      launch_kernels<false, scalar_t>(x, y, numel, launch, stream);
    }
  });
}
// endregion

at::Tensor selu_with(const at::Tensor& x, const LaunchConfig& config, bool exact = false) {
  // Allocate and launch on x's GPU, not on whichever GPU happens to be current.
  const c10::cuda::CUDAGuard device_guard(x.device());
  return unary_new_tensor(x, [&](const at::Tensor& src, at::Tensor& out) { selu_dense(src, out, config, exact); });
}

at::Tensor selu_vectorized(const at::Tensor& x) {
  check_input(x, "selu_course::selu_vectorized");
  return selu_with(x, launch_config_for(x.device().index(), x.scalar_type()));
}

void selu_vectorized_out(const at::Tensor& x, at::Tensor& out) {
  constexpr const char* op = "selu_course::selu_vectorized.out";
  check_input(x, op);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const LaunchConfig config = launch_config_for(x.device().index(), x.scalar_type());
  unary_out(op, x, out, [&](const at::Tensor& src, at::Tensor& dst) { selu_dense(src, dst, config); });
}

// The mutating form (notebook 04): x's own memory is the output, as for torch.selu_;
// the launcher then picks the instantiation with plain loads (src == out).
void selu_vectorized_inplace(at::Tensor& x) {
  constexpr const char* op = "selu_course::selu_vectorized_";
  check_input(x, op);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const LaunchConfig config = launch_config_for(x.device().index(), x.scalar_type());
  unary_out(op, x, x, [&](const at::Tensor& src, at::Tensor& dst) { selu_dense(src, dst, config); });
}

at::Tensor selu_vectorized_with_config(const at::Tensor& x, int64_t threads_per_block, int64_t vectors_per_thread,
                                       int64_t max_blocks_per_sm) {
  constexpr const char* op = "selu_course::selu_vectorized_with_config";
  check_input(x, op);
  check_launch_config(threads_per_block, vectors_per_thread, max_blocks_per_sm, op);
  return selu_with(x, LaunchConfig{static_cast<int>(threads_per_block), static_cast<int>(vectors_per_thread),
                                   max_blocks_per_sm},
                   /*exact=*/true);
}

// The copy with the launch selu_vectorized uses for x's dtype on x's GPU: what the
// SELU kernel would take with no math at all.
at::Tensor copy_vectorized(const at::Tensor& x) {
  constexpr const char* op = "selu_course::copy_vectorized";
  check_input(x, op);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const LaunchConfig config = launch_config_for(x.device().index(), x.scalar_type());
  return unary_new_tensor(x, [&](const at::Tensor& src, at::Tensor& out) {
    selu_dense(src, out, config, /*exact=*/false, /*copy=*/true);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(selu_course, CUDA, m) {
  m.impl("selu_vectorized", &selu_vectorized);
  m.impl("selu_vectorized.out", &selu_vectorized_out);
  m.impl("selu_vectorized_", &selu_vectorized_inplace);
  m.impl("selu_vectorized_with_config", &selu_vectorized_with_config);
  m.impl("copy_vectorized", &copy_vectorized);
}

// No tensor argument to dispatch on: these run as CompositeExplicitAutograd,
// the kernel the dispatcher picks for an operator called without tensors.
TORCH_LIBRARY_IMPL(selu_course, CompositeExplicitAutograd, m) {
  m.impl("set_launch_config", &set_launch_config);
  m.impl("launch_config", &launch_config);
}

}  // namespace selu_course
