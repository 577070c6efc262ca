// The fused optimizers against torch::optim: the same steps on the same gradients give the same
// parameters and state (shapes with odd sizes, size 1, several chunks, a non-contiguous
// parameter, a parameter without a gradient on some steps; float32, float64, bfloat16), save
// and load, clear errors — and 200 training steps of zoo models track torch::optim, on the CPU
// and on CUDA. CUDA rows run where a GPU is present and say why they skip where not.

#include "doctest_torch.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_rows.h"
#include "error_of.h"
#include "symtune/core/session.h"
#include "symtune/kernels/fused_optim.h"
#include "symtune/kernels/fused_optimizers.h"
#include "symtune/kernels/grad_clip.h"
#include "symtune/runtime/trainer.h"
#include "tensor_compare.h"

using torch::optim::Optimizer;

namespace {

enum class Kind { Adam, AdamW, Sgd, SgdMomentum, SgdNesterov };

struct Pair {
  std::unique_ptr<Optimizer> reference, fused;
};

Pair makePair(Kind kind, const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
              double weightDecay) {
  using namespace torch::optim;
  switch (kind) {
    case Kind::Adam:
      return {std::make_unique<Adam>(a, AdamOptions(1e-2).weight_decay(weightDecay)),
              std::make_unique<symtune::optim::FusedAdam>(
                  b, AdamOptions(1e-2).weight_decay(weightDecay))};
    case Kind::AdamW:
      return {std::make_unique<AdamW>(a, AdamWOptions(1e-2).weight_decay(weightDecay)),
              std::make_unique<symtune::optim::FusedAdamW>(
                  b, AdamWOptions(1e-2).weight_decay(weightDecay))};
    case Kind::Sgd:
      return {
          std::make_unique<SGD>(a, SGDOptions(0.1).weight_decay(weightDecay)),
          std::make_unique<symtune::optim::FusedSGD>(b, SGDOptions(0.1).weight_decay(weightDecay))};
    case Kind::SgdMomentum:
      return {std::make_unique<SGD>(
                  a, SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(weightDecay)),
              std::make_unique<symtune::optim::FusedSGD>(
                  b, SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(weightDecay))};
    case Kind::SgdNesterov:
      return {std::make_unique<SGD>(
                  a, SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(weightDecay)),
              std::make_unique<symtune::optim::FusedSGD>(
                  b, SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(weightDecay))};
  }
  return {};
}

// Parameters of the shapes the kernels must handle: size 1, odd sizes, more than one chunk
// (32768 elements on the CPU, 16384 on CUDA), and a non-contiguous one (a transposed leaf).
std::vector<torch::Tensor> parameters(torch::Dtype dtype, torch::Device device) {
  torch::manual_seed(3);
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  std::vector<torch::Tensor> ps = {torch::randn({1}, opts), torch::randn({7}, opts),
                                   torch::randn({33, 17}, opts), torch::randn({70001}, opts),
                                   torch::randn({17, 33}, opts).t()};
  for (auto& p : ps)
    p.requires_grad_(true);
  return ps;
}

struct OptimRow {
  const char* optimizer;
  Kind kind;
  const char* dtypeName;
  torch::Dtype dtype;
  double weightDecay;
  double tolerance;
  // The type torch::optim runs in: the parameters' own, but float32 for float16, where its Adam
  // gives NaN (eps 1e-8 is 0 in half: a second moment that rounds to 0 divides by it).
  std::optional<torch::Dtype> reference = std::nullopt;
};

// Every optimizer in float32 and float64 with and without weight decay, and in bfloat16 and
// float16 (where the fused step computes in float32 and rounds what it stores to the type, while
// torch::optim computes in bfloat16, or float32 for float16: hence the wide tolerances).
std::vector<OptimRow> optimRows() {
  const std::pair<const char*, Kind> kinds[] = {{"adam", Kind::Adam},
                                                {"adamw", Kind::AdamW},
                                                {"sgd", Kind::Sgd},
                                                {"sgd momentum", Kind::SgdMomentum},
                                                {"sgd nesterov", Kind::SgdNesterov}};
  std::vector<OptimRow> rows;
  for (const auto& [name, kind] : kinds) {
    for (double wd : {0.0, 0.05}) {
      rows.push_back({name, kind, "float32", torch::kFloat32, wd, 1e-5});
      rows.push_back({name, kind, "float64", torch::kFloat64, wd, 1e-12});
    }
    rows.push_back({name, kind, "bfloat16", torch::kBFloat16, 0.01, 3e-2});
    rows.push_back({name, kind, "float16", torch::kHalf, 0.01, 4e-3, torch::kFloat32});
  }
  return rows;
}

void matchesTorchOptim(const OptimRow& row, const torch::Device& device) {
  INFO(device.str(), " ", row.optimizer, " ", row.dtypeName, " wd=", row.weightDecay);
  auto b = parameters(row.dtype, device);
  std::vector<torch::Tensor> a;
  for (const auto& p : b) {
    a.push_back(p.detach()
                    .to(row.reference.value_or(row.dtype), false, true, at::MemoryFormat::Preserve)
                    .requires_grad_(true));
  }
  REQUIRE(!b[4].is_contiguous());
  Pair pair = makePair(row.kind, a, b, row.weightDecay);
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      // Parameter 1 has no gradient on steps 2 and 3: it skips them, its step count lags.
      if (i == 1 && (step == 2 || step == 3)) {
        a[i].mutable_grad() = torch::Tensor();
        b[i].mutable_grad() = torch::Tensor();
        continue;
      }
      const auto g = torch::randn_like(b[i]);
      a[i].mutable_grad() = g.to(a[i].scalar_type());
      b[i].mutable_grad() = g.clone();
    }
    pair.reference->step();
    pair.fused->step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = symtune::test::scaledError(b[i], a[i]);
    INFO("parameter ", i, ": ", diff);
    CHECK(diff <= row.tolerance);
  }
  // The same state: step counts and moments (Adam), momentum buffers (SGD).
  auto& stateA = pair.reference->state();
  auto& stateB = pair.fused->state();
  REQUIRE(stateB.size() == stateA.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("state of parameter ", i);
    if (stateA.count(a[i].unsafeGetTensorImpl()) == 0)
      continue;
    auto& sa = *stateA.at(a[i].unsafeGetTensorImpl());
    auto& sb = *stateB.at(b[i].unsafeGetTensorImpl());
    if (auto* adamA = dynamic_cast<torch::optim::AdamParamState*>(&sa)) {
      auto& adamB = dynamic_cast<torch::optim::AdamParamState&>(sb);
      CHECK(adamB.step() == adamA->step());
      CHECK(symtune::test::scaledError(adamB.exp_avg_sq(), adamA->exp_avg_sq()) <= row.tolerance);
    } else if (auto* wA = dynamic_cast<torch::optim::AdamWParamState*>(&sa)) {
      auto& wB = dynamic_cast<torch::optim::AdamWParamState&>(sb);
      CHECK(wB.step() == wA->step());
      CHECK(symtune::test::scaledError(wB.exp_avg(), wA->exp_avg()) <= row.tolerance);
    } else {
      auto& sgdA = dynamic_cast<torch::optim::SGDParamState&>(sa);
      auto& sgdB = dynamic_cast<torch::optim::SGDParamState&>(sb);
      CHECK(symtune::test::scaledError(sgdB.momentum_buffer(), sgdA.momentum_buffer()) <=
            row.tolerance);
    }
  }
}

