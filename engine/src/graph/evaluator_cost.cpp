// What a counted forward (ForwardOptions::countCost) adds up: each op's template cost, and what
// each recomputable unit would free (Note [Counting a run's saved bytes] in evaluator.h).

#include <algorithm>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "evaluator.h"

namespace symtune {

namespace {

// values[index] += x, growing `values` with zeros to reach it.
void addAt(std::vector<double>& values, size_t index, double x) {
  if (values.size() <= index)
    values.resize(index + 1, 0.0);
  values[index] += x;
}

}  // namespace

void SyMuGen::Evaluator::countCost(const Node* node, const std::vector<c10::IValue>& inputs) {
  std::vector<ValueInfo> in, out;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back(detail::describeRuntimeValue(node->inputs()[i], inputs[i]));
  for (const Value* v : node->outputs())
    out.push_back(detail::describeRuntimeValue(v, valueOf(v)));
  bool tensors = false;
  for (const auto& v : in)
    tensors = tensors || v.type == "Tensor";
  for (const auto& v : out)
    tensors = tensors || v.type == "Tensor";
  if (!tensors)
    return;  // int arithmetic, list and shape bookkeeping: no tensor work
  if (!droppedToCount_.empty())
    countDropped(node, inputs);
  const OpCost cost = evaluateCost(node->kind().toQualString(), in, out);
  noteSaved(node, inputs, in, out, cost);
  if (!cost.known || !cost.flops) {
    ++cost_.opsWithoutCost;
    return;
  }
  cost_.flops += *cost.flops;
  cost_.bytes += cost.bytesRead.value_or(0) + cost.bytesWritten.value_or(0);
  // Each unit open around the node, once (a loop body's spans share the loop's name).
  const std::string* counted = nullptr;
  for (const std::string* unit : units_) {
    if (counted != nullptr && *counted == *unit)
      continue;
    ForwardCost::Unit& u = cost_.units[*unit];
    u.flops += *cost.flops;
    u.bytes += cost.bytesRead.value_or(0) + cost.bytesWritten.value_or(0);
    const auto call = static_cast<size_t>(std::max<int64_t>(0, u.executions - 1));
    addAt(u.flopsByCall, call, *cost.flops);
    addAt(u.bytesByCall, call, cost.bytesRead.value_or(0) + cost.bytesWritten.value_or(0));
    counted = unit;
  }
  for (OpenRun& run : openRuns_) {
    if (!run.whole) {
      ForwardCost::Unit& u = cost_.units[run.span->block];
      u.flops += *cost.flops;
      u.bytes += cost.bytesRead.value_or(0) + cost.bytesWritten.value_or(0);
    }
    countRunSaved(run, node, inputs, in, out, cost);
  }
}

void SyMuGen::Evaluator::openRun(const CheckpointSpan& span, bool whole) {
  const int64_t executions = ++cost_.units[span.block].executions;
  OpenRun& run = openRuns_.emplace_back();
  run.span = &span;
  run.whole = whole;
  run.call = static_cast<size_t>(executions - 1);
  for (const Value* v : span.inputs)
    storagesOf(valueOf(v), run.inputs);
  run.kept = run.inputs;
}

void SyMuGen::Evaluator::countRunSaved(OpenRun& run, const Node* node,
                                       const std::vector<c10::IValue>& inputs,
                                       const std::vector<ValueInfo>& in,
                                       const std::vector<ValueInfo>& out, const OpCost& cost) {
  const SavedOperands& saved = savedOperandsOf(node);
  if (!saved.known)
    return;
  for (const auto& [output, index] : saved.whole) {
    const c10::IValue* value = nullptr;
    if (output && index < node->outputs().size())
      value = &valueOf(node->outputs()[index]);
    else if (!output && index < inputs.size())
      value = &inputs[index];
    if (value == nullptr || !value->isTensor() || !value->toTensor().defined() ||
        !value->toTensor().has_storage())
      continue;
    run.saved.emplace_back(value->toTensor().storage());
  }
  if (!saved.rest.empty()) {
    if (const auto rest = evaluateCostExpression(saved.rest, in, out))
      run.own += *rest;
  } else if (saved.whole.empty()) {
    run.own += cost.savedBytes.value_or(0);
  }
}

void SyMuGen::Evaluator::countDropped(const Node* node, const std::vector<c10::IValue>& inputs) {
  for (size_t i = droppedToCount_.size(); i-- > 0;) {
    DroppedToCount& d = droppedToCount_[i];
    if (d.consumer != node)
      continue;
    std::unordered_set<const c10::StorageImpl*> once;
    for (const auto& [output, index] : savedOperandsOf(node).whole) {
      if (output || index >= inputs.size())
        continue;
      std::vector<SeenStorage> saved;
      storagesOf(inputs[index], saved);
      for (const auto& s : saved) {
        for (const auto& dropped : d.storages) {
          if (s.unsafeGetStorageImpl() == dropped.unsafeGetStorageImpl() &&
              once.insert(s.unsafeGetStorageImpl()).second)
            cost_.units[*d.unit].savedBytes += static_cast<double>(s.nbytes());
        }
      }
    }
    droppedToCount_.erase(droppedToCount_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void SyMuGen::Evaluator::noteSaved(const Node* node, const std::vector<c10::IValue>& inputs,
                                   const std::vector<ValueInfo>& in,
                                   const std::vector<ValueInfo>& out, const OpCost& cost) {
  const SavedOperands& saved = savedOperandsOf(node);
  const size_t before = savedAll_.size();
  for (const auto& [output, index] : saved.whole) {
    if (output && index < node->outputs().size())
      storagesOf(valueOf(node->outputs()[index]), savedAll_);
    else if (!output && index < inputs.size())
      storagesOf(inputs[index], savedAll_);
  }
  for (size_t i = before; i < savedAll_.size(); ++i)
    outputCredits_.erase(savedAll_[i].unsafeGetStorageImpl());  // saved after its unit
  if (!saved.rest.empty()) {
    if (const auto rest = evaluateCostExpression(saved.rest, in, out))
      savedOwn_ += *rest;
  } else if (saved.whole.empty()) {
    savedOwn_ += cost.savedBytes.value_or(0);
  }
}

double SyMuGen::Evaluator::totalSaved() {
  std::unordered_set<const c10::StorageImpl*> once;
  for (const auto& s : parameterStorages())
    once.insert(s.unsafeGetStorageImpl());
  double total = savedOwn_;
  for (const auto& s : savedAll_) {
    if (once.insert(s.unsafeGetStorageImpl()).second)
      total += static_cast<double>(s.nbytes());
  }
  return total;
}

void SyMuGen::Evaluator::chargeRunInputs() {
  cost_.savedBytes = totalSaved();
  std::unordered_set<const c10::StorageImpl*> kept;
  for (const auto& s : keptAnyway_)
    kept.insert(s.unsafeGetStorageImpl());
  for (const auto& s : savedAll_)
    kept.insert(s.unsafeGetStorageImpl());
  for (const auto& s : parameterStorages())
    kept.insert(s.unsafeGetStorageImpl());
  // Each storage once per run: a loop's run reads the same tensor from outside every trip.
  std::map<std::string, std::unordered_set<const c10::StorageImpl*>> charged;
  for (const auto& [name, inputs] : runInputs_) {
    double& freed = cost_.units[*name].savedBytes;
    auto& once = charged[*name];
    for (const auto& s : inputs) {
      if (kept.count(s.unsafeGetStorageImpl()) == 0 && once.insert(s.unsafeGetStorageImpl()).second)
        freed -= static_cast<double>(s.nbytes());
    }
  }
  for (const auto& [storage, credit] : outputCredits_) {
    for (const std::string* unit : credit.units)
      cost_.units[*unit].savedBytes += static_cast<double>(credit.storage.nbytes());
  }
  for (const auto& [name, storages] : charged)
    cost_.units[name].savedBytes = std::max(0.0, cost_.units[name].savedBytes);
  // Each execution's share of what its unit frees in the end.
  for (auto& [name, unit] : cost_.units) {
    double counted = 0;
    for (double b : unit.savedByCall)
      counted += b;
    for (double& b : unit.savedByCall)
      b = counted > 0 ? b * unit.savedBytes / counted : 0;
  }
  outputCredits_.clear();
  runInputs_.clear();
  keptAnyway_.clear();
  savedAll_.clear();
  savedOwn_ = 0;
}

void SyMuGen::Evaluator::closeRun(size_t index) {
  OpenRun& run = openRuns_[index];
  runInputs_.emplace_back(&run.span->block, run.inputs);
  const size_t firstOutput = run.kept.size();
  for (const Value* v : run.span->outputs) {
    const bool dropped =
        std::find(run.span->dropped.begin(), run.span->dropped.end(), v) != run.span->dropped.end();
    if (!dropped) {
      storagesOf(valueOf(v), run.kept);
    } else {
      if (droppedToCount_.empty() || droppedToCount_.back().unit != &run.span->block)
        droppedToCount_.push_back({run.span->consumer, &run.span->block, {}});
      storagesOf(valueOf(v), droppedToCount_.back().storages);
    }
  }
  std::unordered_set<const c10::StorageImpl*> kept;
  for (const auto& s : run.kept)
    kept.insert(s.unsafeGetStorageImpl());
  for (const auto& s : parameterStorages())
    kept.insert(s.unsafeGetStorageImpl());
  // Its outputs its own ops save, but its inputs and the parameters: credited unless an op
  // after it saves them too.
  std::unordered_set<const c10::StorageImpl*> savedHere, notOutputs;
  for (const auto& s : run.saved)
    savedHere.insert(s.unsafeGetStorageImpl());
  for (size_t i = 0; i < firstOutput; ++i)
    notOutputs.insert(run.kept[i].unsafeGetStorageImpl());
  for (const auto& s : parameterStorages())
    notOutputs.insert(s.unsafeGetStorageImpl());
  for (size_t i = firstOutput; i < run.kept.size(); ++i) {
    const SeenStorage& s = run.kept[i];
    if (savedHere.count(s.unsafeGetStorageImpl()) > 0 &&
        notOutputs.count(s.unsafeGetStorageImpl()) == 0) {
      auto& credit = outputCredits_[s.unsafeGetStorageImpl()];
      credit.storage = s;
      credit.units.insert(&run.span->block);
    }
  }
  double freed = run.own;
  for (const auto& storage : run.saved) {
    if (kept.insert(storage.unsafeGetStorageImpl()).second)  // each storage once
      freed += static_cast<double>(storage.nbytes());
  }
  if (!run.span->dropped.empty() && !droppedToCount_.empty() &&
      droppedToCount_.back().unit == &run.span->block) {
    // A dropped output one of the run's own ops saves is counted already.
    auto& storages = droppedToCount_.back().storages;
    storages.erase(std::remove_if(storages.begin(), storages.end(),
                                  [&](const SeenStorage& s) {
                                    return kept.count(s.unsafeGetStorageImpl()) > 0;
                                  }),
                   storages.end());
  }
  cost_.units[run.span->block].savedBytes += freed;
  if (run.whole)
    addAt(cost_.units[run.span->block].savedByCall, run.call, freed);
  openRuns_.erase(openRuns_.begin() + static_cast<std::ptrdiff_t>(index));
}

}  // namespace symtune
