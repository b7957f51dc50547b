// A Python entry to selu_course::selu_vectorized that costs what torch.selu's own
// binding costs (appendix A8).
//
// torch.ops.selu_course.selu_vectorized(x) is a generic binding: it serves every
// schema, so each call walks the arguments for __torch_function__ overrides,
// converts them to IValues through the schema, calls the operator boxed and
// converts the result back. torch.selu's binding is generated for its one schema
// and does none of that. On a small tensor, where the CPU's cost of issuing a call
// is the whole cost, that difference is most of what separates the two.
//
// This module binds one C++ function with pybind11. It calls the same operator
// through the dispatcher from the top, so everything a torch.ops call gets still
// happens: the autograd rule (Python or C++), the device's kernel, tensor
// subclasses that dispatch below Python. helpers.ops uses it in eager mode only, for
// a plain torch.Tensor: under torch.compile, and for tensors with a
// __torch_function__, the call goes through torch.ops, which the compiler traces
// and which honours those overrides.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/extension.h>

namespace selu_course {
namespace {

// region: entry
at::Tensor selu_vectorized(const at::Tensor& x) {
  // Found once in the dispatcher by name. The schema is defined in Python
  // (helpers/schemas.py) before this module loads, and stays for the life of the process.
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("selu_course::selu_vectorized", "")
                             .typed<at::Tensor(const at::Tensor&)>();
  return op.call(x);
}
// endregion

}  // namespace
}  // namespace selu_course

// The GIL is released during the call, as torch's bindings release it: the CPU
// kernel of a large tensor runs for seconds, and other Python threads may run then.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("selu_vectorized", &selu_course::selu_vectorized, "selu_course::selu_vectorized through the dispatcher",
        pybind11::call_guard<pybind11::gil_scoped_release>());
}
