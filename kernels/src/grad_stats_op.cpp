// Operator schema and the C++ entry point for symtune::grad_stats.

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "symtune/kernels/grad_stats.h"

TORCH_LIBRARY_FRAGMENT(symtune, m) {
  m.def("grad_stats(Tensor g) -> Tensor");
  m.def("grad_stats_multi(Tensor[] grads) -> Tensor");
}

namespace symtune::kernels {

at::Tensor gradStats(const at::Tensor& g) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::grad_stats", "")
                             .typed<at::Tensor(const at::Tensor&)>();
  return op.call(g);
}

at::Tensor gradStatsMulti(at::TensorList grads) {
  TORCH_CHECK(!grads.empty(), "symtune::grad_stats_multi needs at least one tensor");
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::grad_stats_multi", "")
                             .typed<at::Tensor(at::TensorList)>();
  return op.call(grads);
}

}  // namespace symtune::kernels
