#include "symtune/kernels/fused_optimizers.h"

#include <torch/optim/serialize.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "symtune/kernels/fused_optim.h"

namespace symtune::optim {

namespace {

using Key = std::tuple<int, int, int>;  // device type, device index, dtype: one kernel call each

Key keyOf(const torch::Tensor& t) {
  return {static_cast<int>(t.device().type()), t.device().index(),
          static_cast<int>(t.scalar_type())};
}

// Zeroed state tensors for `params`, `perParam` of them each, as views into one flat buffer per
// device and dtype: result[i][k] is parameter i's k-th state tensor.
std::vector<std::vector<torch::Tensor>> flatState(const std::vector<torch::Tensor>& params,
                                                  int perParam) {
  std::vector<std::vector<torch::Tensor>> out(params.size());
  std::map<Key, std::vector<size_t>> byKey;
  for (size_t i = 0; i < params.size(); ++i)
    byKey[keyOf(params[i])].push_back(i);
  for (const auto& [key, indices] : byKey) {
    int64_t total = 0;
    for (size_t i : indices)
      total += params[i].numel();
    const torch::Tensor flat = torch::zeros({total * perParam}, params[indices.front()].options());
    int64_t offset = 0;
    for (size_t i : indices) {
      const int64_t n = params[i].numel();
      for (int k = 0; k < perParam; ++k)
        out[i].push_back(flat.narrow(0, k * total + offset, n).view(params[i].sizes()));
      offset += n;
    }
  }
  return out;
}

template <typename Options>
void checkAdamOptions(const Options& o) {
  TORCH_CHECK(o.lr() >= 0, "Invalid learning rate: ", o.lr());
  TORCH_CHECK(o.eps() >= 0, "Invalid epsilon value: ", o.eps());
  TORCH_CHECK(0 <= std::get<0>(o.betas()) && std::get<0>(o.betas()) < 1.0,
              "Invalid beta parameter at index 0: ", std::get<0>(o.betas()));
  TORCH_CHECK(0 <= std::get<1>(o.betas()) && std::get<1>(o.betas()) < 1.0,
              "Invalid beta parameter at index 1: ", std::get<1>(o.betas()));
  TORCH_CHECK(o.weight_decay() >= 0, "Invalid weight_decay value: ", o.weight_decay());
  TORCH_CHECK(!o.amsgrad(), "symtune::optim: amsgrad is not supported by the fused Adam");
}

// Adam and AdamW: the same step, weight decay coupled to the gradient or decoupled.
template <typename Options, typename State>
void adamStep(std::vector<torch::optim::OptimizerParamGroup>& groups,
              ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& state,
              bool decoupled) {
  for (auto& group : groups) {
    const auto& o = static_cast<const Options&>(group.options());
    checkAdamOptions(o);
    std::vector<torch::Tensor> fresh;
    for (const auto& p : group.params()) {
      if (!p.grad().defined())
        continue;
      TORCH_CHECK(!p.grad().is_sparse(), "symtune::optim: sparse gradients are not supported");
      if (state.find(p.unsafeGetTensorImpl()) == state.end())
        fresh.push_back(p);
    }
    const auto states = flatState(fresh, 2);
    for (size_t i = 0; i < fresh.size(); ++i) {
      auto s = std::make_unique<State>();
      s->exp_avg(states[i][0]);
      s->exp_avg_sq(states[i][1]);
      state[fresh[i].unsafeGetTensorImpl()] = std::move(s);
    }
    struct Lists {
      std::vector<torch::Tensor> params, grads, expAvgs, expAvgSqs;
      std::vector<int64_t> steps;
    };
    std::map<Key, Lists> calls;
    for (const auto& p : group.params()) {
      if (!p.grad().defined())
        continue;
      auto& s = static_cast<State&>(*state[p.unsafeGetTensorImpl()]);
      s.step(s.step() + 1);
      Lists& l = calls[keyOf(p)];
      l.params.push_back(p);
      l.grads.push_back(p.grad());
      l.expAvgs.push_back(s.exp_avg());
      l.expAvgSqs.push_back(s.exp_avg_sq());
      l.steps.push_back(s.step());
    }
    kernels::AdamHyper h;
    h.lr = o.lr();
    h.beta1 = std::get<0>(o.betas());
    h.beta2 = std::get<1>(o.betas());
    h.eps = o.eps();
    h.weightDecay = o.weight_decay();
    h.decoupled = decoupled;
    for (auto& [key, l] : calls)
      kernels::fusedAdam_(l.params, l.grads, l.expAvgs, l.expAvgSqs, l.steps, h);
  }
}

}  // namespace

template <typename Options, typename State, bool Decoupled>
FusedAdamStep<Options, State, Decoupled>::FusedAdamStep(
    const std::vector<torch::optim::OptimizerParamGroup>& groups, Options defaults)
    : Optimizer(groups, std::make_unique<Options>(defaults)) {
  checkAdamOptions(defaults);
}

template <typename Options, typename State, bool Decoupled>
torch::Tensor FusedAdamStep<Options, State, Decoupled>::step(LossClosure closure) {
  torch::NoGradGuard noGrad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable(true);
    loss = closure();
  }
  adamStep<Options, State>(param_groups_, state_, Decoupled);
  return loss;
}

