#include "symtune/binding/cuda_graph.h"

#include <atomic>
#include <cstdint>

namespace symtune::binding {
namespace {
std::atomic<uint64_t> forwards{0};
}  // namespace

void newForward() {
  forwards.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace symtune::binding

#ifdef SYMTUNE_HAVE_TORCH_CUDA

#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "symtune/binding/padding.h"
#include "symtune/binding/shape_bucket.h"
#include "symtune/telemetry/op_tracer.h"

namespace symtune::binding {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The name a graph's replay runs under, so that the profilers give its kernels to an op (they
// were left unattributed, the graphed site without device time).
constexpr const char* kReplay = "symtune::cuda_graph_replay";

// A CUDA graph that can let go of a capture that failed: the stream out of capture mode, the
// allocator's private pool closed and released, the generators it registered out of capture
// mode (what capture_end would have done for a capture that ended well).
struct Capture : at::cuda::CUDAGraph {
  void abandon() {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(capture_stream_.stream(), &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      cudaGraph_t dropped = nullptr;
      if (cudaStreamEndCapture(capture_stream_.stream(), &dropped) == cudaSuccess &&
          dropped != nullptr)
        cudaGraphDestroy(dropped);
    }
    (void)cudaGetLastError();
    if (capture_dev_ == UNDEFINED_DEVICE || capture_ended_)
      return;
    c10::cuda::CUDACachingAllocator::endAllocateToPool(capture_dev_, mempool_id_);
    c10::cuda::CUDACachingAllocator::releasePool(capture_dev_, mempool_id_);
    for (auto& [state, increment] : captured_generator_states_)
      state->capturing_ = false;
  }
};

// One padded shape of one site (Note [Graphed sites]).
struct GraphedShape : torch::CustomClassHolder {
  // The site's inputs as the graphs read them: tensors in static buffers of their own (padded
  // ones padded), other values as met.
  torch::jit::Stack statics;
  // Per tensor input, in stack order: its slot in `statics`, whether it is padded and with what,
  // whether it wants a gradient and (backward) that gradient's static buffer. An input that is
  // not padded (a weight, a bias) is copied in only when it is another tensor, or the same one
  // changed, since the last copy: once per step for a parameter a loop reads every trip.
  struct Tensor {
    size_t slot = 0;
    bool padded = false;
    c10::Scalar fill;
    bool wantsGrad = false;
    at::Tensor grad;
    // The tensor last copied in (weakly: a freed tensor's address may come back as another's),
    // its version then, and in which forward (newForward(): an update written through .data()
    // leaves the version as it was).
    c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> copiedFrom{
        at::Tensor().getIntrusivePtr()};  // none yet: the undefined tensor's
    uint32_t copiedVersion = 0;
    uint64_t copiedForward = 0;
    bool copied(const at::Tensor& in) const {
      return copiedFrom.lock().get() == in.unsafeGetTensorImpl() &&
             in._version() == copiedVersion &&
             copiedForward == forwards.load(std::memory_order_relaxed);
    }
    void note(const at::Tensor& in) {
      copiedFrom =
          c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(in.getIntrusivePtr());
      copiedVersion = in._version();
      copiedForward = forwards.load(std::memory_order_relaxed);
    }
  };
  std::vector<Tensor> tensors;
  int64_t rows = 0;  // padded rows
  bool outputRows = true;
  at::Tensor out, gradOut;
  Capture forward, backward;
  bool differentiable = false;

  // Puts an execution's inputs (the real ones, in `tensors` order) into the static buffers.
  void load(const std::vector<at::Tensor>& inputs, int64_t real) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      Tensor& t = tensors[i];
      at::Tensor s = statics[t.slot].toTensor();
      if (!t.padded) {
        const at::Tensor& in = inputs[i];
        if (!t.copied(in)) {
          s.copy_(in);
          t.note(in);
        }
        continue;
      }
      s.narrow(0, 0, real).copy_(inputs[i]);
      if (real < rows)
        s.narrow(0, real, rows - real).fill_(t.fill);
    }
  }
  at::Tensor cut(const at::Tensor& t, int64_t real, bool hasRows) const {
    return (hasRows ? t.narrow(0, 0, real) : t).clone();
  }
};

c10::intrusive_ptr<GraphedShape> shapeOf(AutogradContext* ctx) {
  auto* held = static_cast<GraphedShape*>(ctx->saved_data.at("shape").toCapsule().get());
  return c10::intrusive_ptr<GraphedShape>::unsafe_reclaim_from_nonowning(held);
}

// An execution with gradients: the forward graph's output, and a backward that replays the
// backward graph on the saved inputs.
struct GraphedFunction : torch::autograd::Function<GraphedFunction> {
  static at::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<GraphedShape> shape,
                            int64_t real, at::TensorList inputs) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["real"] = real;
    shape->load(inputs.vec(), real);
    RECORD_FUNCTION(kReplay, std::vector<c10::IValue>());
    shape->forward.replay();
    at::Tensor out = shape->cut(shape->out, real, shape->outputRows);
    ctx->saved_data["shape"] = c10::IValue::make_capsule(std::move(shape));
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto shape = shapeOf(ctx);
    const int64_t real = ctx->saved_data.at("real").toInt();
    const std::vector<at::Tensor> inputs = ctx->get_saved_variables();
    shape->load(inputs, real);
    if (!grads[0].defined()) {
      shape->gradOut.zero_();
    } else if (shape->outputRows) {
      shape->gradOut.narrow(0, 0, real).copy_(grads[0]);
      if (real < shape->rows)
        shape->gradOut.narrow(0, real, shape->rows - real).zero_();
    } else {
      shape->gradOut.copy_(grads[0]);
    }
    {
      RECORD_FUNCTION(kReplay, std::vector<c10::IValue>());
      shape->backward.replay();
    }
    variable_list out{at::Tensor(), at::Tensor()};  // the shape and the row count
    for (const auto& t : shape->tensors)
      out.push_back(t.grad.defined() ? shape->cut(t.grad, real, t.padded) : at::Tensor());
    return out;
  }
};

