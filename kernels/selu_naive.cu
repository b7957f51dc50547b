// The first draft of a SELU kernel: one thread per element, float32 only.
//
// It is correct, and it is the baseline the later notebooks measure against:
// every thread loads one 4-byte float, so each warp asks memory for only 128
// bytes at a time. The two "demo" entry points at the end launch this same
// kernel in two wrong ways, so that notebook 02 can show what goes wrong.
#include "selu_ops.h"

// The c10 headers, not <ATen/cuda/CUDAContext.h>: they are all this file uses
// (c10::cuda::getCurrentCUDAStream is what at::cuda::getCurrentCUDAStream
// names), and they compile without the cuBLAS and cuSPARSE headers that
// CUDAContext.h pulls in, so that helpers.nvcc can compile this file to PTX on
// a machine with only the CUDA compiler installed.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "selu_checks.h"
#include "selu_math.cuh"

namespace selu_course {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxBlocks = 2147483647;  // gridDim.x is at most 2^31 - 1

// Thread i computes y[i] = op(x[i]); `op` is SeluOp or one of the first-draft
// mistakes, so every variant runs this one kernel.
template <typename Op>
__global__ void selu_naive_kernel(const float* x, float* y, int64_t numel, Op op) {
  // In 64 bits: blockIdx.x * blockDim.x in 32-bit arithmetic wraps past 2^32
  // elements (16 GiB of float32), and threads would then overwrite the start.
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  // The last block runs past the end unless numel is a multiple of 256.
  if (i < numel) {
    y[i] = op(x[i]);
  }
}

// gridDim.x for numel elements, one thread each.
unsigned int blocks_for(int64_t numel) {
  const int64_t blocks = (numel + kThreadsPerBlock - 1) / kThreadsPerBlock;
  TORCH_CHECK(blocks <= kMaxBlocks, "selu_naive: ", numel, " elements need more than 2^31 - 1 "
              "blocks of ", kThreadsPerBlock, " threads; use the vectorized kernel of notebook 03, "
              "whose grid-stride loop covers any size.");
  return static_cast<unsigned int>(blocks);
}

// The right launch: on torch's current stream, checked.
template <typename Op>
void launch_naive(const torch::Tensor& x, torch::Tensor& y, Op op) {
  const int64_t numel = x.numel();
  if (numel == 0) {
    return;  // a grid of 0 blocks is an invalid launch configuration
  }
  selu_naive_kernel<<<blocks_for(numel), kThreadsPerBlock, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.const_data_ptr<float>(), y.mutable_data_ptr<float>(), numel, op);
  // Launch errors (a bad configuration, no kernel image for this GPU) are only
  // reported when asked for; without this check they surface at some later,
  // unrelated CUDA call.
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void check_input(const torch::Tensor& x, const char* op) {
  check_device(x, c10::DeviceType::CUDA, op);
  check_floating(x, op);
  check_float32(x, op);
}

// Checks x, then runs launch(x_contiguous, y) into a new tensor y.
//
// Non-contiguous input is not an error: the kernel runs on x.contiguous(), so
// the result is correct, at the cost of one extra copy (contiguous() returns x
// itself when it already is). The result is empty_like, not zeros_like: the
// kernel writes every element, and zero-filling first would be a whole extra
// pass over memory.
template <typename Launch>
torch::Tensor into_new_tensor(const torch::Tensor& x, const char* op, Launch launch) {
  check_input(x, op);
  // Allocate and launch on x's GPU, not on whichever GPU happens to be current.
  const c10::cuda::CUDAGuard device_guard(x.device());
  const torch::Tensor x_contiguous = x.contiguous();
  torch::Tensor y = torch::empty_like(x_contiguous);
  launch(x_contiguous, y);
  return y;
}

}  // namespace

torch::Tensor selu(const torch::Tensor& x) {
  return into_new_tensor(x, "selu", [](const torch::Tensor& xc, torch::Tensor& y) {
    launch_naive(xc, y, SeluOp{});
  });
}

torch::Tensor selu_out(const torch::Tensor& x, torch::Tensor out) {
  check_input(x, "selu_out");
  check_out(x, out, "selu_out");
  const c10::cuda::CUDAGuard device_guard(x.device());
  launch_naive(x.contiguous(), out, SeluOp{});
  return out;
}

torch::Tensor selu_missing_minus_one(const torch::Tensor& x) {
  return into_new_tensor(x, "selu_missing_minus_one", [](const torch::Tensor& xc, torch::Tensor& y) {
    launch_naive(xc, y, SeluMissingMinusOneOp{});
  });
}

torch::Tensor selu_expf_minus_one(const torch::Tensor& x) {
  return into_new_tensor(x, "selu_expf_minus_one", [](const torch::Tensor& xc, torch::Tensor& y) {
    launch_naive(xc, y, SeluExpfMinusOneOp{});
  });
}

// ---------------------------------------------------------------------------
// Demonstrations of launch mistakes. The kernel is right; the launch is not.
// ---------------------------------------------------------------------------

// WRONG ON PURPOSE: `<<<grid, block>>>` without a stream argument launches on
// the legacy default stream (stream 0), not on torch's current stream.
// torch queues every op on its current stream, which `with torch.cuda.stream(s)`
// changes, and the side streams torch creates are non-blocking: stream 0 does
// not wait for them. So this kernel can read x before a copy queued on s has
// written it, and work queued on s afterwards can read y before this kernel
// has written it. Nothing fails: the result is silently stale.
torch::Tensor selu_on_legacy_default_stream(const torch::Tensor& x) {
  return into_new_tensor(x, "selu_on_legacy_default_stream", [](const torch::Tensor& xc, torch::Tensor& y) {
    const int64_t numel = xc.numel();
    if (numel == 0) {
      return;
    }
    selu_naive_kernel<<<blocks_for(numel), kThreadsPerBlock>>>(
        xc.const_data_ptr<float>(), y.mutable_data_ptr<float>(), numel, SeluOp{});
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

// WRONG ON PURPOSE: the element count goes through an `int`. Past 2^31 - 1 it
// wraps: 2^31 + 12345 elements become a negative count, 2^32 + 12345 become
// 12345. The launch stays in bounds (grid and bound check both come from the
// truncated count, and a count <= 0 launches nothing), so nothing crashes and
// no error is raised: the elements past the truncated count are simply never
// written, and y keeps whatever its memory held before.
torch::Tensor selu_with_int32_count(const torch::Tensor& x) {
  return into_new_tensor(x, "selu_with_int32_count", [](const torch::Tensor& xc, torch::Tensor& y) {
    const int count = static_cast<int>(xc.numel());  // the bug: int64_t narrowed to int
    if (count <= 0) {
      return;
    }
    selu_naive_kernel<<<blocks_for(count), kThreadsPerBlock, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.const_data_ptr<float>(), y.mutable_data_ptr<float>(), count, SeluOp{});
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace selu_course
