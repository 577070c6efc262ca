// Full activation checkpointing in SyMuGen's evaluator (Note [Checkpointed spans]).

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_set>

#include "evaluator.h"

namespace symtune {

// Note [Checkpointed spans]
// Inlining puts each call of a top-level block (segmentBlocks()) into one contiguous run of
// nodes of the block that made the call. prepareCheckpointSpans() finds those runs by the module
// path of each node's call stack, with the values each reads from before it and the values read
// after it (Note [Segments]). The evaluator runs the spans of the blocks a SegmentPlan recomputes
// through CheckpointFunction. Its forward runs the span with grad mode off — the span's activations
// are freed as soon as their last use has run — and keeps only the span's tensor inputs. Its
// backward runs the span again with grad mode on and back-propagates the incoming gradients through
// it (reentrant, like torch.utils.checkpoint with use_reentrant=True): the parameters' gradients
// accumulate as in any backward and the inputs' gradients are returned. Control flow in a span
// reads the same values when recomputed, so it takes the same branches and trip counts.
// Spans run without checkpointing when it would be wrong: an output whose tensors are nested (a
// tuple inside a tuple, an Optional), a span that writes to one of its inputs (an in-place ReLU
// block, appending to a caller's list, prim::SetAttr on a module it was given), and — decided at
// run time — list or tuple inputs holding tensors that require grad.
// A random op inside a span draws the same numbers when recomputed (Note [Checkpoint RNG]).
// A batch norm's running statistics, which it updates in place, are updated by the forward only
// (Note [Recomputed batch norms] in evaluator.h); another op that updated state it does not take
// as an input would update it once more, as with PyTorch's checkpointing.

// Note [Checkpoint RNG]
// A span's forward keeps the random state it began with — the default CPU generator's, and the
// default CUDA generator's of every device its inputs are on — and its recompute runs from that
// state, then puts back the state it found: a dropout inside a span (aten::dropout,
// symtune::bias_dropout_add) draws the same mask both times, so the gradients are those of the
// forward that ran, and the generators continue as if there had been no recompute
// (torch.utils.checkpoint's preserve_rng_state). A span none of whose nodes draws (no random op
// of aten's, no op of another namespace, which might draw without saying) keeps no state: a
// generator's state is a few kilobytes, per execution of the span — per trip of a loop-body
// span.

namespace {

bool holdsGradTensor(const c10::IValue& value) {
  if (value.isTensor())
    return value.toTensor().defined() && value.toTensor().requires_grad();
  if (value.isTuple()) {
    for (const auto& item : value.toTupleRef().elements()) {
      if (holdsGradTensor(item))
        return true;
    }
  }
  if (value.isList()) {
    for (const auto& item : value.toListRef()) {
      if (holdsGradTensor(item))
        return true;
    }
  }
  return false;
}

bool allTensors(c10::ArrayRef<c10::IValue> items) {
  for (const auto& item : items) {
    if (!item.isTensor() || !item.toTensor().defined())
      return false;
  }
  return true;
}

// Generators and their states (Note [Checkpoint RNG]).
struct RngStates : torch::CustomClassHolder {
  std::vector<std::pair<at::Generator, at::Tensor>> states;

  // The CPU generator's state and the CUDA generators' of the devices `tensors` are on.
  static c10::intrusive_ptr<RngStates> take(at::TensorList tensors) {
    auto taken = c10::make_intrusive<RngStates>();
    taken->add(at::detail::getDefaultCPUGenerator());
    std::set<c10::DeviceIndex> devices;
    for (const auto& t : tensors) {
      if (t.defined() && t.is_cuda())
        devices.insert(t.get_device());
    }
    for (const c10::DeviceIndex d : devices)
      taken->add(at::globalContext().defaultGenerator(at::Device(at::kCUDA, d)));
    return taken;
  }

  // Sets every generator to its kept state; returns the states they had.
  c10::intrusive_ptr<RngStates> swapIn() const {
    auto previous = c10::make_intrusive<RngStates>();
    for (const auto& [generator, state] : states) {
      at::Generator g = generator;
      std::lock_guard<std::mutex> lock(g.mutex());
      previous->states.emplace_back(g, g.get_state());
      g.set_state(state);
    }
    return previous;
  }

