// Operator schema and the C++ entry point for symtune::grad_stats.

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "symtune/kernels/grad_stats.h"

TORCH_LIBRARY_FRAGMENT(symtune, m) {
  m.def("grad_stats(Tensor g) -> Tensor");
}

namespace symtune::kernels {

at::Tensor gradStats(const at::Tensor& g) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::grad_stats", "")
                             .typed<at::Tensor(const at::Tensor&)>();
  return op.call(g);
}

}  // namespace symtune::kernels
