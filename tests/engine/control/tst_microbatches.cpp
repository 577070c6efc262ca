// Micro-batches (Note [Micro-batches] in symtune/runtime/trainer.h): a batch split into
// micro-batches trains as the batch, a model that normalises over the batch is not split, a step no
// remat plan fits whole runs split under its budget (bound, it stays bound), a later micro-batch
// holds no second copy of the gradients, and the trainer's guards raise OptimizeRequired once per
// new shape bucket.

#include "doctest_torch.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "symtune/binding/binder.h"
#include "symtune/binding/shape_bucket.h"
#include "symtune/remat/rematerializer.h"
#include "symtune/runtime/loss.h"
#include "symtune/runtime/trainer.h"
#include "symtune/zoo/zoo_data.h"
#include "tensor_compare.h"

namespace {

struct TwoThreads {
  TwoThreads() { at::set_num_threads(2); }
};

// The ci preset, SGD (its update is the gradient scaled: parameters compare as gradients do),
// binding off (a micro-batch's bucket may bind another candidate).
symtune::Session sessionFor(const std::string& model, int microbatches = 1) {
  symtune::Session s;
  s.name = model;
  s.model.zoo = model;
  s.model.preset = "ci";
  s.data.seed = 11;
  s.binding.enabled = false;
  s.optimizer.name = "sgd";
  s.optimizer.lr = 0.05;
  if (microbatches > 1) {
    s.control.enabled = true;
    s.control.microbatches = microbatches;
  }
  return s;
}

std::vector<torch::Tensor> gradients(symtune::Trainer& t) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : t.executor().parameters()) {
    if (p.requires_grad())
      grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  }
  return grads;
}

// The tagger's session under 0.8 of the smallest budget its first step fits whole (as a run
// without a control block names it), with a control block: no plan fits the whole batch.
symtune::Session belowEveryWholePlan() {
  symtune::Session probe = sessionFor("dynamic_tagger");
  probe.remat.enabled = true;
  probe.remat.budgetMb = 0.01;
  double smallest = 0;
  try {
    symtune::Trainer(probe).step();
  } catch (const symtune::remat::RematInfeasible& e) {
    smallest = e.smallestFeasibleBytes();
  }
  REQUIRE(smallest > 0);  // a 10 kB budget did not train it
  probe.remat.budgetMb = 0.8 * smallest / 1e6;
  probe.control.enabled = true;
  return probe;
}

}  // namespace

TEST_CASE("a batch splits by sample into parts that differ by one at most") {
  symtune::Batch b;
  b.inputs = {torch::arange(8 * 3).view({8, 3}), c10::IValue(int64_t{5})};
  b.target = torch::arange(8 * 2);  // two positions per sample
  b.size = 8;
  const auto parts = symtune::splitBySample(b, 3);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].size == 3);
  CHECK(parts[1].size == 3);
  CHECK(parts[2].size == 2);
  CHECK(torch::equal(parts[1].inputs[0].toTensor(), torch::arange(9, 18).view({3, 3})));
  CHECK(parts[2].inputs[1].toInt() == 5);
  CHECK(torch::equal(parts[2].target, torch::arange(12, 16)));

  CHECK_THROWS_WITH_AS(symtune::splitBySample(b, 9),
                       "a batch of 8 samples cannot be split into 9 micro-batches",
                       symtune::SplitError);
  b.inputs.push_back(torch::zeros({5}));
  CHECK_THROWS_WITH_AS(symtune::splitBySample(b, 2),
                       "input 2 of shape [5] is not laid out by sample (its first dimension is "
                       "not the batch's 8)",
                       symtune::SplitError);
  CHECK(symtune::countedTargets(symtune::LossSpec{}, torch::tensor({3, -100, 1, -100})) == 2);
}