// "Float cuda:0 [128,768] g; 1; " — each input's dtype, device, sizes (padded), whether it wants
// a gradient; constants as written: what a capture depends on. nullopt for inputs no graph can
// take as constants (lists, objects).
std::optional<std::string> shapeKey(const torch::jit::Stack& stack, size_t base,
                                    const std::vector<bool>& isPadded, int64_t to, bool grad) {
  std::ostringstream key;
  size_t k = 0;
  for (size_t i = base; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      const bool pads = isPadded[k++];
      key << t.scalar_type() << " " << t.device() << " [";
      for (int64_t d = 0; d < t.dim(); ++d)
        key << (d > 0 ? "," : "") << (d == 0 && pads ? to : t.size(d));
      key << "]" << (grad && t.requires_grad() ? " g; " : "; ");
    } else if (v.isInt() || v.isDouble() || v.isBool() || v.isString() || v.isNone()) {
      key << v << "; ";
    } else {
      return std::nullopt;
    }
  }
  return key.str();
}

// One stream per device that captures run on (cuBLAS keeps a workspace per stream).
at::cuda::CUDAStream captureStream(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::unordered_map<c10::DeviceIndex, at::cuda::CUDAStream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(device);
  if (it == streams.end())
    it = streams.emplace(device, at::cuda::getStreamFromPool(false, device)).first;
  return it->second;
}

class CudaGraphed final : public Candidate {
 public:
  explicit CudaGraphed(std::shared_ptr<const Candidate> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return kCudaGraphPrefix + inner_->name(); }
  std::string description() const override {
    return inner_->description() + ", padded to the bucket's rows and replayed as CUDA graphs";
  }
  bool applies(const OpSite& site) const override {
    return inner_->applies(site) && rowPaddingOf(site).has_value();
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames& loops) const override;
  double tolerance() const override { return std::max(inner_->tolerance(), 1e-6); }
  bool cpuOnly() const override { return inner_->cpuOnly(); }

