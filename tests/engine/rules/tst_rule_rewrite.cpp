// IR rewrite rules: validation when a rule is loaded (a table of bad rewrites, each with its
// message), and site counts on zoo models, checked against the ops in the model's code before and
// after — the built-in tanh_gelu on transformer_xl and moe_topk, and relu → threshold on every
// relu of dynamic_resnet, which must leave the loss bit-identical.

#include "doctest_torch.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "symtune/rules/rule_registry.h"
#include "symtune/rules/rule_rewrite.h"
#include "symtune/runtime/trainer.h"
#include "symtune/zoo/model_zoo.h"

namespace {

using symtune::rules::RuleError;

// Op kind -> how many nodes of it, over each compiled function of the module once (blocks
// included); for gelu, split by its approximation ("aten::gelu/none", "aten::gelu/tanh").
std::map<std::string, int64_t> opCounts(const torch::jit::Module& module) {
  std::map<std::string, int64_t> counts;
  std::set<const torch::jit::Function*> seen;
  std::function<void(torch::jit::Block*)> visit = [&](torch::jit::Block* block) {
    for (torch::jit::Node* n : block->nodes()) {
      std::string kind = n->kind().toQualString();
      if (kind == "aten::gelu") {
        const auto approximate = torch::jit::toIValue(n->input(1));
        kind += "/" + (approximate ? approximate->toStringRef() : std::string("?"));
      }
      ++counts[kind];
      for (auto* inner : n->blocks())
        visit(inner);
    }
  };
  for (const auto& m : module.modules()) {
    for (const auto& method : m.get_methods()) {
      if (seen.insert(&method.function()).second)
        visit(torch::jit::toGraphFunction(method.function()).graph()->block());
    }
  }
  return counts;
}

symtune::rules::Rule oneRule(const std::string& text) {
  return symtune::rules::parseRules(text).front();
}

const char* const kReluToThreshold = R"ir(rule relu_to_threshold {
  rewrite """graph(%x):
  %y = aten::relu(%x)
  return (%y)""" => """graph(%x):
  %zero : int = prim::Constant[value=0]()
  %y = aten::threshold(%x, %zero, %zero)
  return (%y)"""
})ir";

symtune::Session zooSession(const std::string& zoo) {
  symtune::Session s;
  s.name = "rewrite";
  s.model.zoo = zoo;
  s.model.preset = "ci";
  s.run.steps = 3;
  s.data.seed = 7;
  s.binding.exact = true;  // rewritten and plain runs compared bit for bit
  return s;
}

// A rewrite the engine must refuse when the rule is loaded, and the start of its message.
struct InvalidRewrite {
  const char* name;
  std::string pattern, replacement, message;
};

const std::string kRelu = "graph(%x):\n  %y = aten::relu(%x)\n  return (%y)";