TEST_CASE("trees split into trees numbered from 0, sentences padded to their own longest") {
  symtune::RandomTrees trees(4, 6, {2, 7}, 3);
  const symtune::Batch whole = trees.batch(0);
  const auto parts = trees.split(whole, 4);
  REQUIRE(parts.size() == 4);
  std::vector<torch::Tensor> labels;
  int64_t nodes = 0, inner = 0;
  for (const auto& p : parts) {
    const auto tokens = p.inputs[0].toTensor();
    const auto order = p.inputs[3].toTensor();
    const auto levels = p.inputs[4].toIntVector();
    nodes += tokens.size(0);
    inner += order.size(0);
    int64_t sum = 0;
    for (int64_t n : levels) {
      CHECK(n > 0);
      sum += n;
    }
    CHECK(sum == order.size(0));
    CHECK(order.max().item<int64_t>() < tokens.size(0));
    CHECK(p.inputs[5].toTensor().max().item<int64_t>() == tokens.size(0) - 1);  // the last root
    // Inner nodes' children lie before them, in the part.
    const auto left = p.inputs[1].toTensor().index_select(0, order);
    CHECK((left < order).all().item<bool>());
    labels.push_back(p.target);
  }
  CHECK(nodes == whole.inputs[0].toTensor().size(0));
  CHECK(inner == whole.inputs[3].toTensor().size(0));
  CHECK(torch::equal(torch::cat(labels), whole.target));

  symtune::TaggedSentences sentences(50, 4, 8, {2, 12}, 3);
  const symtune::Batch padded = sentences.batch(1);
  for (const auto& p : sentences.split(padded, 3)) {
    const int64_t longest = p.inputs[1].toTensor().max().item<int64_t>();
    CHECK(p.inputs[0].toTensor().size(1) == longest);
    CHECK(p.target.numel() == p.size * longest);
  }
}

TEST_CASE_FIXTURE(TwoThreads, "micro-batches train as the batch on every model they can split") {
  for (const char* model : {"transformer_xl", "dynamic_tagger", "moe_topk", "tree_rnn"}) {
    for (int parts : {2, 3}) {
      INFO(std::string(model), " in ", parts, " micro-batches");
      symtune::Trainer whole(sessionFor(model));
      symtune::Trainer split(sessionFor(model, parts));
      for (int step = 0; step < 3; ++step) {
        INFO("step ", step);
        const symtune::StepResult a = whole.step(), b = split.step();
        CHECK(a.microbatches == 1);
        CHECK(b.microbatches == parts);
        CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-5));
        symtune::test::checkEach(gradients(split), gradients(whole), 1e-5, "gradients");
        // The step's gradient features are of the batch's gradients, not the last part's.
        using symtune::Feature;
        CHECK(b.features[Feature::GradGlobalNorm] ==
              doctest::Approx(a.features[Feature::GradGlobalNorm]).epsilon(1e-5));
        CHECK(b.features[Feature::ParamsWithoutGrad] == a.features[Feature::ParamsWithoutGrad]);
      }
      symtune::test::checkEach(split.executor().parameters(), whole.executor().parameters(), 1e-5,
                               "parameters");
    }
  }
}

TEST_CASE_FIXTURE(TwoThreads, "micro-batches run bound too") {
  symtune::Session bound = sessionFor("dynamic_tagger", 2);
  bound.binding.enabled = true;
  symtune::Trainer split(bound);
  symtune::Trainer whole(sessionFor("dynamic_tagger"));
  REQUIRE(split.binder() != nullptr);
  for (int step = 0; step < 3; ++step) {
    const symtune::StepResult a = whole.step(), b = split.step();
    CHECK(b.microbatches == 2);
    CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-4));
  }
}

