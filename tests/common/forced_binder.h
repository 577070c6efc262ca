#pragma once
// A binder that runs the (site, bucket)s of a measured table with a candidate the test names,
// measuring nothing: to compare a candidate with the reference on a whole model, whichever won.

#include <memory>
#include <string>
#include <utility>

#include <c10/core/Device.h>
#include "doctest_torch.h"

#include "symtune/binding/binder.h"

namespace symtune::test {

// Every binding of `table` (of `pattern` only, when given) bound to `winner`; REQUIREs that
// there is one and that the binder adopts the table.
inline std::unique_ptr<binding::Binder> forcedBinder(const Graph& graph, BindingTable table,
                                                     const std::string& winner,
                                                     const std::string& pattern = "") {
  bool any = false;
  for (auto& b : table.bindings) {
    if (pattern.empty() || b.pattern == pattern) {
      b.winner = winner;
      any = true;
    }
  }
  REQUIRE(any);
  binding::BinderOptions quiet;
  quiet.measure = false;
  auto binder = std::make_unique<binding::Binder>(
      graph, binding::currentMachine(c10::Device(c10::kCPU)), quiet);
  REQUIRE_FALSE(binder->adopt(std::move(table)).has_value());
  return binder;
}

}  // namespace symtune::test