struct TrackingRow {
  const char* name;
  const char* zoo;
  const char* optimizer;
};
const TrackingRow kTrackingRows[] = {{"dynamic_resnet, adamw", "dynamic_resnet", "adamw"},
                                     {"transformer_xl, adam", "transformer_xl", "adam"},
                                     {"moe_topk, sgd momentum", "moe_topk", "sgd"}};

// 200 steps of zoo models: one trainer with torch::optim, one with the fused step, the same
// data. Rounding differences compound through training, by how much depends on the model: a
// third trainer, torch::optim's with every parameter element perturbed after every step by a
// rounding-sized relative amount (uniform in ±2^-24, a fixed seed), measures it. The fused
// trainer must stay within 1e-5 of torch::optim's, or within 4× what that perturbation causes
// on a model that amplifies rounding: the dynamic ResNet's data-dependent branches make it
// chaotic, so there two valid roundings part completely within 200 steps and only the
// comparison with the perturbed run says anything.
void tracksTorchOptim(const TrackingRow& row, const std::string& device) {
  INFO(device, " ", row.name);
  auto session = [&](bool fused) {
    symtune::Session s;
    s.name = "fused";
    s.model.zoo = row.zoo;
    s.model.preset = "ci";
    s.optimizer.name = row.optimizer;
    s.optimizer.weightDecay = 1e-4;
    if (s.optimizer.name == "sgd") {
      s.optimizer.lr = 0.05;
      s.optimizer.momentum = 0.9;
    }
    s.optimizer.fused = fused;
    s.run.device = device;
    s.run.threads = 1;
    // Bit-for-bit candidates only: three trainers' binders measure apart and could choose
    // differently between candidates that round differently (bn-relu, channels-last), which
    // the ResNet's branches would amplify past what the optimizers' rounding does.
    s.binding.exact = true;
    return s;
  };
  symtune::Trainer reference(session(false)), fused(session(true)), perturbed(session(false));
  auto parametersOf = [](symtune::Trainer& t) {
    return t.optimizer().inner().param_groups().front().params();
  };
  // The perturbations are drawn on the CPU from one seeded generator whatever the device, so
  // that a CUDA run is perturbed by the same amounts as a CPU run.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(2024);
  double lossGap = 0;
  for (int step = 0; step < 200; ++step) {
    const double a = reference.step().loss, b = fused.step().loss;
    perturbed.step();
    torch::NoGradGuard noGrad;
    for (auto& p : parametersOf(perturbed)) {
      const auto uniform = at::rand(p.sizes(), generator, p.options().device(torch::kCPU));
      p.mul_(1 + std::ldexp(1.0, -24) * (2 * uniform.to(p.device()) - 1));
    }
    lossGap = std::max(lossGap, std::abs(a - b) / std::max(std::abs(a), 1e-6));
  }
  // The largest per-tensor difference against the tensor's scale: its largest entry, or ten
  // learning-rate steps where that is larger. Adam moves an element by about lr a step
  // whatever the gradient's size, so an element that starts at zero (a norm's bias) and sees
  // only rounding-sized gradients takes lr-sized steps whose sign is the rounding's: there a
  // few lr of difference is rounding too.
  const double lr = session(false).optimizer.lr;
  auto distance = [&](symtune::Trainer& other) {
    const auto pa = parametersOf(reference), pb = parametersOf(other);
    double worst = 0;
    for (size_t i = 0; i < pa.size(); ++i) {
      const double scale = std::max(pa[i].abs().max().item<double>(), 10 * lr);
      worst = std::max(worst, (pb[i] - pa[i]).abs().max().item<double>() / scale);
    }
    return worst;
  };
  const double fusedDistance = distance(fused), perturbedDistance = distance(perturbed);
  MESSAGE(device, " ", row.name, ": after 200 steps, max relative parameter difference ",
          fusedDistance, " (rounding-sized perturbations of torch::optim's: ", perturbedDistance,
          "); largest relative loss gap ", lossGap);
  const double tolerance = std::max(1e-5, 4 * perturbedDistance);
  INFO("fused distance ", fusedDistance, ", tolerance ", tolerance);
  CHECK(fusedDistance <= tolerance);
}

}  // namespace

