#include "symtune/binding/binder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Version.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/cuda.h>

#include "../graph/ir_values.h"
#include "measurement.h"
#include "symtune/binding/cuda_graph.h"
#include "symtune/binding/shape_bucket.h"
#include "symtune/compat/torch_compat.h"
#include "symtune/telemetry/allocation_limit.h"
#include "symtune/telemetry/node_context.h"

namespace symtune::binding {

namespace {

using detail::Clock;
using detail::disagreement;
using detail::firstLine;
using detail::median;
using detail::Replay;
using detail::scaledError;
using detail::synchronize;

}  // namespace

MachineFingerprint currentMachine(const c10::Device& device) {
  MachineFingerprint m;
  m.cpu = at::get_cpu_capability();
  m.threads = at::get_num_threads();
  if (device.is_cuda())
    m.gpu = compat::cudaDeviceName(device.index());
  m.libtorch = TORCH_VERSION;
  return m;
}

std::string graphFingerprint(const Graph& graph) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  const auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0xff;
    h *= 1099511628211ull;
  };
  for (const auto& n : graph.nodes()) {
    if (n.side != GraphSide::Forward)
      continue;
    mix(n.kind);
    mix(n.modulePath);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return graph.name + ":" + hex;
}

Binder::Binder(const Graph& graph, MachineFingerprint machine, BinderOptions options)
    : graph_(graph), options_(std::move(options)) {
  TORCH_CHECK(options_.repetitions >= 1, "Binder: repetitions must be at least 1, got ",
              options_.repetitions);
  TORCH_CHECK(options_.margin >= 0 && options_.margin < 1, "Binder: margin must be in [0, 1), got ",
              options_.margin);
  TORCH_CHECK(options_.memorySlack >= 0 && options_.memorySlack < 1,
              "Binder: memory slack must be in [0, 1), got ", options_.memorySlack);
  const std::string graphPrefix = kCudaGraphPrefix;
  for (const auto& name : options_.disable) {
    const bool graphed = name.rfind(graphPrefix, 0) == 0 &&
                         findCandidate(name.substr(graphPrefix.size())) != nullptr;
    const bool known = findCandidate(name) != nullptr || name == kChannelsLast || graphed ||
                       std::any_of(options_.extra.begin(), options_.extra.end(),
                                   [&](const auto& c) { return c->name() == name; });
    TORCH_CHECK(known, "Binder: no candidate is called \"", name, "\"");
    TORCH_CHECK(name != kAten, "Binder: the reference (aten) cannot be disabled");
  }
  // On a GPU, each built-in candidate also as CUDA graphs where its sites can be padded (Note
  // [Graphed sites] in symtune/binding/cuda_graph.h).
  if (!machine.gpu.empty() && cudaGraphsBuilt()) {
    for (const auto& c : builtinCandidates())
      graphed_.push_back(
          makeCudaGraphed(std::shared_ptr<const Candidate>(std::shared_ptr<void>(), c.get())));
  }
  table_.machine = std::move(machine);
  table_.model = graphFingerprint(graph);
  table_.memorySlack = options_.memorySlack;
  const bool disabled =
      options_.exact || std::find(options_.disable.begin(), options_.disable.end(),
                                  kChannelsLast) != options_.disable.end();
  for (const auto& n : graph.nodes()) {
    if (!disabled && n.side == GraphSide::Forward && n.kind == "aten::conv2d") {
      firstConvolution_ = n.id;
      break;
    }
  }
}

namespace {

bool imageInput(const c10::IValue& v) {
  if (!v.isTensor())
    return false;
  const at::Tensor& t = v.toTensor();
  return t.defined() && t.dim() == 4 && at::isFloatingType(t.scalar_type());
}

std::vector<c10::IValue> channelsLast(const std::vector<c10::IValue>& inputs) {
  std::vector<c10::IValue> out = inputs;
  for (auto& v : out) {
    if (imageInput(v))
      v = v.toTensor().contiguous(at::MemoryFormat::ChannelsLast);
  }
  return out;
}

}  // namespace