 private:
  void add(at::Generator g) {
    std::lock_guard<std::mutex> lock(g.mutex());
    states.emplace_back(g, g.get_state());
  }
};

// One execution of a span: what its backward needs to run it again.
struct SpanRun : torch::CustomClassHolder {
  SyMuGen* gen = nullptr;
  // The evaluator that met the span: the forward runs in it, so that a recorded step sees the
  // span's shapes, branches and trips; the recompute in backward runs in an evaluator of its own.
  SyMuGen::Evaluator* caller = nullptr;
  OpBinder* binder = nullptr;  // the caller's: the recomputation binds its sites the same way
  LoopFrames loops;            // the caller's running loops, their trips only
  std::shared_ptr<const SyMuGen::CheckpointSpan> span;
  std::vector<c10::IValue> inputs;  // span inputs; tensors are taken from the function's inputs
  std::vector<int> tensorSlot;      // per span input: its index among the tensors, or -1

  // How the span's outputs map onto the function's flat tensor outputs.
  struct Output {
    enum Kind { Tensor, Tuple, List, Other } kind = Other;
    size_t first = 0, count = 0;  // tensors first .. first + count
    c10::IValue other;            // Other: the value itself (no gradient flows through it)
    c10::TypePtr elementType;     // List: the element type
    c10::TupleTypePtr tupleType;  // Tuple: a named tuple's type (its field names)
  };
  std::vector<Output> layout;
  c10::intrusive_ptr<RngStates> rng;  // the states it began with, when it may draw

  // A lighter run's outputs freed after its closing op (Note [Runs without their closing op]).
  struct Dropped {
    c10::intrusive_ptr<c10::StorageImpl> storage;
    size_t nbytes = 0;
    at::TensorOptions options;
    int64_t offset = 0;
    std::vector<int64_t> sizes, strides;
    size_t flat = 0;  // among the flat outputs
  };
  std::vector<Dropped> dropped;
  torch::autograd::variable_list kept;  // its inputs, until the refill
  bool refilled = false;
  // Made by the refill, for the backward: the inputs as leaves, the outputs with their graph.
  std::optional<std::pair<torch::autograd::variable_list, torch::autograd::variable_list>> again;

  // Runs the span again with gradients from `saved` (its inputs) and its random state.
  std::pair<torch::autograd::variable_list, torch::autograd::variable_list> recompute(
      const torch::autograd::variable_list& saved) {
    torch::autograd::variable_list in;
    for (const auto& t : saved)
      in.push_back(t.detach().requires_grad_(t.requires_grad()));
    at::AutoGradMode grad(true);
    const auto found = rng ? rng->swapIn() : c10::make_intrusive<RngStates>();
    torch::autograd::variable_list outs;
    try {
      outs = flatten(run(in), /*learn=*/false);
    } catch (...) {
      found->swapIn();
      throw;
    }
    found->swapIn();
    return {std::move(in), std::move(outs)};
  }

  // Before the closing op's backward: the lighter run again, its dropped outputs filled back
  // (Note [Refilling by sharing]).
  void refill() {
    if (refilled)
      return;
    refilled = true;
    again = recompute(kept);
    kept.clear();
    at::NoGradGuard noGrad;
    for (const Dropped& d : dropped) {
      c10::StorageImpl* storage = d.storage.get();
      const at::Tensor& made = again->second[d.flat];
      if (storage->nbytes() != d.nbytes) {  // else two outputs share it, filled already
        if (sameLayout(d, made)) {
          storage->set_data_ptr_noswap(sharedDataPtr(made.storage()));
          storage->set_nbytes(d.nbytes);
          continue;
        }
        storage->set_data_ptr_noswap(storage->allocator()->allocate(d.nbytes));
        storage->set_nbytes(d.nbytes);
      } else if (made.has_storage() && made.storage().data() == storage->data()) {
        continue;  // its memory is the recomputed storage's already
      }
      at::empty({0}, d.options)
          .set_(c10::Storage(d.storage), d.offset, d.sizes, d.strides)
          .copy_(made.detach());
    }
  }