const InvalidRewrite kInvalidRewrites[] = {
    {"pattern not IR", "graph(%x):\n  %y = \n", kRelu, "1:12: the pattern is not TorchScript IR: "},
    {"replacement not IR", kRelu, "graf(%x)", "1:12: the replacement is not TorchScript IR: "},
    // The parser's excerpt points at a line; the message names it (its first line alone ended
    // at "here:").
    {"pattern not IR, the line it stops at", "graph(%x):\n  %y = aten::relu(%x\n  return (%y)",
     kRelu,
     "1:12: the pattern is not TorchScript IR: expected ) but found 'return' at its line 3, "
     "`return (%y)`"},
    {"constants only", "graph():\n  %c : int = prim::Constant[value=1]()\n  return (%c)",
     "graph():\n  %c : int = prim::Constant[value=2]()\n  return (%c)",
     "1:12: the pattern has no operation to match (only constants)"},
    {"input counts differ", kRelu, "graph(%x, %z):\n  %y = aten::relu(%x)\n  return (%y)",
     "1:12: the pattern takes 1 input, the replacement 2 inputs: they must match (the "
     "replacement gets the pattern's inputs)"},
    {"output counts differ", kRelu, "graph(%x):\n  %y = aten::relu(%x)\n  return (%y, %x)",
     "1:12: the pattern returns 1 value, the replacement 2 values: they must match"},
    {"blocks in the pattern",
     "graph(%c, %x):\n  %y = prim::If(%c)\n    block0():\n      -> (%x)\n    block1():\n"
     "      -> (%x)\n  return (%y)",
     "graph(%c, %x):\n  return (%x)",
     "1:12: the pattern's prim::If holds blocks: a pattern matches straight-line code only"},
    {"second output off the path",
     "graph(%x, %z):\n  %a = aten::relu(%x)\n  %b = aten::relu(%z)\n  return (%a, %b)",
     "graph(%x, %z):\n  return (%x, %z)",
     "1:12: the pattern's output 2 is not computed on the way to its first output, which is "
     "where matching starts: return that value first"},
    // Crashed the process that checked it (and every runner whose pack library held it).
    {"returns nothing", "graph(%x):\n  %y = aten::relu(%x)\n  return ()",
     "graph(%x):\n  %y = aten::relu(%x)\n  return ()",
     "1:12: the pattern returns nothing: it must return the value the matched code computes"},
    // Passed the check, then failed the run with LibTorch's internal assertion.
    {"returns its input", "graph(%x):\n  %y = aten::relu(%x)\n  return (%x)",
     "graph(%x):\n  return (%x)",
     "1:12: the pattern's first output is one of its inputs: it must be a value the pattern "
     "computes, which is where matching starts"},
    {"an operation off the path",
     "graph(%x):\n  %y = aten::relu(%x)\n  %c : int = prim::Constant[value=1]()\n  return (%c)",
     "graph(%x):\n  %c : int = prim::Constant[value=1]()\n  return (%c)",
     "1:12: the pattern's aten::relu is not on the way to its first output, which is where "
     "matching starts: the matcher would never reach it"},
};

}  // namespace

TEST_CASE("an invalid rewrite is refused when the rule is loaded, saying why") {
  for (const InvalidRewrite& row : kInvalidRewrites) {
    INFO(row.name);
    const std::string text = "rule bad { rewrite \"\"\"" + row.pattern + "\"\"\" => \"\"\"" +
                             row.replacement + "\"\"\" }";
    const auto rule = oneRule(text);  // the front end accepts it: the IR is the engine's to check
    try {
      symtune::rules::validateRewrites(rule);
      FAIL_CHECK("no error");
    } catch (const RuleError& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.rfind(row.message, 0) == 0);  // starts with the message
    }
  }
}

