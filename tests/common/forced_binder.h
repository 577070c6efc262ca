#pragma once
// A binder that runs the (site, bucket)s of a measured table with a candidate the test names,
// measuring nothing: to compare a candidate with the reference on a whole model, whichever won.
// And what the binding tests share around it: a model's forward and backward through a binder,
// and the sites of one pattern a binder found.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/Device.h>
#include "doctest_torch.h"

#include "symtune/binding/binder.h"
#include "symtune/graph/symugen.h"

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

// `gen`'s forward on `inputs` through `binder` (none: unbound), then its backward against a
// linspace of the output's size: the output, then the gradient of each of `leaves` (zeros for
// one that got none).
inline std::vector<torch::Tensor> outputAndGradients(SyMuGen& gen, OpBinder* binder,
                                                     const std::vector<c10::IValue>& inputs,
                                                     const std::vector<torch::Tensor>& leaves) {
  ForwardOptions options;
  options.binder = binder;
  const auto out = gen.forward(inputs, options).output.toTensor();
  out.backward(torch::linspace(-1, 1, out.numel(), out.options()).view_as(out));
  std::vector<torch::Tensor> values{out.detach()};
  for (const auto& t : leaves)
    values.push_back(t.grad().defined() ? t.grad() : torch::zeros_like(t));
  return values;
}

// The sites of `pattern` among those `binder` found.
inline std::vector<binding::OpSite> sitesOf(const binding::Binder& binder,
                                            const std::string& pattern) {
  std::vector<binding::OpSite> found;
  for (const auto& site : binder.sites()) {
    if (site.pattern == pattern)
      found.push_back(site);
  }
  return found;
}

}  // namespace symtune::test