TEST_CASE_FIXTURE(TwoThreads, "a model that normalises over the batch is not split") {
  for (const char* model : {"dynamic_resnet", "early_exit"}) {
    INFO(std::string(model));
    symtune::Trainer t(sessionFor(model));
    const symtune::control::ConfigSpace space = t.configSpace();
    const symtune::control::Knob* parts = space.knob("microbatches");
    REQUIRE(parts != nullptr);
    CHECK(parts->values == std::vector<double>{1});
    CHECK(parts->constraint.find("normalises over the batch (batch norm)") != std::string::npos);
    symtune::control::Configuration c;
    c.microbatches = 2;
    CHECK_THROWS_AS(t.configure(c), symtune::SetupError);
    CHECK_THROWS_WITH_AS(symtune::Trainer(sessionFor(model, 2)),
                         "control.microbatches 2: the model normalises over the batch (batch "
                         "norm): each micro-batch would have its own statistics",
                         symtune::SetupError);
  }
}

TEST_CASE_FIXTURE(TwoThreads, "a trainer's configuration space, and configuring a step") {
  symtune::Session s = sessionFor("dynamic_tagger");
  s.remat.enabled = true;
  s.remat.budgetFraction = 0.6;
  symtune::Trainer t(s);
  const symtune::control::ConfigSpace space = t.configSpace();
  const auto* parts = space.knob("microbatches");
  const auto* threads = space.knob("threads");
  const auto* budget = space.knob("remat_budget");
  REQUIRE(parts != nullptr);
  REQUIRE(threads != nullptr);
  REQUIRE(budget != nullptr);
  CHECK(parts->values == std::vector<double>{1, 2, 4, 8, 16});  // the ci tagger's 16 sentences
  CHECK(threads->current == 2);
  CHECK(budget->values == std::vector<double>{0.3, 0.4, 0.5, 0.6});
  CHECK(budget->current == 0.6);
  CHECK(space.grid().size() == parts->values.size() * threads->values.size() * 4);

  symtune::control::Configuration c;
  c.microbatches = 4;
  c.threads = 1;
  c.rematBudget = 0.5;
  t.configure(c);
  CHECK(at::get_num_threads() == 1);
  CHECK(t.configuration() == c);
  CHECK(t.configSpace().knob("remat_budget")->current == 0.5);
  // The first step calibrates the budget_fraction: on the CPU the batch runs whole, plain.
  const symtune::StepResult calibration = t.step();
  CHECK(calibration.microbatches == 1);
  CHECK(calibration.remat->plan.calibrating);
  const symtune::StepResult r = t.step();
  CHECK(r.microbatches == 4);
  REQUIRE(r.remat.has_value());
  CHECK(r.remat->peakBytes <= static_cast<double>(*r.remat->plan.limitBytes));
  // Another trainer in the process moved the intra-op pool (the harness interleaves them):
  // configured as it stands, the run takes its threads back.
  REQUIRE(t.configuration() == c);
  at::set_num_threads(2);
  t.configure(c);
  CHECK(at::get_num_threads() == 1);
  at::set_num_threads(2);
  c.rematBudget = 0.7;  // above the session's: the run's memory budget
  CHECK_THROWS_WITH_AS(t.configure(c),
                       "remat_budget 0.7 is not one of 0.3, 0.4, 0.5, 0.6 (at most the session's "
                       "budget_fraction 0.6: the run's memory budget)",
                       symtune::SetupError);
}

TEST_CASE_FIXTURE(TwoThreads,
                  "a step no remat plan fits whole runs split, under its budget, as the batch") {
  symtune::Trainer split(belowEveryWholePlan());
  symtune::Trainer whole(sessionFor("dynamic_tagger"));
  for (int step = 0; step < 4; ++step) {
    INFO("step ", step);
    const symtune::StepResult a = whole.step(), b = split.step();
    CHECK(b.microbatches >= 2);
    CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-5));
    REQUIRE(b.remat.has_value());
    REQUIRE(b.remat->plan.limitBytes.has_value());
    CHECK(b.remat->peakBytes <= static_cast<double>(*b.remat->plan.limitBytes));
    // Each micro-batch reset the peak; the step says the highest it cleared (Note [A step's
    // peak across resets]), which a caller that reset it before the step would not see.
    CHECK(b.peakBeforeResets.has_value());
    CHECK_FALSE(a.peakBeforeResets.has_value());  // nothing resets a step without a budget
    if (step == 0) {
      INFO(b.splitNote);
      CHECK(b.splitNote.find("split into 2 micro-batches") != std::string::npos);
    }
  }
  symtune::test::checkEach(split.executor().parameters(), whole.executor().parameters(), 1e-5,
                           "parameters");
}