TEST_CASE("tanh_gelu rewrites every exact GELU of transformer_xl") {
  // Without the rule: the model's GELUs are exact.
  auto zoo = symtune::buildZooModel("transformer_xl", {"ci", 7, std::nullopt});
  const auto before = opCounts(zoo.module);
  CHECK(before.at("aten::gelu/none") >= 1);
  CHECK(before.count("aten::gelu/tanh") == size_t{0});

  auto session = zooSession("transformer_xl");
  session.rules.enable = {"tanh_gelu"};
  symtune::Trainer trainer(session);
  REQUIRE(trainer.rewrites().size() == size_t{1});
  const auto& report = trainer.rewrites().front();
  CHECK(report.rule == "tanh_gelu");
  CHECK(report.sites == before.at("aten::gelu/none"));
  REQUIRE(report.functions.size() == size_t{1});
  {
    INFO(report.functions[0].first);
    CHECK(report.functions[0].first.find("XLDecoder.forward") != std::string::npos);
  }
  const auto after = opCounts(*trainer.executor().scriptModule());
  CHECK(after.count("aten::gelu/none") == size_t{0});
  CHECK(after.at("aten::gelu/tanh") == before.at("aten::gelu/none"));

  // It trains, close to the exact model (tanh GELU differs by under 1e-3 per activation).
  symtune::Trainer exact(zooSession("transformer_xl"));
  for (int i = 0; i < 3; ++i) {
    const double a = trainer.step().loss, b = exact.step().loss;
    INFO("step ", i, ": ", a, " vs ", b);
    CHECK((std::isfinite(a) && std::abs(a - b) < 1e-2 * std::abs(b)));
  }
  // Only exact GELUs match: a second application changes nothing.
  const auto again = symtune::rules::applyRewrites(
      *trainer.executor().scriptModule(), {symtune::rules::parseRules(
                                               R"ir(rule tanh_gelu_again { rewrite """graph(%x):
  %none : str = prim::Constant[value="none"]()
  %y = aten::gelu(%x, %none)
  return (%y)""" => """graph(%x):
  return (%x)""" })ir")
                                               .front()});
  CHECK(again.front().sites == int64_t{0});
}

// The built-in fused_bias_gelu: every `gelu(x @ w + b)` of the feed-forward and expert layers
// becomes symtune::bias_gelu; losses agree to rounding for 5 steps.
TEST_CASE("fused_bias_gelu fuses the feed-forward and expert layers of the zoo's transformers") {
  for (const char* zoo : {"transformer_xl", "moe_topk"}) {
    INFO(zoo);
    const std::string name = zoo;
    const auto before = opCounts(symtune::buildZooModel(name, {"ci", 7, std::nullopt}).module);
    CHECK(before.at("aten::gelu/none") >= 1);
    auto session = zooSession(name);
    session.rules.enable = {"fused_bias_gelu"};
    symtune::Trainer fused(session);
    REQUIRE(fused.rewrites().size() == size_t{1});
    CHECK(fused.rewrites().front().sites == before.at("aten::gelu/none"));
    const auto after = opCounts(*fused.executor().scriptModule());
    CHECK(after.count("aten::gelu/none") == size_t{0});
    CHECK(after.at("symtune::bias_gelu") == before.at("aten::gelu/none"));
    CHECK((after.count("aten::add") > 0 ? after.at("aten::add") : 0) ==
          before.at("aten::add") - before.at("aten::gelu/none"));
    symtune::Trainer plain(zooSession(name));
    for (int i = 0; i < 5; ++i) {
      const double a = fused.step().loss, b = plain.step().loss;
      INFO("step ", i, ": ", a, " vs ", b);
      CHECK(std::abs(a - b) <= 1e-4 * std::abs(b));
    }
  }
}

// Note [Typed pattern inputs]: an unannotated pattern input is a Tensor, so `x + 1.0` (a
// float) is not taken for a bias.
TEST_CASE("pattern inputs match only values of their declared types") {
  auto module = torch::jit::Module("M");
  module.define(R"ts(
def forward(self, x: Tensor, b: Tensor):
    return torch.gelu(x + 1.0) + torch.gelu(x + b)
)ts");
  const auto rule = *symtune::rules::Registry::global().get("fused_bias_gelu").rule;
  const auto reports = symtune::rules::applyRewrites(module, {rule});
  CHECK(reports.front().sites == int64_t{1});  // x + b only
  const auto counts = opCounts(module);
  CHECK(counts.at("symtune::bias_gelu") == int64_t{1});
  CHECK(counts.at("aten::gelu/none") == int64_t{1});
  const auto x = torch::randn({3, 4}), b = torch::randn({4});
  const auto y = module.forward({x, b}).toTensor();
  CHECK(torch::allclose(y, torch::gelu(x + 1.0) + torch::gelu(x + b), 1e-5, 1e-6));
}

// The built-in fused_bias_dropout_add: `residual + dropout(x + bias)` becomes
// symtune::bias_dropout_add; evaluation gives the sum, training keeps elements scaled by
// 1 / (1 - p) and drops the others to the residual.
TEST_CASE("fused_bias_dropout_add rewrites the end of a sublayer") {
  auto module = torch::jit::Module("M");
  module.define(R"ts(
def forward(self, x: Tensor, b: Tensor, r: Tensor, train: bool):
    return r + torch.dropout(x + b, 0.25, train)
)ts");
  const auto rule = *symtune::rules::Registry::global().get("fused_bias_dropout_add").rule;
  CHECK(symtune::rules::applyRewrites(module, {rule}).front().sites == int64_t{1});
  const auto counts = opCounts(module);
  CHECK(counts.at("symtune::bias_dropout_add") == int64_t{1});
  CHECK(counts.count("aten::dropout") == size_t{0});
  CHECK(counts.count("aten::add") == size_t{0});
  const auto x = torch::randn({16, 32}), b = torch::randn({32}), r = torch::randn({16, 32});
  CHECK(torch::allclose(module.forward({x, b, r, false}).toTensor(), r + (x + b)));
  const auto delta = module.forward({x, b, r, true}).toTensor() - r;
  const auto kept = delta != 0;
  CHECK(
      torch::allclose(delta, torch::where(kept, (x + b) / 0.75, torch::zeros_like(x)), 1e-5, 1e-5));
  const double share = kept.to(torch::kDouble).mean().item<double>();
  INFO("share kept: ", share);
  CHECK((share > 0.6 && share < 0.9));  // 0.75 expected
}

TEST_CASE("tanh_gelu on moe_topk rewrites only what its selectors pick") {
  auto zoo = symtune::buildZooModel("moe_topk", {"ci", 7, std::nullopt});
  const auto before = opCounts(zoo.module);
  CHECK(before.at("aten::gelu/none") >= 1);
  auto rule = [](const std::string& select) {
    return oneRule("rule t {\n  " + select + R"ir(
  rewrite """graph(%x):
  %none : str = prim::Constant[value="none"]()
  %y = aten::gelu(%x, %none)
  return (%y)""" => """graph(%x):
  %tanh : str = prim::Constant[value="tanh"]()
  %y = aten::gelu(%x, %tanh)
  return (%y)"""
})ir");
  };
  // The head holds no GELU; a node selector for another op matches nothing either.
  CHECK(
      symtune::rules::applyRewrites(zoo.module, {rule("select modules \"head\"")}).front().sites ==
      int64_t{0});
  CHECK(symtune::rules::applyRewrites(zoo.module, {rule("select nodes \"aten::relu\"")})
            .front()
            .sites == int64_t{0});
  CHECK(opCounts(zoo.module) == before);  // untouched
  const auto report =
      symtune::rules::applyRewrites(zoo.module, {rule("select modules \"blocks.*\"")}).front();
  CHECK(report.sites == before.at("aten::gelu/none"));
  const auto after = opCounts(zoo.module);
  CHECK(after.at("aten::gelu/tanh") == before.at("aten::gelu/none"));
  CHECK(after.count("aten::gelu/none") == size_t{0});
}

TEST_CASE("relu to threshold rewrites every relu of dynamic_resnet and keeps the loss") {
  auto session = zooSession("dynamic_resnet");
  symtune::Trainer plain(session);
  const auto before = opCounts(*plain.executor().scriptModule());
  const int64_t relus = before.at("aten::relu");
  INFO("relus: ", relus);
  CHECK(relus >= 4);

  session.rules.source = kReluToThreshold;
  symtune::Trainer rewritten(session);
  REQUIRE(!rewritten.rewrites().empty());
  const auto& report = rewritten.rewrites().front();
  CHECK(report.sites == relus);
  CHECK(report.functions.size() >= 3);  // the blocks' classes and the stem
  const auto after = opCounts(*rewritten.executor().scriptModule());
  CHECK(after.count("aten::relu") == size_t{0});
  CHECK(after.at("aten::threshold") ==
        (before.count("aten::threshold") ? before.at("aten::threshold") + relus : relus));
  // threshold(x, 0, 0) is relu: the same losses, bit for bit.
  for (int i = 0; i < 3; ++i) {
    const double withThreshold = rewritten.step().loss, withRelu = plain.step().loss;
    INFO("step ", i);
    CHECK(withThreshold == withRelu);
  }
}
