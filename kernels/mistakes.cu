// MISTAKES, ON PURPOSE: the CUDA implementations of appendix A9's first-draft
// operators. The kernel is selu_naive.cuh's; what is wrong is the math
// (mistakes_math.cuh) or the launch (below). Each is an operator of its own, so
// that a notebook can run it next to the right one and a test can catch it.
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "elementwise.h"
#include "mistakes_math.cuh"
#include "selu_checks.h"
#include "selu_math.cuh"
#include "selu_naive.cuh"

namespace selu_course {
namespace {

template <typename Launch>
at::Tensor run_on_gpu(const at::Tensor& x, const char* op, Launch launch) {
  check_device(x, c10::DeviceType::CUDA, op);
  check_floating(x, op);
  check_float32(x, op);
  const c10::cuda::CUDAGuard device_guard(x.device());
  return unary_new_tensor(x, launch);
}

at::Tensor missing_minus_one(const at::Tensor& x) {
  return run_on_gpu(x, "selu_course::mistake_missing_minus_one", [](const at::Tensor& src, at::Tensor& out) {
    launch_naive(src, out, mistakes::MissingMinusOneOp{});
  });
}

at::Tensor expf_minus_one(const at::Tensor& x) {
  return run_on_gpu(x, "selu_course::mistake_expf_minus_one", [](const at::Tensor& src, at::Tensor& out) {
    launch_naive(src, out, mistakes::ExpfMinusOneOp{});
  });
}

// region: legacy_default_stream
// WRONG ON PURPOSE: `<<<grid, block>>>` without a stream argument launches on
// the legacy default stream (stream 0), not on torch's current stream.
// torch queues every op on its current stream, which `with torch.cuda.stream(s)`
// changes, and the side streams torch creates are non-blocking: stream 0 does
// not wait for them. So this kernel can read x before a copy queued on s has
// written it, and work queued on s afterwards can read y before this kernel
// has written it. Nothing fails: the result is silently stale.
at::Tensor legacy_default_stream(const at::Tensor& x) {
  return run_on_gpu(x, "selu_course::mistake_legacy_default_stream", [](const at::Tensor& src, at::Tensor& out) {
    const int64_t numel = src.numel();
    if (numel == 0) {
      return;
    }
    selu_naive_kernel<<<naive_blocks_for(numel), kNaiveThreadsPerBlock>>>(
        src.const_data_ptr<float>(), out.mutable_data_ptr<float>(), numel, SeluOp{});
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}
// endregion

// region: int32_count
// WRONG ON PURPOSE: the element count goes through an `int`. Past 2^31 - 1 it
// wraps: 2^31 + 12345 elements become a negative count, 2^32 + 12345 become
// 12345. The launch stays in bounds (grid and bound check both come from the
// truncated count, and a count <= 0 launches nothing), so nothing crashes and
// no error is raised: the elements past the truncated count are simply never
// written, and y keeps whatever its memory held before.
at::Tensor int32_count(const at::Tensor& x) {
  return run_on_gpu(x, "selu_course::mistake_int32_count", [](const at::Tensor& src, at::Tensor& out) {
    const int count = static_cast<int>(src.numel());  // the bug: int64_t narrowed to int
    if (count <= 0) {
      return;
    }
    selu_naive_kernel<<<naive_blocks_for(count), kNaiveThreadsPerBlock, 0, c10::cuda::getCurrentCUDAStream()>>>(
        src.const_data_ptr<float>(), out.mutable_data_ptr<float>(), count, SeluOp{});
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}
// endregion

// region: int32_index
// WRONG ON PURPOSE: the index is widened to 64 bits too late. blockIdx.x *
// blockDim.x + threadIdx.x is unsigned 32-bit arithmetic, which wraps past
// 2^32: the thread for element 2^32 + k computes k, passes the bound check and
// writes element k (the value element k gets anyway). The elements from 2^32
// on are never written; nothing crashes and no error is raised.
template <typename Op>
__global__ void int32_index_kernel(const float* x, float* y, int64_t numel, Op op) {
  const int64_t i = blockIdx.x * blockDim.x + threadIdx.x;  // the bug: wraps before the widening
  if (i < numel) {
    y[i] = op(x[i]);
  }
}

at::Tensor int32_index(const at::Tensor& x) {
  return run_on_gpu(x, "selu_course::mistake_int32_index", [](const at::Tensor& src, at::Tensor& out) {
    const int64_t numel = src.numel();
    if (numel == 0) {
      return;
    }
    int32_index_kernel<<<naive_blocks_for(numel), kNaiveThreadsPerBlock, 0, c10::cuda::getCurrentCUDAStream()>>>(
        src.const_data_ptr<float>(), out.mutable_data_ptr<float>(), numel, SeluOp{});
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}
// endregion

}  // namespace

TORCH_LIBRARY_IMPL(selu_course, CUDA, m) {
  m.impl("mistake_missing_minus_one", &missing_minus_one);
  m.impl("mistake_expf_minus_one", &expf_minus_one);
  m.impl("mistake_legacy_default_stream", &legacy_default_stream);
  m.impl("mistake_int32_count", &int32_count);
  m.impl("mistake_int32_index", &int32_index);
}

}  // namespace selu_course