std::optional<std::vector<c10::IValue>> Binder::bindInputs(
    const std::vector<c10::IValue>& inputs, const std::function<ModelReplay()>& model) {
  // Note [What a region holds] in binder.h: an execution its last node never reached lets go of
  // what it noted now.
  for (auto& [region, cs] : cells_) {
    cs.noted.clear();
    cs.pending.clear();
  }
  newForward();
  spendMemorySlack();
  if (!firstConvolution_ || std::none_of(inputs.begin(), inputs.end(), imageInput))
    return std::nullopt;
  const torch::jit::Stack stack(inputs.begin(), inputs.end());
  // Images need no gradient for one to flow: the parameters' (measured with the backward).
  const std::string bucket = gradBucketKey(stack, stack.size(), -1);
  auto it = channelsLast_.find(bucket);
  if (it == channelsLast_.end()) {
    bool chosen = false;
    if (const Binding* known = table_.find(kImageInputs, bucket)) {
      chosen = known->winner == kChannelsLast;
    } else if (mayMeasure()) {
      Binding b = measureImageFormat(inputs, model(), bucket);
      chosen = b.winner == kChannelsLast;
      table_.put(std::move(b));
      ++measurements_;
    }
    it = channelsLast_.emplace(bucket, chosen).first;
  }
  if (!it->second)
    return std::nullopt;
  ++boundExecutions_;
  return channelsLast(inputs);
}

namespace {

// Note [Image format under TF32]: on CUDA, cuDNN may run float32 convolutions in TF32 (ATen's
// default), and then both formats are TF32-rounded and differ, summed in another order, by far
// more than kImageFormatTolerance over a deep network (the ResNet-152 preset on an H200,
// 2026-12-04: 1.6e-3, and channels-last was refused). The reference is then no closer than that to
// the float32 result either, so the bar is what the reference itself is off from the convolutions
// in full float32 (one more replay, TF32 off), twice over, and never under kImageFormatTolerance.
template <typename ReplayExact>
double imageFormatTolerance(bool cuda, const Replay& reference, const ReplayExact& replayExact) {
  if (!cuda || !compat::cudnnConvolutionsInTf32())
    return kImageFormatTolerance;
  Replay exact;
  compat::setCudnnConvolutionsInTf32(false);
  try {
    replayExact(exact);
  } catch (...) {
    compat::setCudnnConvolutionsInTf32(true);
    throw;
  }
  compat::setCudnnConvolutionsInTf32(true);
  const double own = std::max(scaledError(reference.outputs, exact.outputs),
                              scaledError(reference.grads, exact.grads));
  return std::max(kImageFormatTolerance, 2 * own);
}

}  // namespace