  // Note [Refilling by sharing]
  // The recomputation's output lives on until the run's own backward (its graph saves it: a
  // ReLU keeps what it returns), and the closing op's backward comes first: copying it into the
  // freed storage would hold the tensor twice just where the step peaks, in the backward (on the
  // early-exit network a stage's convolution backward peaked 1.6 MB higher for it). Where the
  // recomputed tensor lies in its storage exactly as the freed one did — same bytes, offset and
  // strides, which the same ops on the same shapes give — the freed storage takes the
  // recomputed storage's memory instead: a data pointer whose context holds a reference to that
  // storage, so the memory goes when the last of the two lets go. Nothing writes either in the
  // backward (a saved tensor is read, and its version was checked when it was saved). Otherwise
  // (a layout that differs) it is copied.
  static bool sameLayout(const Dropped& d, const at::Tensor& made) {
    return made.defined() && made.has_storage() && made.storage().nbytes() == d.nbytes &&
           made.storage_offset() == d.offset && made.sizes().vec() == d.sizes &&
           made.strides().vec() == d.strides && made.dtype() == d.options.dtype() &&
           made.device() == d.options.device() && made.storage().data() != nullptr;
  }

  static at::DataPtr sharedDataPtr(const c10::Storage& owner) {
    auto* hold = new c10::Storage(owner);
    return at::DataPtr(
        const_cast<void*>(owner.data()), hold,
        [](void* ctx) { delete static_cast<c10::Storage*>(ctx); }, owner.device());
  }

  std::vector<c10::IValue> run(const torch::autograd::variable_list& tensors) {
    std::vector<c10::IValue> in = inputs;
    for (size_t i = 0; i < in.size(); ++i) {
      if (tensorSlot[i] >= 0)
        in[i] = tensors[static_cast<size_t>(tensorSlot[i])];
    }
    if (caller != nullptr) {
      SyMuGen::Evaluator* first = caller;
      caller = nullptr;  // the backward must not reach an evaluator that has gone
      return first->runSpan(*span, in);
    }
    Graph unused;
    SyMuGen::Evaluator eval(*gen, unused, /*record=*/false);
    eval.setBinder(binder);
    eval.setLoops(loops);
    eval.setRecomputing(true);
    return eval.runSpan(*span, in);
  }

  torch::autograd::variable_list flatten(const std::vector<c10::IValue>& outs, bool learn) {
    torch::autograd::variable_list flat;
    if (learn)
      layout.clear();
    for (size_t i = 0; i < outs.size(); ++i) {
      const c10::IValue& value = outs[i];
      Output o;
      o.first = flat.size();
      // A parameter read in the span passes as itself, not as the function's output: made one, it
      // would take the function as its history.
      const bool attribute =
          i < span->outputs.size() && span->outputs[i]->node()->kind() == c10::prim::GetAttr;
      if (attribute) {
        o.other = value;
      } else if (value.isTensor() && value.toTensor().defined()) {
        o.kind = Output::Tensor;
        flat.push_back(value.toTensor());
      } else if (value.isTuple() && allTensors(value.toTupleRef().elements())) {
        o.kind = Output::Tuple;
        if (const auto type = value.toTupleRef().type(); type->name())
          o.tupleType = type;
        for (const auto& item : value.toTupleRef().elements())
          flat.push_back(item.toTensor());
      } else if (value.isList() && allTensors(value.toListRef())) {
        o.kind = Output::List;
        o.elementType = value.toList().elementType();
        for (const auto& item : value.toListRef())
          flat.push_back(item.toTensor());
      } else {
        o.other = value;
      }
      o.count = flat.size() - o.first;
      if (learn)
        layout.push_back(std::move(o));
    }
    return flat;
  }