// Note [Predicted not to fit] in symtune/control/controller.h: under a budget the whole batch
// does not fit, the online controller chooses the whole batch once per bucket at most.
TEST_CASE_FIXTURE(TwoThreads, "the online controller does not choose again what did not fit") {
  symtune::Session tight = belowEveryWholePlan();
  tight.control.mode = "online";
  symtune::Trainer t(tight);
  std::map<std::string, int> failed;  // by bucket: the most micro-batches that did not fit
  int splits = 0;
  for (int step = 0; step < 12; ++step) {
    INFO("step ", step);
    const symtune::StepResult r = t.step();
    REQUIRE(r.decision.has_value());
    // The decision is timed, and is part of the step.
    CHECK(r.timings.decide > 0);
    CHECK(r.timings.decide < r.seconds);
    const symtune::control::Decision& d = *r.decision;
    if (failed.count(d.bucket) != 0)
      CHECK(d.chosen.microbatches > failed[d.bucket]);
    REQUIRE(r.remat.has_value());
    REQUIRE(r.remat->plan.limitBytes.has_value());
    CHECK(r.remat->peakBytes <= static_cast<double>(*r.remat->plan.limitBytes));
    if (r.splitNote.empty()) {
      CHECK(d.violation.empty());
      continue;
    }
    ++splits;
    CHECK(r.microbatches > d.chosen.microbatches);
    CHECK(d.violation.find("the memory budget: ") == 0);
    CHECK(d.violation.find(r.splitNote) != std::string::npos);
    failed[d.bucket] = std::max(failed[d.bucket], d.chosen.microbatches);
  }
  CHECK(splits >= 1);  // the first step, on the whole batch
}

// Note [Micro-batches]: a micro-batch after the first adds to the gradients of those before it
// in place. Until 2026-12-03 it held them aside and made its own beside them, so a budget the
// first micro-batch fitted with half the gradients' bytes to spare was one the second overran.
TEST_CASE_FIXTURE(TwoThreads, "a later micro-batch holds no second copy of the gradients") {
  // The smallest budget the first of two micro-batches fits (nothing held before it).
  symtune::Session probe = sessionFor("dynamic_tagger", 2);
  probe.remat.enabled = true;
  probe.remat.budgetMb = 0.01;
  probe.control.splitOnOverrun = false;
  double first = 0;
  try {
    symtune::Trainer(probe).step();
    FAIL("a 10 kB budget trained a step");
  } catch (const symtune::remat::RematInfeasible& e) {
    first = e.smallestFeasibleBytes();
  }
  REQUIRE(first > 0);
  double gradients = 0;
  {
    symtune::Trainer t(sessionFor("dynamic_tagger"));
    for (const auto& p : t.executor().parameters())
      gradients += p.requires_grad() ? static_cast<double>(p.nbytes()) : 0.0;
  }
  symtune::Session tight = probe;
  tight.remat.budgetMb = (first + 0.5 * gradients) / 1e6;
  // The step `first` was measured on (a later batch may need more).
  symtune::Trainer held(tight);
  symtune::Trainer free(sessionFor("dynamic_tagger", 2));
  const symtune::StepResult a = free.step(), b = held.step();
  CHECK(b.microbatches == 2);
  CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-5));
  REQUIRE(b.remat.has_value());
  REQUIRE(b.remat->plan.limitBytes.has_value());
  CHECK(b.remat->peakBytes <= static_cast<double>(*b.remat->plan.limitBytes));
  symtune::test::checkEach(held.executor().parameters(), free.executor().parameters(), 1e-5,
                           "parameters");
}