Binding Binder::measureImageFormat(const std::vector<c10::IValue>& inputs, const ModelReplay& model,
                                   const std::string& bucket) {
  // Measuring is not the step's work: a memory budget the step is held to (docs/remat.md, "With
  // the binder") would count the replays against it and refuse a candidate that ran out for good.
  const ScopedAllocationLimitLift unbudgeted;
  CurrentNodeScope unattributed{NodeId()};
  const detail::KeptRandomState random(inputs);
  std::vector<at::Tensor> buffers;
  {
    at::NoGradGuard noGrad;
    for (const auto& b : model.buffers)
      buffers.push_back(b.clone());
  }
  // However the measuring ends, a replay that threw (out of memory) included, the model's buffers
  // (batch norm's running statistics, which each training forward updates) and the random state
  // are as they were: until 2026-12-07 a throw left the replays' updates in them, and a step
  // retried after running out trained on them.
  struct PutBack {
    const detail::KeptRandomState& random;
    const ModelReplay& model;
    const std::vector<at::Tensor>& buffers;
    ~PutBack() {
      try {
        random.restore();
        at::NoGradGuard noGrad;
        for (size_t i = 0; i < buffers.size(); ++i)
          model.buffers[i].copy_(buffers[i]);
      } catch (const std::exception&) {  // a device gone bad: the step's own work says so next
      }
    }
  } const putBack{random, model, buffers};
  std::vector<at::Tensor> parameters;
  for (const auto& p : model.parameters) {
    if (p.requires_grad())
      parameters.push_back(p);
  }
  const std::vector<c10::IValue> converted = channelsLast(inputs);
  bool cuda = false;
  for (const auto& v : inputs)
    cuda = cuda || (v.isTensor() && v.toTensor().defined() && v.toTensor().is_cuda());
  at::Tensor gradOutput;  // fixed for both, made on the first replay

  const auto replay = [&](bool nhwc, bool timed, Replay& out) {
    random.restore();  // the same dropout masks both ways
    synchronize(cuda && timed);
    const auto t0 = Clock::now();
    const at::Tensor output = model.forward(nhwc ? converted : inputs);
    synchronize(cuda && timed);
    const auto t1 = Clock::now();
    std::vector<at::Tensor> grads;
    if (output.requires_grad() && !parameters.empty()) {
      if (!gradOutput.defined()) {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(20261201);
        gradOutput =
            at::randn(output.sizes(), gen, output.options().device(at::kCPU)).to(output.device());
      }
      grads = torch::autograd::grad({output}, parameters, {gradOutput}, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    synchronize(cuda && timed);
    const auto t2 = Clock::now();
    out.outputs = {output.detach()};
    out.grads = std::move(grads);
    out.forward = std::chrono::duration<double>(t1 - t0).count();
    out.backward = std::chrono::duration<double>(t2 - t1).count();
  };

  Binding b;
  b.site = kImageInputs;
  b.node = firstConvolution_->value();
  b.pattern = kImageInputs;
  b.bucket = bucket;
  b.reference = kAten;
  std::vector<CandidateMeasurement> results(2);
  results[0].name = kAten;
  results[1].name = kChannelsLast;
  Replay reference, candidate;
  replay(false, false, reference);
  try {
    replay(true, false, candidate);
    const double error = std::max(scaledError(candidate.outputs, reference.outputs),
                                  scaledError(candidate.grads, reference.grads));
    results[1].maxError = error;
    const double tolerance =
        imageFormatTolerance(cuda, reference, [&](Replay& exact) { replay(false, false, exact); });
    if (!(error <= tolerance))
      results[1].refused = disagreement(candidate, reference, error, tolerance);
  } catch (const std::exception& e) {
    results[1].refused = "failed: " + firstLine(e.what());
  }
  std::vector<double> forward[2], backward[2];
  const int repetitions = std::max(options_.repetitions, kImageFormatRepetitions);
  for (int rep = 0; rep < repetitions; ++rep) {
    for (int i = 0; i < 2; ++i) {
      if (!results[i].refused.empty())
        continue;
      Replay r;
      try {
        replay(i == 1, true, r);
      } catch (const std::exception& e) {
        if (i == 0)
          throw;  // the model as written: the step fails as it would have
        results[1].refused = "failed: " + firstLine(e.what());
        continue;
      }
      forward[i].push_back(r.forward);
      backward[i].push_back(r.backward);
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (!results[i].refused.empty())
      continue;
    results[i].forwardSeconds = median(forward[i]);
    results[i].backwardSeconds = median(backward[i]);
  }
  const double margin = std::max(options_.margin, kImageFormatMargin);
  const bool wins =
      results[1].refused.empty() && results[1].seconds() < (1.0 - margin) * results[0].seconds();
  b.winner = wins ? kChannelsLast : kAten;
  b.candidates = std::move(results);
  return b;
}

std::optional<std::string> Binder::adopt(BindingTable table) {
  if (auto why = table.refusal(table_.machine, table_.model))
    return why;
  if (table.memorySlack != options_.memorySlack) {
    char why[160];
    std::snprintf(why, sizeof why,
                  "measured with a memory slack of %g (this run's is %g: other winners)",
                  table.memorySlack, options_.memorySlack);
    return std::string(why);
  }
  table_ = std::move(table);
  forgetChoices();
  slackDue_ = true;  // its winners spent again by this binder's slack: the same where it wrote them
  return std::nullopt;
}

void Binder::forgetChoices() {
  channelsLast_.clear();
  rowsChosen_.clear();
  for (auto& [region, cell] : cells_) {
    cell.chosen.clear();
    cell.last = nullptr;
  }
  for (auto& [node, state] : states_) {
    if (state != nullptr) {
      state->chosen.clear();
      state->last = nullptr;
    }
  }
  if (loss_) {
    loss_->chosen.clear();
    loss_->last = nullptr;
  }
}

void Binder::setExploring(bool exploring) {
  if (exploring && !exploring_ && deferred_) {
    forgetChoices();  // what ran the reference for want of a measurement is decided again
    deferred_ = false;
  }
  exploring_ = exploring;
}

bool Binder::mayMeasure() {
  if (!options_.measure || (options_.budget >= 0 && measurements_ >= options_.budget))
    return false;
  ++unsettledMet_;
  if (!exploring_) {
    deferred_ = true;
    return false;
  }
  return true;
}

bool Binder::binds(const torch::jit::Node* node, NodeId id) {
  auto it = states_.find(node);
  if (it != states_.end())
    return it->second != nullptr;
  if (id.valid())
    met_.insert(id.value());
  if (symtune::detail::enclosingWith(node) != nullptr) {
    // Run as written in a `with` block (Note [With blocks] in engine/src/graph/evaluator.h).
    states_.emplace(node, nullptr);
    return false;
  }
  findCells(*node->owningGraph());
  const torch::jit::Node* first = pairProducer(node);
  const auto producer = first != nullptr ? states_.find(first) : states_.end();
  if (first != nullptr && producer == states_.end())
    return false;
  // A pair's first node may be bound without being the pair's site: as the first node of a region
  // (kBatchNormReluConv) when the pair's candidates are disabled. Its second node is then the
  // region's, run as written or skipped with it.
  if (first != nullptr &&
      (producer->second == nullptr || producer->second->site.follower == node)) {
    // The second node of a two-node site (Note [Two-node sites]) passes on its input while the
    // first is bound. Its first node runs before it in its block, so has been asked; until then
    // (a caller that asks out of order) nothing is remembered.
    std::unique_ptr<SiteState> state;
    if (producer->second != nullptr) {
      state.reset(new SiteState{
          OpSite{}, torch::jit::Operation([](torch::jit::Stack&) {}), {}, {}, {}, nullptr, true});
    }
    const bool bound = state != nullptr;
    if (bound) {
      noteMember(first, id);  // the pair's site key: its first node
      // The last node of a region too (a convolution block pair ends in its second block's
      // ReLU): the region's when it is bound, passing on the pair's result when it runs as
      // written.
      const auto cell = cellOf_.find(node);
      if (cell != cellOf_.end() && cellState(cell->second, id).lead->candidates.size() > 1) {
        state->region = cell->second.get();
        noteMember(cell->second.get(), id);
      }
    }
    states_.emplace(node, std::move(state));
    return bound;
  }
  std::unique_ptr<SiteState> state;
  auto site = findOpSite(node, id, graph_, groups_);
  if (site && site->follower != nullptr &&
      symtune::detail::enclosingWith(site->follower) != nullptr)
    site.reset();  // a pair whose second node a `with` block opens before
  if (site) {
    std::vector<const Candidate*> applicable = applicableTo(*site);
    if (applicable.size() > 1) {
      torch::jit::Operation op = node->getOperation();
      if (site->follower != nullptr) {
        // The reference of a two-node site: both ATen ops, the second on the first's result and
        // its own arguments (constants: the GELU's `approximate`).
        torch::jit::Operation second = site->follower->getOperation();
        std::vector<c10::IValue> rest;
        for (size_t i = 1; i < site->follower->inputs().size(); ++i)
          rest.push_back(*torch::jit::toIValue(site->follower->input(i)));
        op = torch::jit::Operation([op, second, rest](torch::jit::Stack& stack) mutable {
          op(stack);
          stack.insert(stack.end(), rest.begin(), rest.end());
          second(stack);
        });
      }
      state.reset(new SiteState{
          std::move(*site), std::move(op), std::move(applicable), {}, {}, nullptr, false});
      order_.push_back(state.get());
      if (state->site.rows != nullptr)
        noteMember(state->site.rows.get(), id);
    }
  }
  const auto cell = cellOf_.find(node);
  if (cell != cellOf_.end() && cellState(cell->second, id).lead->candidates.size() > 1) {
    if (state == nullptr) {
      state.reset(new SiteState{
          OpSite{}, node->getOperation(), {}, {}, {}, nullptr, false, cell->second.get()});
    }
    state->region = cell->second.get();
    noteMember(cell->second.get(), id);
  }
  const bool bound = state != nullptr;
  states_.emplace(node, std::move(state));
  return bound;
}

at::Tensor Binder::loss(const at::Tensor& logits, const at::Tensor& target) {
  if (loss_ == nullptr) {
    OpSite site;
    site.name = kLossSite;
    site.pattern = kSoftmaxCrossEntropy;
    site.arity = 2;
    std::vector<const Candidate*> applicable = applicableTo(site);
    torch::jit::Operation reference([](torch::jit::Stack& stack) {
      at::Tensor out =
          at::cross_entropy_loss(stack[stack.size() - 2].toTensor(), stack.back().toTensor());
      stack.resize(stack.size() - 2);
      stack.emplace_back(std::move(out));
    });
    loss_.reset(new SiteState{std::move(site),
                              std::move(reference),
                              std::move(applicable),
                              {},
                              {},
                              nullptr,
                              false,
                              nullptr});
    if (loss_->candidates.size() > 1)
      order_.push_back(loss_.get());
  }
  SiteState& s = *loss_;
  torch::jit::Stack stack{c10::IValue(logits), c10::IValue(target)};
  LoopFrames none;
  if (s.candidates.size() < 2)
    s.op(stack);
  else
    runChosen(s, stack, 2, -1, none);
  return stack.back().toTensor();
}

std::vector<const Candidate*> Binder::applicableTo(const OpSite& site) const {
  std::vector<const Candidate*> applicable;
  const auto consider = [&](const Candidate& c) {
    const bool disabled = (options_.exact && c.tolerance() > 0) ||
                          (c.cpuOnly() && !table_.machine.gpu.empty()) ||
                          std::find(options_.disable.begin(), options_.disable.end(), c.name()) !=
                              options_.disable.end();
    if (!disabled && c.applies(site))
      applicable.push_back(&c);
  };
  for (const auto& c : builtinCandidates())
    consider(*c);
  for (const auto& c : graphed_)
    consider(*c);
  for (const auto& c : options_.extra)
    consider(*c);
  return applicable;
}

std::vector<OpSite> Binder::sites() const {
  std::vector<OpSite> out;
  for (const SiteState* s : order_)
    out.push_back(s->site);
  return out;
}

// Note [Evaluation buckets]
// A batch norm in evaluation normalizes with its running statistics: another function than in
// training, which the batch norm kernels do not compute (they run the ops as written there, and a
// measurement refuses them: Candidate::runsAsWritten). An execution where a site's training flag
// is false is in a bucket of its own, the inputs' bucket and " eval", so that what a model's
// evaluation passes measured is not what its training steps are bound to, nor the other way
// round; the cost model reads each kind from its own kind. Training buckets keep the keys they had
// before 2026-12-07, when the flag was not in the key: a table a training run wrote reads as it
// did. The bucket is decided where the site begins, so the flag must be its first node's: the
// batch norm ReLU pair's and the batch norm, ReLU and convolution region's. A convolution block
// pair (a convolution first) and bias-dropout-add (the bias add first) read theirs later, often
// from a `self.training` read between their nodes, and keep one bucket for both modes: the pair's
// candidates are refused where evaluation measures it, so a training step after one runs it as
// written; bias-dropout-add computes both modes, measured in whichever met the bucket first.
std::string Binder::siteBucket(const OpSite& site, const torch::jit::Stack& stack, size_t count,
                               int64_t trips) {
  std::string key = bucketKey(stack, count, trips);
  if (evaluating(site, stack))
    key += kEvaluationBucket;
  return key;
}

void Binder::signature(const OpSite& site, const torch::jit::Stack& stack, size_t count,
                       int64_t trips) {
  signature_.clear();
  for (size_t i = stack.size() - count; i < stack.size(); ++i) {
    if (!stack[i].isTensor())
      continue;
    const at::Tensor& t = stack[i].toTensor();
    if (!t.defined()) {
      signature_.push_back(-1);
      continue;
    }
    signature_.push_back(static_cast<int64_t>(t.scalar_type()));
    signature_.push_back(static_cast<int64_t>(t.device().type()) * 1000 + t.device().index());
    signature_.push_back(t.requires_grad() ? -3 : -2);
    signature_.push_back(t.dim());
    for (int64_t d : t.sizes())
      signature_.push_back(d);
  }
  signature_.push_back(trips);
  signature_.push_back(at::GradMode::is_enabled() ? 1 : 0);
  signature_.push_back(evaluating(site, stack) ? 1 : 0);
}

void Binder::run(const torch::jit::Node* node, torch::jit::Stack& stack, LoopFrames& loops) {
  SiteState& s = *states_.at(node);
  if (s.region != nullptr) {
    runCell(s, node, stack, loops);
    return;
  }
  runSite(s, node, stack, loops);
}

void Binder::runSite(SiteState& s, const torch::jit::Node* node, torch::jit::Stack& stack,
                     LoopFrames& loops) {
  if (s.passOn) {
    // Its first input, the pair's result, is its output (the GELU's `approximate` dropped).
    stack.resize(stack.size() - (node->inputs().size() - 1));
    return;
  }
  if (s.site.node == nullptr) {
    s.op(stack);  // a cell's node that is no site of its own, run as written
    return;
  }
  if (s.site.rows != nullptr) {
    runRows(s, stack, loops);
    return;
  }
  if (s.site.group != nullptr && !observeSlice(s, stack)) {
    // The group has not shown its ranges yet: the ATen op, nothing decided.
    s.candidates.front()->run(s.site, s.op, stack, loops);
    return;
  }
  const int64_t trips = s.site.loop != nullptr ? loops.maxTrips(s.site.loop) : -1;
  runChosen(s, stack, node->inputs().size(), trips, loops);
}

void Binder::runChosen(SiteState& s, torch::jit::Stack& stack, size_t count, int64_t trips,
                       LoopFrames& loops) {
  signature(s.site, stack, count, trips);
  const Candidate* c = s.last;
  if (c == nullptr || signature_ != s.lastSignature) {
    const std::string bucket = siteBucket(s.site, stack, count, trips);
    auto it = s.chosen.find(bucket);
    c = it != s.chosen.end() ? it->second : (s.chosen[bucket] = decide(s, bucket, stack, trips));
    s.last = c;
    s.lastSignature = signature_;
  }
  if (c->name() != kAten)
    ++boundExecutions_;
  c->run(s.site, s.op, stack, loops);
}

bool Binder::observeSlice(SiteState& s, const torch::jit::Stack& stack) {
  // stack: self, dim, start, end, step
  const size_t base = stack.size() - 5;
  const at::Tensor& self = stack[base].toTensor();
  const auto dim = tensorDim(self, stack[base + 1].toInt());
  if (!dim)
    return false;
  const auto [start, end] = sliceRange(stack[base + 2], stack[base + 3], self.size(*dim));
  s.site.group->observe(self, start, end);
  return s.site.group->splittable(self.size(*dim));
}

const Candidate* Binder::byName(const SiteState& s, const std::string& name) const {
  for (const Candidate* c : s.candidates) {
    if (c->name() == name)
      return c;
  }
  return nullptr;
}

const Candidate* Binder::decide(SiteState& s, const std::string& bucket,
                                const torch::jit::Stack& stack, int64_t trips) {
  if (const Binding* known = table_.find(s.site.name, bucket)) {
    if (const Candidate* c = byName(s, known->winner))
      return c;
  }
  if (options_.predict) {
    if (const Candidate* c = predict(s, bucket))
      return c;
  }
  if (!mayMeasure())
    return s.candidates.front();
  Binding b = measure(s, bucket, stack, trips);
  const Candidate* winner = byName(s, b.winner);
  put(std::move(b), s);
  ++measurements_;
  return winner;
}

Binder::RecomputeLimits Binder::recomputeLimits() const {
  RecomputeLimits limits;
  limits.met = met_;
  // The keys of members_ (siteKey) that are rows groups or loop projections: none of theirs.
  std::set<const void*> never;
  std::set<const void*> asWritten;  // regions that need neither
  std::map<const void*, std::vector<int32_t>> whole;
  for (const auto& [node, s] : states_) {
    if (s == nullptr)
      continue;
    const NodeId id = s->site.id;
    if (s->site.rows != nullptr) {
      never.insert(s->site.rows.get());
      if (id.valid())
        limits.never.insert(id.value());
    } else if (s->site.group != nullptr && id.valid()) {
      whole[s->site.group.get()].push_back(id.value());
    } else if (s->site.follower != nullptr && id.valid()) {
      whole[s->site.node].push_back(id.value());  // the follower is among members_[node]
    }
  }
  for (const auto& [region, cs] : cells_) {
    if (cs.lead == nullptr)
      continue;
    // A recurrent projection computes every trip's at once, kept in its loop's frame.
    const auto& candidates = cs.lead->candidates;
    if (cs.lead->site.loop != nullptr &&
        std::any_of(candidates.begin(), candidates.end(),
                    [](const Candidate* c) { return c->name() == "addmm-batched"; }))
      never.insert(region);
    else if (isConvBlockRegion(region->pattern))
      asWritten.insert(region);  // under a plan with runs or loops (setRecomputed)
    else if (cs.lead->site.id.valid())
      whole[region].push_back(cs.lead->site.id.value());
  }
  for (const auto& [key, ids] : members_) {
    if (asWritten.count(key) != 0)
      continue;
    if (never.count(key) != 0) {
      limits.never.insert(ids.begin(), ids.end());
      continue;
    }
    auto& all = whole[key];
    all.insert(all.end(), ids.begin(), ids.end());
  }
  for (auto& [key, ids] : whole) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ids.size() > 1)
      limits.whole.push_back(std::move(ids));
  }
  return limits;
}

const void* Binder::siteKey(const SiteState& s) {
  if (s.site.rows != nullptr)
    return s.site.rows.get();
  if (s.site.cell != nullptr)
    return s.site.cell.get();
  return s.site.node;
}

void Binder::spendMemorySlack() {
  if (!slackDue_ || options_.memorySlack <= 0)
    return;
  slackDue_ = false;
  std::vector<Binding*> bindings;
  for (Binding& b : table_.bindings) {
    if (b.pattern != kImageInputs)  // the whole model's time, not a site's
      bindings.push_back(&b);
  }
  if (detail::spendMemorySlack(bindings, options_.margin, options_.memorySlack) > 0)
    forgetChoices();
}

bool Binder::widenMemorySlack() {
  if (options_.memorySlack <= 0 || options_.memorySlack >= kWidestMemorySlack)
    return false;
  options_.memorySlack = std::min(2 * options_.memorySlack, kWidestMemorySlack);
  table_.memorySlack = options_.memorySlack;
  slackDue_ = true;  // spent again at the next forward (bindInputs)
  return true;
}

void Binder::put(Binding b, const SiteState& s) {
  slackDue_ = true;
  const void* key = siteKey(s);
  leads_[key].insert(b.site);
  for (int32_t id : members_[key]) {
    if (id != b.node && std::find(b.nodes.begin(), b.nodes.end(), id) == b.nodes.end())
      b.nodes.push_back(id);
  }
  table_.put(std::move(b));
}

void Binder::noteMember(const void* key, NodeId id) {
  if (!id.valid())
    return;
  auto& ids = members_[key];
  if (std::find(ids.begin(), ids.end(), id.value()) != ids.end())
    return;
  ids.push_back(id.value());
  // Bindings made before this node was first run (its site decided at an earlier node).
  const auto leads = leads_.find(key);
  if (leads == leads_.end())
    return;
  for (Binding& b : table_.bindings) {
    if (leads->second.count(b.site) != 0 && b.node != id.value() &&
        std::find(b.nodes.begin(), b.nodes.end(), id.value()) == b.nodes.end())
      b.nodes.push_back(id.value());
  }
}

}  // namespace symtune::binding
