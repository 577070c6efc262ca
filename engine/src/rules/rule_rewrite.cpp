#include "symtune/rules/rule_rewrite.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/ir/subgraph_matcher.h>
#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/subgraph_rewrite.h>

namespace symtune::rules {

// Note [Rewrite sites]
// SubgraphRewriter matches "hammocks": a matched value may have no uses outside the match. The
// compiler pools constants, so one `prim::Constant[value="none"]` feeds every exact GELU of a
// function, and a pattern naming that constant would match none of them; nor would it match a
// GELU in a loop body, since the pooled constant sits in the function's top block and a match
// cannot span blocks. Before matching, each constant with several uses, or used in another block,
// is therefore cloned next to each use (on a copy first: a function with no match is left exactly
// as it was); after the rewrite, constant pooling merges the clones again
// and dead-code elimination drops the pattern's leftovers. A site is one match the rewriter
// replaced: matches that overlap an earlier one are skipped by the rewriter and not counted, and
// the counting filter is the same one that tells the rewriter which matches to take.

// Note [Typed pattern inputs]
// SubgraphRewriter matches by op kinds and data flow, not by types, so `aten::add(%x, %b, %one)`
// would also match `x + 1.0`, and a replacement that needs %b to be a tensor would then be wrong.
// A pattern's inputs therefore match only values whose type is a subtype of the input's declared
// type; as in TorchScript IR, an input without an annotation is a Tensor, so a pattern that
// means to match ints, floats or strings says so (`%approximate : str`).

namespace {

using torch::jit::Graph;
using torch::jit::Node;

std::string firstLine(const std::string& text) {
  const auto start = text.find_first_not_of("\n ");
  if (start == std::string::npos)
    return text;
  const auto end = text.find('\n', start);
  return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// The parser's message, one line: its first ("expected ) but found 'return' here:"), and where
// an excerpt follows with a "~~~ <--- HERE" marker under the culprit, that line of `ir` and its
// number, which the first line alone left out.
std::string irError(const std::string& message, const std::string& ir) {
  std::string out = firstLine(message);
  const auto marker = message.find("<--- HERE");
  const auto markerLine = marker == std::string::npos ? marker : message.rfind('\n', marker);
  if (markerLine == std::string::npos || markerLine == 0)
    return out;
  const auto before = message.rfind('\n', markerLine - 1);
  std::string culprit = message.substr(before + 1, markerLine - before - 1);
  const auto first = culprit.find_first_not_of(" \t");
  if (first == std::string::npos)
    return out;
  culprit = culprit.substr(first, culprit.find_last_not_of(" \t\r") + 1 - first);
  if (out.size() > 5 && out.compare(out.size() - 5, 5, "here:") == 0)
    out.resize(out.size() - 5);
  else
    out += " ";
  const auto at = ir.find(culprit);
  if (at == std::string::npos)
    return out + "at `" + culprit + "`";
  const auto line = 1 + std::count(ir.begin(), ir.begin() + static_cast<std::ptrdiff_t>(at), '\n');
  return out + "at its line " + std::to_string(line) + ", `" + culprit + "`";
}

std::shared_ptr<Graph> parseSide(const Action& action, const std::string& ir, const char* side) {
  auto graph = std::make_shared<Graph>();
  try {
    torch::jit::parseIR(ir, graph.get());
  } catch (const c10::Error& e) {
    throw RuleError(action.pos, std::string("the ") + side + " is not TorchScript IR: " +
                                    irError(e.what_without_backtrace(), ir));
  } catch (const std::exception& e) {
    throw RuleError(action.pos, std::string("the ") + side +
                                    " is not TorchScript IR: " + irError(e.what(), ir));
  }
  return graph;
}

std::string plural(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// Gives every use of a pooled constant a constant of its own (Note [Rewrite sites]).
void unshareConstants(torch::jit::Block* block) {
  for (Node* node : block->nodes()) {
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      Node* producer = node->input(i)->node();
      if (producer->kind() != c10::prim::Constant ||
          (producer->output()->uses().size() < 2 && producer->owningBlock() == block))
        continue;
      Node* clone = block->owningGraph()->createClone(producer, [](auto* v) { return v; });
      clone->insertBefore(node);
      node->replaceInput(i, clone->output());
    }
    for (auto* inner : node->blocks())
      unshareConstants(inner);
  }
  Node* ret = block->return_node();
  for (size_t i = 0; i < ret->inputs().size(); ++i) {
    Node* producer = ret->input(i)->node();
    if (producer->kind() == c10::prim::Constant &&
        (producer->output()->uses().size() > 1 || producer->owningBlock() != block)) {
      Node* clone = block->owningGraph()->createClone(producer, [](auto* v) { return v; });
      clone->insertBefore(ret);
      ret->replaceInput(i, clone->output());
    }
  }
}

struct CompiledRewrite {
  const Action* action = nullptr;
  std::vector<std::string> nodeGlobs;  // a match must contain one of these op kinds (if any)
};

// Runs one rewrite over `graph` in place; returns the sites replaced.
int64_t rewriteGraph(std::shared_ptr<Graph>& graph, const CompiledRewrite& rewrite) {
  unshareConstants(graph->block());
  std::unordered_set<const Node*> claimed;
  int64_t sites = 0;
  auto filter = [&](const torch::jit::Match& match,
                    const std::unordered_map<std::string, torch::jit::Value*>&) {
    // Note [Typed pattern inputs]: a pattern's input matches only a value of its declared type.
    for (const auto& [patternValue, value] : match.values_map) {
      if (patternValue->node()->kind() == torch::jit::prim::Param &&
          !value->type()->isSubtypeOf(*patternValue->type()))
        return false;
    }
    bool selected = rewrite.nodeGlobs.empty();
    for (const auto& [patternNode, node] : match.nodes_map) {
      if (claimed.count(node))
        return false;  // the rewriter skips a match overlapping one it took
      for (const auto& glob : rewrite.nodeGlobs)
        selected = selected || globMatch(glob, node->kind().toQualString());
    }
    if (!selected)
      return false;
    for (const auto& [patternNode, node] : match.nodes_map)
      claimed.insert(node);
    ++sites;
    return true;
  };
  torch::jit::SubgraphRewriter rewriter;
  rewriter.RegisterRewritePattern(rewrite.action->pattern, rewrite.action->replacement);
  rewriter.runOnGraph(graph, filter);
  torch::jit::ConstantPooling(graph);
  torch::jit::EliminateDeadCode(graph);
  return sites;
}

}  // namespace

void validateRewrites(const Rule& rule) {
  for (const auto& a : rule.actions) {
    if (a.kind != Action::Kind::Rewrite)
      continue;
    const auto pattern = parseSide(a, a.pattern, "pattern");
    const auto replacement = parseSide(a, a.replacement, "replacement");
    size_t operations = 0;
    for (const Node* n : pattern->nodes()) {
      if (!n->blocks().empty())
        throw RuleError(a.pos, std::string("the pattern's ") + n->kind().toQualString() +
                                   " holds blocks: a pattern matches straight-line code only");
      operations += n->kind() != c10::prim::Constant;
    }
    if (operations == 0)
      throw RuleError(a.pos, "the pattern has no operation to match (only constants)");
    if (pattern->inputs().size() != replacement->inputs().size())
      throw RuleError(a.pos, "the pattern takes " + plural(pattern->inputs().size(), "input") +
                                 ", the replacement " +
                                 plural(replacement->inputs().size(), "input") +
                                 ": they must match (the replacement gets the pattern's inputs)");
    if (pattern->outputs().size() != replacement->outputs().size())
      throw RuleError(a.pos, "the pattern returns " + plural(pattern->outputs().size(), "value") +
                                 ", the replacement " +
                                 plural(replacement->outputs().size(), "value") +
                                 ": they must match");
    // The matcher walks up from the first output (Note [Multi-output Patterns] in LibTorch): it
    // must be a value the pattern computes, and every other output and every operation must be on
    // the way to it. Until 2026-12-07 a pattern returning nothing crashed the process that loaded
    // it (`rules check`, and every runner whose pack library held it), and one whose operation
    // was not on the way passed the check and failed the run with LibTorch's internal assertion.
    if (pattern->outputs().empty())
      throw RuleError(a.pos,
                      "the pattern returns nothing: it must return the value the matched "
                      "code computes");
    if (pattern->outputs()[0]->node()->kind() == c10::prim::Param)
      throw RuleError(a.pos,
                      "the pattern's first output is one of its inputs: it must be a value "
                      "the pattern computes, which is where matching starts");
    std::unordered_set<const Node*> upstream;
    std::vector<const Node*> work{pattern->outputs()[0]->node()};
    while (!work.empty()) {
      const Node* n = work.back();
      work.pop_back();
      if (n->kind() == c10::prim::Param || !upstream.insert(n).second)
        continue;
      for (const auto* v : n->inputs())
        work.push_back(v->node());
    }
    for (size_t i = 1; i < pattern->outputs().size(); ++i) {
      const Node* n = pattern->outputs()[i]->node();
      if (n->kind() != c10::prim::Param && !upstream.count(n))
        throw RuleError(a.pos, "the pattern's output " + std::to_string(i + 1) +
                                   " is not computed on the way to its first output, which is "
                                   "where matching starts: return that value first");
    }
    for (const Node* n : pattern->nodes()) {
      if (n->kind() != c10::prim::Constant && !upstream.count(n))
        throw RuleError(a.pos, std::string("the pattern's ") + n->kind().toQualString() +
                                   " is not on the way to its first output, which is where "
                                   "matching starts: the matcher would never reach it");
    }
  }
}

std::vector<RewriteReport> applyRewrites(const torch::jit::Module& module,
                                         const std::vector<Rule>& rules) {
  std::vector<RewriteReport> reports;
  for (const auto& rule : rules) {
    std::vector<CompiledRewrite> rewrites;
    std::vector<std::string> moduleGlobs;
    std::vector<std::string> nodeGlobs;
    for (const auto& s : rule.selectors) {
      if (s.kind == SelectorKind::Modules)
        moduleGlobs.push_back(s.glob);
      else if (s.kind == SelectorKind::Nodes)
        nodeGlobs.push_back(s.glob);
    }
    for (const auto& a : rule.actions) {
      if (a.kind == Action::Kind::Rewrite)
        rewrites.push_back({&a, nodeGlobs});
    }
    if (rewrites.empty())
      continue;
    validateRewrites(rule);

    RewriteReport report;
    report.rule = rule.name;
    std::unordered_set<const torch::jit::Function*> seen;
    for (const auto& named : module.named_modules()) {
      if (!moduleGlobs.empty() &&
          std::none_of(moduleGlobs.begin(), moduleGlobs.end(),
                       [&](const std::string& g) { return globMatch(g, named.name); }))
        continue;
      for (const auto& method : named.value.get_methods()) {
        torch::jit::Function& fn = method.function();
        if (!seen.insert(&fn).second)
          continue;
        auto& graphFn = torch::jit::toGraphFunction(fn);
        int64_t sites = 0;
        for (const auto& rewrite : rewrites) {
          // A dry run on a copy: a function without a match stays untouched (Note [Rewrite sites]).
          auto copy = graphFn.graph()->copy();
          if (rewriteGraph(copy, rewrite) == 0)
            continue;
          auto graph = graphFn.graph();
          sites += rewriteGraph(graph, rewrite);
          try {
            graph->lint();
          } catch (const std::exception& e) {
            throw std::logic_error("rule `" + rule.name + "` left " +
                                   fn.qualname().qualifiedName() +
                                   " broken: " + firstLine(e.what()));
          }
        }
        if (sites > 0) {
          report.sites += sites;
          report.functions.emplace_back(fn.qualname().qualifiedName(), sites);
        }
      }
    }
    reports.push_back(std::move(report));
  }
  return reports;
}

}  // namespace symtune::rules