 private:
  struct SiteGraphs {
    std::unordered_map<std::string, c10::intrusive_ptr<GraphedShape>> shapes;
    std::string failure;  // set: this site runs `inner` without graphs
  };
  // The graphs of one padded shape: `padded` the site's inputs padded, `wantsGrad` per tensor
  // input whether the execution differentiates it (read from the inputs before the padding).
  c10::intrusive_ptr<GraphedShape> capture(const OpSite& site, torch::jit::Operation& op,
                                           const torch::jit::Stack& padded,
                                           const std::vector<bool>& isPadded,
                                           const std::vector<bool>& wantsGrad,
                                           const RowPadding& padding, int64_t to,
                                           LoopFrames& loops) const;
  void giveUp(SiteGraphs& graphs, const OpSite& site, const std::string& why) const {
    graphs.failure = why;
    graphs.shapes.clear();
    std::cerr << "symtune: " << name() << " runs " << site.name << " without a CUDA graph: " << why
              << "\n";
  }

  std::shared_ptr<const Candidate> inner_;
  mutable std::mutex mutex_;
  // By site name: a measurement's copy of the site shares its graphs.
  mutable std::unordered_map<std::string, SiteGraphs> sites_;
};

void CudaGraphed::run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
                      LoopFrames& loops) const {
  const auto padding = rowPaddingOf(site);
  const size_t arity = siteArity(site);
  const auto real = padding ? paddedRows(stack, arity, *padding) : std::nullopt;
  const size_t base = stack.size() - arity;
  // Every tensor defined and on one GPU; the output's rows must be known before the padding.
  std::optional<c10::Device> device;
  bool grad = false;
  std::vector<at::Tensor> tensors;
  std::vector<bool> isPadded, wantsGrad;
  for (size_t i = base; real && i < stack.size(); ++i) {
    if (!stack[i].isTensor())
      continue;
    const at::Tensor& t = stack[i].toTensor();
    if (!t.defined() || !t.is_cuda() || (device && t.device() != *device)) {
      device.reset();
      break;
    }
    device = t.device();
    wantsGrad.push_back(t.requires_grad() && at::GradMode::is_enabled());
    grad = grad || wantsGrad.back();
    tensors.push_back(t);
    bool pads = false;
    for (const auto& in : padding->inputs)
      pads = pads || in.index == i - base;
    isPadded.push_back(pads);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  SiteGraphs& graphs = sites_[site.name];
  if (!real || !device || !graphs.failure.empty()) {
    lock.unlock();
    inner_->run(site, op, stack, loops);
    return;
  }
  const int64_t to = bucketDim(*real);
  const auto key = shapeKey(stack, base, isPadded, to, grad);
  if (!key) {
    giveUp(graphs, site, "an input is neither a tensor nor a constant");
    lock.unlock();
    inner_->run(site, op, stack, loops);
    return;
  }
  auto found = graphs.shapes.find(*key);
  if (found == graphs.shapes.end()) {
    if (static_cast<int>(graphs.shapes.size()) >= kMaxGraphedShapes) {
      giveUp(graphs, site, "more than " + std::to_string(kMaxGraphedShapes) + " shapes");
      lock.unlock();
      inner_->run(site, op, stack, loops);
      return;
    }
    c10::intrusive_ptr<GraphedShape> shape;
    try {
      torch::jit::Stack padded(stack.begin() + static_cast<std::ptrdiff_t>(base), stack.end());
      {
        at::NoGradGuard plain;  // the static buffers are not part of anyone's autograd graph
        padRows(padded, arity, *padding, *real, to);
      }
      shape = capture(site, op, padded, isPadded, wantsGrad, *padding, to, loops);
    } catch (const std::exception& e) {
      giveUp(graphs, site, std::string(e.what()).substr(0, std::string(e.what()).find('\n')));
      lock.unlock();
      inner_->run(site, op, stack, loops);
      return;
    }
    found = graphs.shapes.emplace(*key, std::move(shape)).first;
  }
  c10::intrusive_ptr<GraphedShape> shape = found->second;
  lock.unlock();
  at::Tensor out;
  if (grad && shape->differentiable) {
    out = GraphedFunction::apply(shape, *real, at::TensorList(tensors));
  } else {
    shape->load(tensors, *real);
    RECORD_FUNCTION(kReplay, std::vector<c10::IValue>());
    shape->forward.replay();
    out = shape->cut(shape->out, *real, shape->outputRows);
  }
  stack.resize(base);
  stack.emplace_back(std::move(out));
}

c10::intrusive_ptr<GraphedShape> CudaGraphed::capture(const OpSite& site, torch::jit::Operation& op,
                                                      const torch::jit::Stack& padded,
                                                      const std::vector<bool>& isPadded,
                                                      const std::vector<bool>& wantsGrad,
                                                      const RowPadding& padding, int64_t to,
                                                      LoopFrames& loops) const {
  auto shape = c10::make_intrusive<GraphedShape>();
  shape->rows = to;
  shape->outputRows = padding.outputRows;
  bool differentiate = false;
  size_t k = 0;
  for (size_t i = 0; i < padded.size(); ++i) {
    c10::IValue v = padded[i];
    if (v.isTensor()) {
      GraphedShape::Tensor t;
      t.slot = i;
      t.padded = isPadded[k];
      t.wantsGrad = wantsGrad[k];
      differentiate = differentiate || t.wantsGrad;
      ++k;
      for (const auto& in : padding.inputs) {
        if (in.index == t.slot)
          t.fill = in.fill;
      }
      // Every tensor input gets a static buffer of its own (a padded input already at its
      // bucket's rows is the caller's tensor itself).
      const at::Tensor& real = v.toTensor();
      if (!t.padded)
        t.note(real);
      v = real.detach().clone();
      shape->tensors.push_back(t);
    }
    shape->statics.push_back(std::move(v));
  }
  // One run of the site on the static inputs: forward, and when differentiating its backward
  // into `grads` (against `gradOut`).
  const auto once = [&](bool backward, std::vector<at::Tensor>* grads) {
    torch::jit::Stack s = shape->statics;
    std::vector<at::Tensor> leaves;
    if (backward) {
      for (const auto& t : shape->tensors) {
        if (!t.wantsGrad)
          continue;
        at::Tensor leaf = s[t.slot].toTensor().detach().requires_grad_(true);
        s[t.slot] = leaf;
        leaves.push_back(leaf);
      }
    }
    at::AutoGradMode mode(backward);
    inner_->run(site, op, s, loops);
    at::Tensor out = s.back().toTensor();
    TORCH_CHECK(!shape->outputRows || (out.dim() >= 1 && out.size(0) == shape->rows),
                "the output does not have the padded inputs' rows");
    if (!backward)
      return out;
    TORCH_CHECK(out.requires_grad(), "the output does not depend on the inputs it differentiates");
    if (!shape->gradOut.defined())
      shape->gradOut = at::zeros_like(out);
    const auto g = torch::autograd::grad({out}, leaves, {shape->gradOut}, false, false, true);
    if (grads != nullptr)
      *grads = g;
    return out;
  };

  const c10::Device device = shape->statics[shape->tensors.front().slot].toTensor().device();
  c10::cuda::CUDAGuard guard(device);
  c10::cuda::device_synchronize();
  const at::cuda::CUDAStream side = captureStream(device.index());
  {
    c10::cuda::CUDAStreamGuard onSide(side);
    for (int i = 0; i < 2; ++i)  // cuBLAS handles, workspaces, the autograd device thread
      once(differentiate, nullptr);
    side.synchronize();
    const OpTracer::CudaCaptureScope untimed;
    Capture* capturing = nullptr;
    try {
      capturing = &shape->forward;
      shape->forward.capture_begin();
      shape->out = once(false, nullptr);
      shape->forward.capture_end();
      if (differentiate) {
        std::vector<at::Tensor> grads;
        capturing = &shape->backward;
        shape->backward.capture_begin();
        once(true, &grads);
        shape->backward.capture_end();
        size_t g = 0;
        for (auto& t : shape->tensors)
          t.grad = t.wantsGrad ? grads[g++] : at::Tensor();
        shape->differentiable = true;
      }
    } catch (...) {
      capturing->abandon();
      throw;
    }
  }
  c10::cuda::device_synchronize();
  return shape;
}

}  // namespace

bool cudaGraphsBuilt() {
  return true;
}

std::unique_ptr<Candidate> makeCudaGraphed(std::shared_ptr<const Candidate> inner) {
  return std::make_unique<CudaGraphed>(std::move(inner));
}

}  // namespace symtune::binding

#else

namespace symtune::binding {

bool cudaGraphsBuilt() {
  return false;
}

std::unique_ptr<Candidate> makeCudaGraphed(std::shared_ptr<const Candidate>) {
  return nullptr;
}

}  // namespace symtune::binding

#endif