// Note [A bound step no plan fits]: under a budget no bound plan fits whole, the step splits and
// keeps its binder (until 2026-12-03 the binder went first and the run split unbound).
TEST_CASE_FIXTURE(TwoThreads, "a bound step no plan fits whole splits and stays bound") {
  // The bound step's peak with nothing recomputed, as the budget counts it.
  symtune::Session s = sessionFor("tree_rnn");
  s.binding.enabled = true;
  s.remat.enabled = true;
  s.remat.bind = true;  // bound under the budget
  s.remat.budgetMb = 1000;
  double plain = 0;
  {
    symtune::Trainer t(s);
    REQUIRE(t.binder() != nullptr);
    for (int step = 0; step < 3; ++step) {
      const symtune::StepResult r = t.step();
      REQUIRE(r.remat.has_value());
      plain = std::max(plain, r.remat->peakBytes);
    }
  }
  REQUIRE(plain > 0);
  s.remat.budgetMb = 0.45 * plain / 1e6;
  s.control.enabled = true;
  symtune::Trainer split(s);
  symtune::Trainer whole(sessionFor("tree_rnn"));
  std::vector<int> counts{1};
  for (int step = 0; step < 4; ++step) {
    INFO("step ", step);
    const symtune::StepResult a = whole.step(), b = split.step();
    INFO(b.splitNote);
    CHECK(b.microbatches >= 2);
    // Note [Splitting further]: 1, 2, 3, 4, 6, 8, ... micro-batches, one count after another.
    for (size_t at = b.splitNote.find("split into "); at != std::string::npos;
         at = b.splitNote.find("split into ", at + 1)) {
      const int count = std::stoi(b.splitNote.substr(at + 11));
      const int k = counts.back();
      CHECK(count == (k < 4 ? k + 1 : (k & (k - 1)) == 0 ? k / 2 * 3 : k / 3 * 4));
      counts.push_back(count);
    }
    CHECK(b.microbatches == counts.back());
    CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-4));
    REQUIRE(b.remat.has_value());
    REQUIRE(b.remat->plan.limitBytes.has_value());
    CHECK(b.remat->peakBytes <= static_cast<double>(*b.remat->plan.limitBytes));
  }
  INFO(split.bindingNote().value_or(""));
  REQUIRE(split.binder() != nullptr);
  CHECK(split.binder()->boundExecutions() > 0);
  symtune::test::checkEach(split.executor().parameters(), whole.executor().parameters(), 1e-4,
                           "parameters");
}

TEST_CASE_FIXTURE(TwoThreads, "a trainer raises OptimizeRequired once for each new shape bucket") {
  // Transformer-XL's batches draw their segment and memory lengths: their buckets change.
  symtune::Trainer t(sessionFor("transformer_xl"));
  std::set<std::string> met;
  int raised = 0;
  for (int64_t step = 0; step < 12; ++step) {
    const std::string bucket = symtune::binding::inputsBucketKey(t.batch(step).inputs);
    const bool fresh = met.insert(bucket).second;
    const symtune::StepResult r = t.step();
    bool forBucket = false;
    if (r.optimizeRequired) {
      for (const auto& reason : r.optimizeRequired->reasons)
        forBucket = forBucket || reason.find("a new shape bucket: " + bucket) == 0;
      CHECK(r.optimizeRequired->step == step);
    }
    INFO("step ", step, ": ", bucket);
    CHECK(forBucket == (fresh && step > 0));
    raised += forBucket;
  }
  CHECK(raised == static_cast<int>(met.size()) - 1);
  CHECK(raised > 0);  // the test meets more than one bucket
  CHECK(t.optimizer().optimizeRequired().size() >= static_cast<size_t>(raised));
}
