// selu_course::pointer_chase on the CPU: the same chain (latency_chain.h), so that
// the operator runs on every device and a CPU's own memory latency can be read too.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "latency_chain.h"

namespace selu_course {
namespace {

at::Tensor pointer_chase(const at::Tensor& next, int64_t steps) {
  check_chain(next, steps, c10::DeviceType::CPU, "selu_course::pointer_chase");
  const int64_t* table = next.const_data_ptr<int64_t>();
  const int64_t mask = next.numel() - 1;
  int64_t index = 0;
  for (int64_t step = 0; step < steps; ++step) {
    index = chain_step(table, index, mask);
  }
  at::Tensor reached = at::empty({}, next.options());
  *reached.mutable_data_ptr<int64_t>() = index;
  return reached;
}

}  // namespace

TORCH_LIBRARY_IMPL(selu_course, CPU, m) { m.impl("pointer_chase", &pointer_chase); }

}  // namespace selu_course
