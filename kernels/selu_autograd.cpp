// The autograd rule of selu_vectorized in C++ (appendix A8): the same rule as the
// Python one of helpers/ops.py (save x, backward = selu_backward(grad, x)), without
// the Python.
//
// torch.library.register_autograd installs a Python function as the operator's
// Autograd-key kernel, and every call passes through that key, whether or not a
// gradient is wanted: on a small tensor the Python costs several times the kernel.
// This file registers a C++ kernel for the same key, for every device at once (the
// Autograd key comes before CPU and CUDA), so it needs no CUDA build of its own.
// helpers.ops loads it with selu_vectorized, as the operators' default rule: it refuses a
// gradient until enable_backward(), as the Python rules do, and then differentiates. It is
// unloaded only for the Python rule (rule="python"): an operator has one Autograd kernel
// at a time.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace selu_course {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// region: dispatch
// The operators, found once (a `static`) in the dispatcher by name: a call through
// the handle goes to the kernel of the key at hand, as torch.ops.selu_course.<name>
// does from Python, with no string lookup per call.
const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&)>& selu_vectorized_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("selu_course::selu_vectorized", "")
                             .typed<at::Tensor(const at::Tensor&)>();
  return op;
}

const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, int64_t, int64_t, int64_t)>&
selu_vectorized_with_config_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("selu_course::selu_vectorized_with_config", "")
                             .typed<at::Tensor(const at::Tensor&, int64_t, int64_t, int64_t)>();
  return op;
}

const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&)>& selu_backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("selu_course::selu_backward", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op;
}
// endregion

// region: nodes_alive
// Each graph node this file makes (a result's grad_fn) runs code of this library when
// it is freed or called, so the library must stay loaded while one is alive:
// unloading it then would crash the process at the node's next use. Each node holds
// a token that counts it; helpers.build.unload reads the count
// (selu_course_objects_alive, below) and refuses while it is not zero.
std::atomic<int64_t> nodes_alive{0};

struct NodeAlive : torch::CustomClassHolder {
  NodeAlive() { nodes_alive.fetch_add(1, std::memory_order_relaxed); }
  ~NodeAlive() override { nodes_alive.fetch_sub(1, std::memory_order_relaxed); }
};

void count_node(AutogradContext* ctx) {
  ctx->saved_data["node_alive"] = c10::IValue::make_capsule(c10::make_intrusive<NodeAlive>());
}
// endregion

// region: function
// The backward needs x alone, as the Python rule saves it: not the output, and no
// gradient for the launch configuration's ints. With create_graph=True (grad mode on
// in here) it calls selu_backward through the dispatcher from the top, so the gradient
// of this gradient goes through selu_backward's own autograd rule (helpers/schemas.py), as
// it does from Python. Otherwise it calls below the Autograd key: that rule is a Python
// function, which would run on every backward for nothing to record, and take the GIL
// from autograd's thread to do it.
variable_list backward_from_saved_input(AutogradContext* ctx, const variable_list& grad_outputs) {
  const at::Tensor x = ctx->get_saved_variables()[0];
  if (at::GradMode::is_enabled()) {
    return {selu_backward_op().call(grad_outputs[0], x)};
  }
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return {selu_backward_op().call(grad_outputs[0], x)};
}

struct SeluVectorized : public torch::autograd::Function<SeluVectorized> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    count_node(ctx);
    // Below the Autograd key: the call goes on to the CPU or CUDA kernel, not back here.
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return selu_vectorized_op().call(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return backward_from_saved_input(ctx, grad_outputs);
  }
};

struct SeluVectorizedWithConfig : public torch::autograd::Function<SeluVectorizedWithConfig> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t threads_per_block,
                            int64_t vectors_per_thread, int64_t max_blocks_per_sm) {
    ctx->save_for_backward({x});
    count_node(ctx);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return selu_vectorized_with_config_op().call(x, threads_per_block, vectors_per_thread, max_blocks_per_sm);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list grads = backward_from_saved_input(ctx, grad_outputs);
    grads.resize(4);  // undefined tensors: no gradient for the three ints
    return grads;
  }
};
// endregion

// region: refusal
// Until the backward is enabled, a call that wants a gradient raises this message, one per
// operator: helpers.schemas.NO_BACKWARD_YET, set from Python (selu_course_set_refusal, below),
// so that the text lives in one place. An empty message: the operator differentiates.
std::mutex refusal_mutex;
std::unordered_map<std::string, std::string> refusals;

void refuse_if_disabled(const char* name) {
  std::lock_guard<std::mutex> lock(refusal_mutex);
  const auto found = refusals.find(name);
  TORCH_CHECK(found == refusals.end() || found->second.empty(), found->second);
}
// endregion

// region: autograd_kernel
// The Autograd-key kernels. A gradient is recorded only when grad mode is on and x
// requires grad; otherwise the call goes straight on to the device's kernel, with
// no graph node allocated, as the Python rule's forward_no_grad does.
bool wants_gradient(const at::Tensor& x) {
  return at::GradMode::is_enabled() && x.requires_grad();
}

at::Tensor selu_vectorized_autograd(const at::Tensor& x) {
  if (wants_gradient(x)) {
    refuse_if_disabled("selu_vectorized");
    return SeluVectorized::apply(x);
  }
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return selu_vectorized_op().call(x);
}

at::Tensor selu_vectorized_with_config_autograd(const at::Tensor& x, int64_t threads_per_block,
                                                int64_t vectors_per_thread, int64_t max_blocks_per_sm) {
  if (wants_gradient(x)) {
    refuse_if_disabled("selu_vectorized_with_config");
    return SeluVectorizedWithConfig::apply(x, threads_per_block, vectors_per_thread, max_blocks_per_sm);
  }
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return selu_vectorized_with_config_op().call(x, threads_per_block, vectors_per_thread, max_blocks_per_sm);
}
// endregion

}  // namespace

// Read by helpers.build.unload through ctypes, hence C linkage (an unmangled name).
extern "C" int64_t selu_course_objects_alive() {
  return nodes_alive.load(std::memory_order_relaxed);
}

// Called by helpers.ops through ctypes: operator `name` (without its namespace) refuses a
// gradient with `message`, or differentiates where `message` is empty.
extern "C" void selu_course_set_refusal(const char* name, const char* message) {
  std::lock_guard<std::mutex> lock(refusal_mutex);
  refusals[name] = message;
}

// region: registration
// The Autograd key, not AutogradCPU or AutogradCUDA: one kernel for every device.
TORCH_LIBRARY_IMPL(selu_course, Autograd, m) {
  m.impl("selu_vectorized", &selu_vectorized_autograd);
  m.impl("selu_vectorized_with_config", &selu_vectorized_with_config_autograd);
}
// endregion

}  // namespace selu_course