TEST_CASE("the fused steps match torch::optim's on the CPU: parameters and state") {
  for (const OptimRow& row : optimRows())
    matchesTorchOptim(row, torch::kCPU);
}

TEST_CASE("the fused steps match torch::optim's on CUDA: parameters and state") {
  if (!symtune::test::cudaRowsRun())
    return;
  for (const OptimRow& row : optimRows())
    matchesTorchOptim(row, torch::Device(torch::kCUDA, 0));
}

// Saved and loaded like torch::optim's: a restored optimizer continues where it left off.
TEST_CASE("a saved and loaded optimizer continues the run") {
  auto ps = parameters(torch::kFloat32, torch::kCPU);
  symtune::optim::FusedAdamW first(ps, torch::optim::AdamWOptions(1e-2));
  for (auto& p : ps)
    p.mutable_grad() = torch::ones_like(p);
  first.step();
  torch::serialize::OutputArchive out;
  first.save(out);
  std::stringstream bytes;
  out.save_to(bytes);

  std::vector<torch::Tensor> copies;
  for (const auto& p : ps)
    copies.push_back(p.detach().clone().requires_grad_(true));
  symtune::optim::FusedAdamW second(copies, torch::optim::AdamWOptions(1e-2));
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  second.load(in);
  for (size_t i = 0; i < ps.size(); ++i)
    copies[i].mutable_grad() = torch::ones_like(copies[i]);
  first.step();
  second.step();
  for (size_t i = 0; i < ps.size(); ++i) {
    INFO("parameter ", i);
    CHECK(torch::equal(copies[i].detach(), ps[i].detach()));
  }
}