  std::vector<c10::IValue> unflatten(const torch::autograd::variable_list& flat) const {
    std::vector<c10::IValue> outs;
    for (const auto& o : layout) {
      const auto items = c10::ArrayRef<at::Tensor>(flat).slice(o.first, o.count);
      switch (o.kind) {
        case Output::Tensor:
          outs.emplace_back(items[0]);
          break;
        case Output::Tuple:
          outs.emplace_back(
              o.tupleType ? c10::ivalue::Tuple::createNamed(
                                std::vector<c10::IValue>(items.begin(), items.end()), o.tupleType)
                          : c10::ivalue::Tuple::create(
                                std::vector<c10::IValue>(items.begin(), items.end())));
          break;
        case Output::List: {
          c10::impl::GenericList list(o.elementType);
          for (const auto& t : items)
            list.push_back(t);
          outs.emplace_back(std::move(list));
          break;
        }
        case Output::Other:
          outs.push_back(o.other);
          break;
      }
    }
    return outs;
  }
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // `tensors`: the span's tensor inputs, then a grad-requiring placeholder so that the outputs
  // require grad even when no input does (the span's parameters are not inputs).
  // (A TensorList, not a vector: only a TensorList's tensors count as the function's inputs.)
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList inputs,
                                                c10::intrusive_ptr<SpanRun> run) {
    torch::autograd::variable_list tensors = inputs.vec();
    tensors.pop_back();
    ctx->save_for_backward(tensors);
    if (run->span->draws)
      run->rng = RngStates::take(tensors);
    auto outs = run->flatten(run->run(tensors), /*learn=*/true);
    ctx->saved_data["run"] = c10::IValue::make_capsule(run);
    return outs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto run = c10::static_intrusive_pointer_cast<SpanRun>(ctx->saved_data["run"].toCapsule());
    // A lighter run whose closing op's backward has run is recomputed already.
    auto [inputs, outs] =
        run->again ? std::move(*run->again) : run->recompute(ctx->get_saved_variables());
    run->again.reset();
    // From the outputs' graph edges, the outputs themselves let go first: what the recomputed
    // graph does not save goes as the plain backward lets it go, not at the end of this one.
    torch::autograd::edge_list roots;
    torch::autograd::variable_list rootGrads;
    for (size_t i = 0; i < outs.size() && i < grads.size(); ++i) {
      if (outs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(torch::autograd::impl::gradient_edge(outs[i]));
        rootGrads.push_back(grads[i]);
      }
    }
    outs.clear();
    if (!roots.empty()) {
      torch::autograd::Engine::get_default_engine().execute(roots, rootGrads, /*keep_graph=*/false,
                                                            /*create_graph=*/false,
                                                            /*accumulate_grad=*/true);
    }
    torch::autograd::variable_list result;
    for (const auto& in : inputs)
      result.push_back(in.requires_grad() ? in.grad() : at::Tensor());
    result.emplace_back();  // the placeholder
    result.emplace_back();  // `run`, not a tensor
    return result;
  }
};

}  // namespace

namespace {

// Which of a lighter run's dropped outputs can be freed; false when none.
bool holdDropped(const SyMuGen::CheckpointSpan& span, SpanRun& run,
                 const torch::autograd::variable_list& outs, torch::autograd::variable_list tensors,
                 const std::vector<SeenStorage>& parameters) {
  std::unordered_set<const c10::StorageImpl*> keep;
  for (const auto& s : parameters)
    keep.insert(s.unsafeGetStorageImpl());
  for (const auto& t : tensors) {
    if (t.has_storage())
      keep.insert(t.storage().unsafeGetStorageImpl());
  }
  // Tensors the span reads inside a list or a tuple: an op that returns its input as it is
  // (`contiguous` of a contiguous tensor) would hand one on as its output.
  std::function<void(const c10::IValue&)> keepHeld = [&](const c10::IValue& value) {
    if (value.isTensor() && value.toTensor().defined() && value.toTensor().has_storage()) {
      keep.insert(value.toTensor().storage().unsafeGetStorageImpl());
    } else if (value.isTuple()) {
      for (const auto& item : value.toTupleRef().elements())
        keepHeld(item);
    } else if (value.isList()) {
      for (const auto& item : value.toListRef())
        keepHeld(item);
    }
  };
  for (const auto& value : run.inputs)
    keepHeld(value);
  std::vector<size_t> candidates;
  for (size_t i = 0; i < span.outputs.size(); ++i) {
    const bool dropped =
        std::find(span.dropped.begin(), span.dropped.end(), span.outputs[i]) != span.dropped.end();
    const SpanRun::Output& o = run.layout[i];
    if (dropped && o.kind == SpanRun::Output::Tensor) {
      candidates.push_back(o.first);
    } else {
      for (size_t k = o.first; k < o.first + o.count; ++k) {
        if (outs[k].has_storage())
          keep.insert(outs[k].storage().unsafeGetStorageImpl());
      }
    }
  }
  for (const size_t flat : candidates) {
    const at::Tensor& t = outs[flat];
    if (!t.has_storage() || keep.count(t.storage().unsafeGetStorageImpl()) > 0 ||
        t.storage().allocator() == nullptr)
      continue;
    SpanRun::Dropped d;
    d.storage =
        c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(t.storage().unsafeGetStorageImpl());
    d.nbytes = t.storage().nbytes();
    d.options = t.options();
    d.offset = t.storage_offset();
    d.sizes = t.sizes().vec();
    d.strides = t.strides().vec();
    d.flat = flat;
    run.dropped.push_back(std::move(d));
  }
  if (run.dropped.empty())
    return false;
  run.kept = std::move(tensors);
  return true;
}

// Once the closing op has run (`made`: its outputs): frees the dropped storages and hooks the
// refill on the op's outputs that carry a gradient back.
std::function<void(const std::vector<at::Tensor>&)> releaser(c10::intrusive_ptr<SpanRun> run) {
  return [run = std::move(run)](const std::vector<at::Tensor>& made) {
    std::vector<const at::Tensor*> carriers;
    for (const auto& t : made) {
      if (t.defined() && t.requires_grad())
        carriers.push_back(&t);
      for (const auto& d : run->dropped) {
        if (t.defined() && t.has_storage() && t.storage().unsafeGetStorageImpl() == d.storage.get())
          carriers.clear();  // the op's output is its input's storage: nothing to free
      }
    }
    if (carriers.empty()) {
      run->dropped.clear();
      run->kept.clear();
      return;
    }
    for (const at::Tensor* t : carriers)
      t->register_hook([run](const at::Tensor&) { run->refill(); });
    for (const auto& d : run->dropped) {
      c10::StorageImpl* storage = d.storage.get();
      if (storage->nbytes() == 0)
        continue;
      storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
      storage->set_nbytes(0);
    }
  };
}

}  // namespace

