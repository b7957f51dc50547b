// The CPU implementation of every SELU operator of the course.
//
// Every operator has one, as every PyTorch operator does: the same call
// dispatches here for a CPU tensor and to the CUDA kernels (selu_naive.cu,
// selu_vectorized.cu) for a GPU tensor, and on a machine without a GPU the
// notebooks run on these. They call the same scalar function as the CUDA
// kernels (selu_math.cuh) in the same math type, so the two differ only where
// the host's and the device's expm1f round differently: in fp32 and fp64, and
// never in fp16 and bf16, whose economical path uses no library function.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "cpu_loop.h"
#include "elementwise.h"
#include "launch.h"
#include "selu_checks.h"
#include "selu_math.cuh"

namespace selu_course {
namespace {

// fp16 and bf16 take the economical path, as on the GPU: it is made of
// operations that round the same way on every machine, so the CPU gives the
// GPU's bits, and its roundings are torch's (selu_math.cuh says how that is known).
void selu_dense(const at::Tensor& src, at::Tensor& out) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "selu_cpu", [&] {
    if constexpr (sizeof(scalar_t) == 2) {
      cpu_elementwise<scalar_t>(src, out, SeluEconomicalOp{});
    } else {
      cpu_elementwise<scalar_t>(src, out, SeluOp{});
    }
  });
}

void check_input(const at::Tensor& x, const char* op) {
  check_device(x, c10::DeviceType::CPU, op);
  check_floating(x, op);
}

// selu_naive is float32 only on every device, as its CUDA kernel is: the check
// agrees with what the kernel can do, wherever it runs.
at::Tensor selu_naive(const at::Tensor& x) {
  constexpr const char* op = "selu_course::selu_naive";
  check_input(x, op);
  check_float32(x, op);
  return unary_new_tensor(x, selu_dense);
}

void selu_naive_out(const at::Tensor& x, at::Tensor& out) {
  constexpr const char* op = "selu_course::selu_naive.out";
  check_input(x, op);
  check_float32(x, op);
  unary_out(op, x, out, selu_dense);
}

// A CPU has no threads per element to unroll: the knob is checked as on the GPU,
// float32 only as there, and the result is selu(x).
at::Tensor selu_naive_unrolled(const at::Tensor& x, int64_t elements_per_thread) {
  constexpr const char* op = "selu_course::selu_naive_unrolled";
  check_input(x, op);
  check_float32(x, op);
  check_elements_per_thread(elements_per_thread, op);
  return unary_new_tensor(x, selu_dense);
}

at::Tensor selu_vectorized(const at::Tensor& x) {
  check_input(x, "selu_course::selu_vectorized");
  return unary_new_tensor(x, selu_dense);
}

void selu_vectorized_out(const at::Tensor& x, at::Tensor& out) {
  constexpr const char* op = "selu_course::selu_vectorized.out";
  check_input(x, op);
  unary_out(op, x, out, selu_dense);
}

// The mutating form (notebook 04): x's own memory is the output, as for torch.selu_.
void selu_vectorized_inplace(at::Tensor& x) {
  constexpr const char* op = "selu_course::selu_vectorized_";
  check_input(x, op);
  unary_out(op, x, x, selu_dense);
}

// A CPU has no launch configuration; the knobs are checked as on the GPU, so a
// value the CUDA kernel refuses is refused here too, and the result is selu(x).
at::Tensor selu_vectorized_with_config(const at::Tensor& x, int64_t threads_per_block,
                                       int64_t vectors_per_thread, int64_t max_blocks_per_sm) {
  constexpr const char* op = "selu_course::selu_vectorized_with_config";
  check_input(x, op);
  check_launch_config(threads_per_block, vectors_per_thread, max_blocks_per_sm, op);
  return unary_new_tensor(x, selu_dense);
}

// The copy that notebook 03 times beside the SELU kernel on a GPU: on a CPU,
// the bytes copied as they are.
at::Tensor copy_vectorized(const at::Tensor& x) {
  check_input(x, "selu_course::copy_vectorized");
  return unary_new_tensor(x, [](const at::Tensor& src, at::Tensor& out) { out.copy_(src); });
}

}  // namespace

// The schemas are defined once, in helpers/schemas.py; a kernel registered here
// whose C++ signature does not match its schema is refused when it loads.
// region: registration
TORCH_LIBRARY_IMPL(selu_course, CPU, m) {
  m.impl("selu_naive", &selu_naive);
  m.impl("selu_naive.out", &selu_naive_out);
  m.impl("selu_naive_unrolled", &selu_naive_unrolled);
  m.impl("selu_vectorized", &selu_vectorized);
  m.impl("selu_vectorized.out", &selu_vectorized_out);
  m.impl("selu_vectorized_", &selu_vectorized_inplace);
  m.impl("selu_vectorized_with_config", &selu_vectorized_with_config);
  m.impl("copy_vectorized", &copy_vectorized);
}
// endregion

// The arithmetic of selu_vectorized's launch (launch.h), answered on every machine:
// these take no tensor, so they run as CompositeExplicitAutograd, the kernel the
// dispatcher picks for an operator called without tensors.
TORCH_LIBRARY_IMPL(selu_course, CompositeExplicitAutograd, m) {
  m.impl("default_launch_config", &default_launch_config_op);
  m.impl("launch_for_size", &launch_for_size_op);
  m.impl("check_launch_config", &check_launch_config_op);
  m.impl("check_elements_per_thread", &check_elements_per_thread_op);
}

// selu_vectorized's launch table lives in its CUDA library (selu_vectorized.cu), whose
// CompositeExplicitAutograd kernels answer these two. They are registered here as well, at
// the CPU key, which a call without tensors never reaches, for one reason: the dispatcher
// keeps the C++ signature of an operator's first kernel (a type_info inside the library that
// registered it) and compares every later kernel with it. That library must stay loaded: this
// one does, so a rebuilt CUDA library can replace the loaded one, again and again (an edited
// kernel, build.loaded), without a comparison that reads the memory of an unloaded library,
// which crashed the process.
namespace {
constexpr const char* kLaunchTableInCuda =
    ": selu_vectorized's launch table lives in its CUDA library; build.load(\"selu_vectorized\") "
    "where a GPU and nvcc are, then call it again.";

void set_launch_config_without_cuda(c10::Device, at::ScalarType, int64_t, int64_t, int64_t) {
  TORCH_CHECK(false, "selu_course::set_launch_config", kLaunchTableInCuda);
}

std::vector<int64_t> launch_config_without_cuda(c10::Device, at::ScalarType) {
  TORCH_CHECK(false, "selu_course::launch_config", kLaunchTableInCuda);
}
}  // namespace

TORCH_LIBRARY_IMPL(selu_course, CPU, m) {
  m.impl("set_launch_config", &set_launch_config_without_cuda);
  m.impl("launch_config", &launch_config_without_cuda);
}

}  // namespace selu_course