// Written through raw pointers, the parameters' versions still move: a CUDA graph's static copy
// of a weight is refreshed by its version (it kept the first step's weights for good).
TEST_CASE("a fused step moves the version of every tensor it writes") {
  auto ps = parameters(torch::kFloat32, torch::kCPU);
  symtune::optim::FusedAdamW adam(ps, torch::optim::AdamWOptions(1e-2));
  for (auto& p : ps)
    p.mutable_grad() = torch::ones_like(p);
  std::vector<uint32_t> before;
  for (const auto& p : ps)
    before.push_back(p._version());
  adam.step();
  for (size_t i = 0; i < ps.size(); ++i) {
    INFO("parameter ", i);
    CHECK(ps[i]._version() > before[i]);
  }
  const auto grad = ps[0].grad();
  const uint32_t gradBefore = grad._version();
  symtune::kernels::clipGradNorm_({grad}, 1e-3);
  CHECK(grad._version() > gradBefore);
}

// Note [In-place ops move versions] in kernels/src/written.h. Until 2026-12-07 only the C++
// wrappers moved the versions: the same ops called by name (TorchScript's
// torch.ops.symtune.fused_adam_, the dispatcher from C++) left every tensor they wrote at its old
// version, and autograd or a CUDA graph's static copy took the old values for current.
TEST_CASE("the in-place operators called by name move the version of every tensor they write") {
  auto& dispatcher = c10::Dispatcher::singleton();
  const auto versionsOf = [](const std::vector<at::Tensor>& ts) {
    std::vector<uint32_t> v;
    for (const auto& t : ts)
      v.push_back(t._version());
    return v;
  };
  const auto moved = [&](const char* what, const std::vector<at::Tensor>& ts,
                         const std::vector<uint32_t>& before) {
    for (size_t i = 0; i < ts.size(); ++i) {
      INFO(what, " ", i);
      CHECK(ts[i]._version() > before[i]);
    }
  };
  const std::vector<at::Tensor> grads{torch::ones({3}), torch::full({5}, 2.0)};
  const auto fresh = [] { return std::vector<at::Tensor>{torch::zeros({3}), torch::zeros({5})}; };
  {
    static const auto adam =
        dispatcher.findSchemaOrThrow("symtune::fused_adam_", "")
            .typed<void(at::TensorList, at::TensorList, at::TensorList, at::TensorList,
                        c10::IntArrayRef, double, double, double, double, double, bool)>();
    const auto params = fresh(), expAvgs = fresh(), expAvgSqs = fresh();
    const auto p0 = versionsOf(params), m0 = versionsOf(expAvgs), v0 = versionsOf(expAvgSqs);
    const auto g0 = versionsOf(grads);
    adam.call(params, grads, expAvgs, expAvgSqs, std::vector<int64_t>{1, 1}, 1e-3, 0.9, 0.999, 1e-8,
              0.0, true);
    moved("fused_adam_ parameter", params, p0);
    moved("fused_adam_ exp_avg", expAvgs, m0);
    moved("fused_adam_ exp_avg_sq", expAvgSqs, v0);
    CHECK(versionsOf(grads) == g0);  // read, not written
  }
  {
    static const auto sgd =
        dispatcher.findSchemaOrThrow("symtune::fused_sgd_", "")
            .typed<void(at::TensorList, at::TensorList, at::TensorList, c10::IntArrayRef, double,
                        double, double, double, bool)>();
    const auto params = fresh(), buffers = fresh();
    const auto p0 = versionsOf(params), b0 = versionsOf(buffers);
    sgd.call(params, grads, buffers, std::vector<int64_t>{1, 1}, 0.1, 0.9, 0.0, 0.0, false);
    moved("fused_sgd_ parameter", params, p0);
    moved("fused_sgd_ momentum buffer", buffers, b0);
  }
  {
    static const auto rmsClamp =
        dispatcher.findSchemaOrThrow("symtune::rms_clamp_", "").typed<at::Tensor(at::TensorList)>();
    const std::vector<at::Tensor> gs{torch::randn({7}), torch::randn({9})};
    const auto g0 = versionsOf(gs);
    const at::Tensor rms = rmsClamp.call(gs);
    CHECK(rms.numel() == 2);
    moved("rms_clamp_ gradient", gs, g0);
  }
  {
    static const auto clip = dispatcher.findSchemaOrThrow("symtune::clip_grad_norm_", "")
                                 .typed<at::Tensor(at::TensorList, double)>();
    const std::vector<at::Tensor> gs{torch::full({7}, 10.0), torch::full({9}, 10.0)};
    const auto g0 = versionsOf(gs);
    const at::Tensor norm = clip.call(gs, 1.0);
    CHECK(norm.item<double>() > 1.0);  // clipped, so written
    moved("clip_grad_norm_ gradient", gs, g0);
    // What autograd saved before the clip is seen to have changed.
    auto w = torch::full({7}, 10.0).requires_grad_(true);
    const auto loss = (w * w).sum();
    const std::vector<at::Tensor> ws{w};
    {
      torch::NoGradGuard noGrad;
      const at::Tensor again = clip.call(ws, 1.0);
      CHECK(again.item<double>() > 1.0);
    }
    const std::string error = symtune::test::errorOf([&] { loss.backward(); });
    INFO(error);
    CHECK(error.find("modified by an inplace operation") != std::string::npos);
  }
}