bool SyMuGen::Evaluator::runCheckpointed(const std::shared_ptr<const CheckpointSpan>& spanRef) {
  if (!at::GradMode::is_enabled())
    return false;
  const CheckpointSpan& span = *spanRef;
  auto run = c10::make_intrusive<SpanRun>();
  run->gen = &gen_;
  run->caller = this;
  run->binder = binder_;
  if (binder_ != nullptr)
    run->loops = loops_.tripsOnly();
  run->span = spanRef;
  torch::autograd::variable_list tensors;
  for (const Value* v : span.inputs) {
    const c10::IValue& value = valueOf(v);
    if (value.isTensor() && value.toTensor().defined()) {
      run->tensorSlot.push_back(static_cast<int>(tensors.size()));
      run->inputs.emplace_back();
      tensors.push_back(value.toTensor());
    } else {
      if (holdsGradTensor(value))
        return false;  // gradients could not flow back through it
      run->tensorSlot.push_back(-1);
      run->inputs.push_back(value);
    }
  }
  // A span that reads no parameter and no input that needs a gradient runs as usual: through
  // the function its outputs would need one.
  if (!span.readsAttributes && std::none_of(tensors.begin(), tensors.end(),
                                            [](const at::Tensor& t) { return t.requires_grad(); }))
    return false;
  tensors.push_back(torch::empty({0}, torch::requires_grad()));
  const auto outs = CheckpointFunction::apply(at::TensorList(tensors), run);
  const auto values = run->unflatten(outs);
  for (size_t i = 0; i < values.size(); ++i)
    env_[span.outputs[i]] = values[i];
  for (const Node* node = span.first;; node = node->next()) {
    dropDead(node);  // the span's inputs whose last reader was in it
    if (node == span.last)
      break;
  }
  if (span.consumer != nullptr) {
    tensors.pop_back();  // the placeholder
    if (holdDropped(span, *run, outs, std::move(tensors), parameterStorages()))
      pendingDrops_.emplace_back(span.consumer, releaser(run));
  }
  ++recomputed_;
  return true;
}

void SyMuGen::Evaluator::releaseDropped(const Node* node) {
  for (size_t i = 0; i < pendingDrops_.size();) {
    if (pendingDrops_[i].first != node) {
      ++i;
      continue;
    }
    std::vector<at::Tensor> made;
    for (const Value* v : node->outputs()) {
      const auto it = env_.find(v);
      if (it != env_.end() && it->second.isTensor())
        made.push_back(it->second.toTensor());
    }
    pendingDrops_[i].second(made);
    pendingDrops_.erase(pendingDrops_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

}  // namespace symtune