template <typename Options, typename State, bool Decoupled>
void FusedAdamStep<Options, State, Decoupled>::save(
    torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<State, Options>(archive, *this);
}

template <typename Options, typename State, bool Decoupled>
void FusedAdamStep<Options, State, Decoupled>::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<State, Options>(archive, *this);
}

template class FusedAdamStep<torch::optim::AdamOptions, torch::optim::AdamParamState, false>;
template class FusedAdamStep<torch::optim::AdamWOptions, torch::optim::AdamWParamState, true>;

FusedSGD::FusedSGD(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                   torch::optim::SGDOptions defaults)
    : Optimizer(groups, std::make_unique<torch::optim::SGDOptions>(defaults)) {
  TORCH_CHECK(defaults.lr() >= 0, "Invalid learning rate: ", defaults.lr());
  TORCH_CHECK(defaults.momentum() >= 0, "Invalid momentum value: ", defaults.momentum());
  TORCH_CHECK(defaults.weight_decay() >= 0,
              "Invalid weight_decay value: ", defaults.weight_decay());
  TORCH_CHECK(!defaults.nesterov() || (defaults.momentum() > 0 && defaults.dampening() == 0),
              "Nesterov momentum requires a momentum and zero dampening");
}

torch::Tensor FusedSGD::step(LossClosure closure) {
  torch::NoGradGuard noGrad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    const bool momentum = o.momentum() != 0;
    std::vector<torch::Tensor> fresh;
    for (const auto& p : group.params()) {
      if (!p.grad().defined())
        continue;
      TORCH_CHECK(!p.grad().is_sparse(), "symtune::optim: sparse gradients are not supported");
      if (momentum && state_.find(p.unsafeGetTensorImpl()) == state_.end())
        fresh.push_back(p);
    }
    const auto buffers = flatState(fresh, 1);
    for (size_t i = 0; i < fresh.size(); ++i) {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(buffers[i][0]);
      state_[fresh[i].unsafeGetTensorImpl()] = std::move(s);
    }
    struct Lists {
      std::vector<torch::Tensor> params, grads, buffers;
      std::vector<bool> fresh;
    };
    std::map<Key, Lists> calls;
    size_t next = 0;  // fresh parameters come in group order
    for (const auto& p : group.params()) {
      if (!p.grad().defined())
        continue;
      Lists& l = calls[keyOf(p)];
      l.params.push_back(p);
      l.grads.push_back(p.grad());
      if (momentum) {
        auto& s = static_cast<torch::optim::SGDParamState&>(*state_[p.unsafeGetTensorImpl()]);
        l.buffers.push_back(s.momentum_buffer());
        const bool isFresh = next < fresh.size() && fresh[next].is_same(p);
        next += isFresh ? 1 : 0;
        l.fresh.push_back(isFresh);
      }
    }
    kernels::SgdHyper h;
    h.lr = o.lr();
    h.momentum = o.momentum();
    h.dampening = o.dampening();
    h.weightDecay = o.weight_decay();
    h.nesterov = o.nesterov();
    for (auto& [key, l] : calls)
      kernels::fusedSgd_(l.params, l.grads, l.buffers, l.fresh, h);
  }
  return loss;
}

void FusedSGD::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<torch::optim::SGDParamState, torch::optim::SGDOptions>(archive, *this);
}

void FusedSGD::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<torch::optim::SGDParamState, torch::optim::SGDOptions>(archive, *this);
}

}  // namespace symtune::optim