TEST_CASE("what the fused steps do not support is refused") {
  auto ps = parameters(torch::kFloat32, torch::kCPU);
  const std::string amsgrad = symtune::test::errorOf(
      [&] { symtune::optim::FusedAdam(ps, torch::optim::AdamOptions().amsgrad(true)); });
  INFO(amsgrad);
  CHECK(amsgrad.find("amsgrad is not supported") != std::string::npos);
  const std::string mismatch = symtune::test::errorOf(
      [&] { symtune::kernels::fusedAdam_({ps[0]}, {ps[1]}, {ps[0]}, {ps[0]}, {1}, {}); });
  INFO(mismatch);
  CHECK(mismatch.find("tensor 0 has shape [7], its parameter [1]") != std::string::npos);
  // The operator as TorchScript calls it, past the C++ wrapper: one gradient for two parameters
  // sent the kernel past the end of the list (a segfault).
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("symtune::fused_adam_", "")
          .typed<void(at::TensorList, at::TensorList, at::TensorList, at::TensorList,
                      c10::IntArrayRef, double, double, double, double, double, bool)>();
  const auto p = torch::zeros({3}), q = torch::zeros({3});
  const std::vector<at::Tensor> two{p, q}, one{p};
  const std::string shortList = symtune::test::errorOf([&] {
    op.call(two, one, two, two, std::vector<int64_t>{1, 1}, 1e-3, 0.9, 0.999, 1e-8, 0.0, true);
  });
  INFO(shortList);
  CHECK(shortList.find("symtune::fused_adam_: 2 parameters but 1 tensors in another list") !=
        std::string::npos);
}

TEST_CASE("the fused step tracks torch::optim over 200 training steps on the CPU") {
  for (const TrackingRow& row : kTrackingRows)
    tracksTorchOptim(row, "cpu");
}

TEST_CASE("the fused step tracks torch::optim over 200 training steps on CUDA") {
  if (!symtune::test::cudaRowsRun())
    return;
  for (const TrackingRow& row : kTrackingRows)
    tracksTorchOptim(row, "cuda");
}
