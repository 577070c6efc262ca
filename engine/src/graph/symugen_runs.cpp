// Runs of ops as remat units (Note [Op runs]): what an op saves for its backward, by its
// template, and the runs each checkpoint span is cut into.

#include <algorithm>
#include <cstdio>
#include <functional>
#include <mutex>
#include <unordered_set>

#include "evaluator.h"

namespace symtune {

// Note [Op runs]
// A block or a loop body recomputed whole brings back all its activations at once, and costs its
// whole forward again; selective recomputation keeps what is expensive to make and recomputes what
// is cheap. Every span (a block's, a loop body's) is cut into runs of ops, each closed by an
// expensive op (a matmul, a convolution, a recurrent cell: closesRun) or cut short by control flow
// (an If or a Loop node stays outside every run, an If's branches are cut the same way); each run
// that computes and may free something is a unit of its own ("decoder loop #31 run #52": the span's
// name and the run's first node), which a SegmentPlan names like a block or a loop: the run's
// forward keeps only its inputs — the previous expensive op's output, the tensors read from before
// — and runs again in backward, trip by trip in a loop. Recomputing the run that ends at a
// transformer's second feed-forward matmul frees the GELU's input and output for one matmul, less
// the first matmul's output it then keeps. What a run frees is counted on the batch (Note [Counting
// a run's saved bytes] in evaluator.h); what it costs is its ops' templates. A run's parent is its
// span's unit: the planner takes a block, or some of its loops and runs, never both (Note [Remat
// planner]).

SavedOperands parseSaved(const std::string& kind) {
  SavedOperands saved;
  const CostTemplate* t = findCostTemplate(kind);
  if (t == nullptr || t->savedBytes.empty())
    return saved;
  saved.known = true;
  // The sum's terms at the top level.
  std::vector<std::string> terms;
  int depth = 0;
  std::string term;
  for (const char c : t->savedBytes) {
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (c == '+' && depth == 0) {
      terms.push_back(term);
      term.clear();
    } else if (c != ' ') {
      term += c;
    }
  }
  terms.push_back(term);
  for (const auto& x : terms) {
    size_t index = 0;
    if (x == "0")
      continue;
    if (x.rfind("bytes(in", 0) == 0 && x.back() == ')' &&
        std::sscanf(x.c_str(), "bytes(in%zu)", &index) == 1) {
      saved.whole.emplace_back(false, index);
    } else if (x.rfind("bytes(out", 0) == 0 && x.back() == ')' &&
               std::sscanf(x.c_str(), "bytes(out%zu)", &index) == 1) {
      saved.whole.emplace_back(true, index);
    } else {
      saved.rest += (saved.rest.empty() ? "" : " + ") + x;
    }
  }
  return saved;
}

const SavedOperands& savedOperandsOf(const Node* node) {
  static std::mutex mutex;
  static std::unordered_map<c10::Symbol, SavedOperands> parsed;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = parsed.find(node->kind());
  if (it == parsed.end())
    it = parsed.emplace(node->kind(), parseSaved(node->kind().toQualString())).first;
  return it->second;
}

namespace {

// The ops that close a run (Note [Op runs]): what is expensive to run again.
bool closesRun(const Node* node) {
  static const std::unordered_set<c10::Symbol> kinds{
      c10::aten::matmul,       c10::aten::mm,        c10::aten::bmm,
      c10::aten::addmm,        c10::aten::linear,    c10::aten::conv1d,
      c10::aten::conv2d,       c10::aten::conv3d,    c10::aten::convolution,
      c10::aten::_convolution, c10::aten::einsum,    c10::aten::scaled_dot_product_attention,
      c10::aten::gru_cell,     c10::aten::lstm_cell, c10::aten::rnn_tanh_cell};
  return kinds.count(node->kind()) != 0;
}

// Note [Runs without their closing op]
// A run recomputed whole runs its closing op again: the matmul or convolution that the run exists
// to avoid recomputing. Its lighter variant leaves that op's forward where it was: the run's ops
// up to it (and not the views of parameters read just before it) run without gradients, keeping
// only their inputs, and their outputs that only the closing op reads and that it saves for its
// backward (the GELU's output a transformer's second matmul keeps, the layer norm's the QKV
// projection keeps) are handed to it; once it has run their storage is freed, the tensors it
// saved left without memory. A hook on the op's output runs the lighter run again, with
// gradients, just before the op's backward and fills the freed storage back with what it
// computes; the run's own backward then goes through that recomputation. It frees what the run
// frees whole, the op's input among it, without the op's cost (Megatron-LM's checkpointing
// without output does the same for activation functions). A run that an `if`, a loop or its
// span's end cut short gets one too where an output of it has one reader, the next expensive op
// of the same block, which saves it (a batch norm and ReLU whose output the next block's
// convolution keeps): the whole run is recomputed, its output freed after that op. Named after
// the op ("layer1.0 run #26 before #28"), it is the run's child for the planner, which takes one
// or the other. A run whose op does not run where the plan lets the hook be set (inside another
// recomputed unit) frees nothing more than the run would.
std::shared_ptr<SyMuGen::CheckpointSpan> lighterRun(
    const SyMuGen::CheckpointSpan& run, const std::unordered_map<const Node*, NodeId>& nodeIds) {
  const Block* owner = run.first->owningBlock();
  const Node* consumer = nullptr;
  const Node* last = run.last;
  // The values the run computes: not a parameter, a constant, or a view of one.
  std::unordered_set<const Value*> computed;
  for (const Node* n = run.first;; n = n->next()) {
    const bool passive = n->kind() == c10::prim::GetAttr || n->kind() == c10::prim::Constant;
    const bool view = detail::isViewOrShape(n);
    for (const Value* v : n->outputs()) {
      if (!passive && (!view || (!n->inputs().empty() && computed.count(n->input(0)) > 0)))
        computed.insert(v);
    }
    if (n == run.last)
      break;
  }
  const auto readsComputed = [&](const Node* n) {
    return std::any_of(n->inputs().begin(), n->inputs().end(),
                       [&](const Value* v) { return computed.count(v) > 0; });
  };
  if (closesRun(run.last)) {
    if (run.last == run.first)
      return nullptr;  // the op alone
    consumer = run.last;
    // Back over the nodes before the op that read nothing the run computes (a parameter's view).
    const auto aside = [&](const Node* n) {
      return (detail::isViewOrShape(n) || n->kind() == c10::prim::GetAttr) && !readsComputed(n);
    };
    last = consumer->prev();
    while (last != run.first && aside(last))
      last = last->prev();
    if (aside(last))
      return nullptr;  // nothing before the op computes
  }
  const auto saves = [](const Node* op, const Value* v) {
    for (const auto& [output, index] : savedOperandsOf(op).whole) {
      if (!output && index < op->inputs().size() && op->inputs()[index] == v)
        return true;
    }
    return false;
  };
  // Its single reader, when that is an expensive op after it in the same block that saves it.
  const auto readerOf = [&](const Value* v) -> const Node* {
    if (v->uses().size() != 1 || v->type()->kind() != c10::TypeKind::TensorType)
      return nullptr;
    const Node* user = v->uses()[0].user;
    if (user->owningBlock() != owner || !closesRun(user) || !saves(user, v) || !user->isAfter(last))
      return nullptr;
    return user;
  };
  std::vector<const Value*> dropped;
  for (const Node* n = run.first;; n = n->next()) {
    for (const Value* v : n->outputs()) {
      const Node* reader = readerOf(v);
      if (reader != nullptr && computed.count(v) > 0 &&
          (consumer == nullptr || reader == consumer)) {
        consumer = reader;
        dropped.push_back(v);
      }
    }
    if (n == last)
      break;
  }
  if (dropped.empty())
    return nullptr;
  const auto id = nodeIds.find(consumer);
  std::string name = run.block + " before " +
                     (id != nodeIds.end() ? "#" + std::to_string(id->second.value())
                                          : std::string("its closing op"));
  auto lighter = detail::makeSpan(owner, run.first, last, std::move(name));
  if (lighter == nullptr)
    return nullptr;
  lighter->consumer = consumer;
  lighter->dropped = std::move(dropped);
  return lighter;
}

}  // namespace

void detail::cutOpRuns(
    const std::unordered_map<const Node*, std::shared_ptr<const SyMuGen::CheckpointSpan>>& spans,
    const std::unordered_map<const Node*, NodeId>& nodeIds,
    std::unordered_map<const Node*, std::shared_ptr<const SyMuGen::CheckpointSpan>>& runs,
    std::vector<std::string>& names, std::map<std::string, std::string>& parents) {
  std::vector<std::pair<const Node*, std::shared_ptr<SyMuGen::CheckpointSpan>>> found;
  const auto addRun = [&](const Node* first, const Node* last, const SyMuGen::CheckpointSpan& in) {
    while (first != last && detail::isViewOrShape(first))
      first = first->next();
    if (first == in.first && last == in.last)
      return;  // the whole span: its unit already
    std::unordered_set<const Value*> defined;
    bool computes = false, frees = false;
    for (const Node* n = first;; n = n->next()) {
      computes = computes ||
                 (n->kind().is_aten() && !detail::isViewOrShape(n) && n->outputs().size() > 0 &&
                  n->output(0)->type()->kind() == c10::TypeKind::TensorType);
      // Whether it may free anything: an op that saves a tensor made in the run, or allocates
      // what it saves.
      const SavedOperands& saved = savedOperandsOf(n);
      frees = frees || (saved.known && !saved.rest.empty());
      for (const auto& [output, index] : saved.whole) {
        if (index >= (output ? n->outputs().size() : n->inputs().size()))
          continue;
        const Value* v = output ? n->outputs()[index] : n->inputs()[index];
        // A parameter read in the run is not the run's to free.
        frees = frees || output ||
                (defined.count(v) > 0 && v->node()->kind() != c10::prim::GetAttr &&
                 v->node()->kind() != c10::prim::Constant);
      }
      for (const Value* v : n->outputs())
        defined.insert(v);
      if (n == last)
        break;
    }
    if (!computes || !frees)
      return;
    // Named after its first node the static graph shows (a parameter's read is not one).
    std::string name = in.block + " run k" + std::to_string(found.size());
    for (const Node* n = first;; n = n->next()) {
      if (const auto id = nodeIds.find(n); id != nodeIds.end()) {
        name = in.block + " run #" + std::to_string(id->second.value());
        break;
      }
      if (n == last)
        break;
    }
    if (auto run = detail::makeSpan(first->owningBlock(), first, last, name)) {
      parents[name] = in.block;
      if (auto lighter = lighterRun(*run, nodeIds)) {
        parents[lighter->block] = name;
        run->lighter = std::move(lighter);
      }
      found.emplace_back(first, std::move(run));
    }
  };
  // The runs of first..last (nodes of one block) in span `in`; the branches of an `if` among them
  // are cut the same way (a loop's body is its own span's, when it is one).
  std::function<void(const Node*, const Node*, const SyMuGen::CheckpointSpan&)> cut =
      [&](const Node* from, const Node* to, const SyMuGen::CheckpointSpan& in) {
        const Node* first = nullptr;
        const Node* last = nullptr;
        for (const Node* n = from;; n = n->next()) {
          if (!n->blocks().empty()) {
            if (first != nullptr)
              addRun(first, last, in);
            first = last = nullptr;
            if (n->kind() == c10::prim::If) {
              for (const Block* branch : n->blocks()) {
                if (branch->nodes().begin() != branch->nodes().end())
                  cut(branch->nodes().front(), branch->return_node()->prev(), in);
              }
            }
          } else {
            if (first == nullptr)
              first = n;
            last = n;
            if (closesRun(n)) {
              addRun(first, last, in);
              first = last = nullptr;
            }
          }
          if (n == to)
            break;
        }
        if (first != nullptr)
          addRun(first, last, in);
      };
  // In the order of the spans' names and first nodes, so that the names of runs no node of the
  // graph shows ("run k3") are the same in every SyMuGen of the module.
  std::vector<const SyMuGen::CheckpointSpan*> ordered;
  for (const auto& [start, span] : spans)
    ordered.push_back(span.get());
  const auto firstId = [&](const SyMuGen::CheckpointSpan* span) {
    const auto id = nodeIds.find(span->first);
    return id != nodeIds.end() ? static_cast<int64_t>(id->second.value()) : int64_t{-1};
  };
  std::sort(ordered.begin(), ordered.end(), [&](const auto* a, const auto* b) {
    return a->block != b->block ? a->block < b->block : firstId(a) < firstId(b);
  });
  for (const SyMuGen::CheckpointSpan* span : ordered)
    cut(span->first, span->last, *span);
  // In the order of the graph's nodes (a run's name carries its first shown node's id).
  const auto idOf = [](const std::string& name) {
    const size_t hash = name.rfind(" run #");
    return hash == std::string::npos ? int64_t{-1}
                                     : static_cast<int64_t>(std::stoll(name.substr(hash + 6)));
  };
  std::sort(found.begin(), found.end(), [&](const auto& a, const auto& b) {
    const int64_t va = idOf(a.second->block), vb = idOf(b.second->block);
    return va != vb ? va < vb : a.second->block < b.second->block;
  });
  for (auto& [first, run] : found) {
    names.push_back(run->block);
    if (run->lighter != nullptr)
      names.push_back(run->lighter->block);
    runs[first] = std::move(run);
  }
}

}  // namespace symtune
