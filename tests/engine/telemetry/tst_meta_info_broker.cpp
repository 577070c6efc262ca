// MetaInfoBroker: 24 features, each documented once in docs/features.md, with sane values on the
// ci preset; subscribers see every step; the history is bounded.

#include "doctest_torch.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "symtune/runtime/trainer.h"
#include "symtune/telemetry/meta_info_broker.h"
#include "test_files.h"

using symtune::Feature;

namespace {

// A relative tolerance, as Qt's fuzzy compare of doubles had: doctest::Approx's default also
// allows an absolute 1e-5 or so, which would let a learning rate of 3e-3 be off by half a percent.
doctest::Approx relativeApprox(double want) {
  return doctest::Approx(want).scale(0);
}

}  // namespace

TEST_CASE("every feature is documented once, in order, in docs/features.md") {
  const std::string doc = symtune::test::readFile(SYMTUNE_SOURCE_DIR "/docs/features.md");
  // A table row: "| 3 | `forward_time_s` | ...". Matched line by line, as ^ must be a line's start.
  const std::regex row(R"(^\| (\d+) \| `([a-z_]+)` \|)");
  std::vector<std::string> documented;
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, row))
      continue;
    INFO(line);
    CHECK(std::stoi(m[1].str()) == static_cast<int>(documented.size()));
    documented.push_back(m[2].str());
  }
  REQUIRE(static_cast<int>(documented.size()) == symtune::kFeatureCount);
  for (int i = 0; i < symtune::kFeatureCount; ++i) {
    INFO("feature ", i);
    CHECK(documented[static_cast<size_t>(i)] == symtune::featureName(static_cast<Feature>(i)));
  }
}

TEST_CASE("the features have sane values on the ci preset") {
  at::set_num_threads(2);
  symtune::Session s;
  s.name = "features";
  s.model.zoo = "dynamic_resnet";
  s.model.preset = "ci";
  s.optimizer.lr = 3e-3;
  symtune::Trainer trainer(s);
  std::vector<symtune::StepResult> steps;
  for (int i = 0; i < 12; ++i)
    steps.push_back(trainer.step());
  for (const auto& r : steps) {
    INFO("step ", r.step);
    const auto& f = r.features;
    CHECK(f[Feature::Step] == static_cast<double>(r.step));
    CHECK(f[Feature::StepTime] > 0);
    CHECK(f[Feature::StepTime] == relativeApprox(r.seconds));
    const double parts = f[Feature::DataTime] + f[Feature::ForwardTime] + f[Feature::BackwardTime] +
                         f[Feature::OptimizerTime];
    CHECK((parts > 0 && parts <= f[Feature::StepTime]));
    CHECK(f[Feature::SamplesPerSecond] == relativeApprox(16.0 / f[Feature::StepTime]));
    CHECK(f[Feature::BatchSize] == 16.0);
    CHECK(f[Feature::SequenceLength] == 0.0);  // images
    CHECK(f[Feature::PeakMemory] > 1e5);
    CHECK(f[Feature::Allocations] > 50);
    CHECK(f[Feature::Loss] == relativeApprox(r.loss));
    CHECK((f[Feature::GradGlobalNorm] > 0 && std::isfinite(f[Feature::GradGlobalNorm])));
    CHECK(f[Feature::GradMaxParamNorm] <= f[Feature::GradGlobalNorm] + 1e-12);
    CHECK(f[Feature::GradMinParamNorm] <= f[Feature::GradMaxParamNorm]);
    CHECK(f[Feature::GradMeanAbs] > 0);
    CHECK(f[Feature::GradNanCount] == 0.0);
    CHECK(f[Feature::GradInfCount] == 0.0);
    CHECK(f[Feature::ParamsWithoutGrad] >= 0);
    CHECK(f[Feature::LearningRate] == relativeApprox(3e-3));
    // The update ratio is measured on every 10th step only.
    CHECK(std::isnan(f[Feature::UpdateRatioMax]) == (r.step % 10 != 0));
  }
  CHECK(steps[1].features[Feature::LossDelta] == relativeApprox(steps[1].loss - steps[0].loss));
  CHECK(steps[0].features[Feature::LossEma] == relativeApprox(steps[0].loss));
  CHECK(steps[0].features[Feature::UpdateRatioMax] > 0);
  CHECK(trainer.broker().history().size() == 12u);
}

TEST_CASE("subscribers see every step until they unsubscribe, and the history is bounded") {
  auto w = torch::ones({4}, torch::requires_grad());
  symtune::MetaInfoBrokerOptions options;
  options.historySize = 3;
  symtune::MetaInfoBroker broker({{"w", w}}, options);
  std::vector<double> seen;
  const int id =
      broker.subscribe([&](const symtune::StepFeatures& f) { seen.push_back(f[Feature::Step]); });
  for (int i = 0; i < 5; ++i) {
    auto active = broker.beginStep();
    (w * static_cast<double>(i)).sum().backward();
    symtune::StepTimings t;
    t.total = 0.5;
    broker.endStep(t, 1.0 / (i + 1), 0.1, 8, 12);
    if (i == 3)
      broker.unsubscribe(id);
  }
  CHECK(seen == std::vector<double>{0, 1, 2, 3});
  REQUIRE(broker.history().size() == 3u);
  CHECK(broker.history().front()[Feature::Step] == 2.0);
  CHECK(broker.history().back()[Feature::SequenceLength] == 12.0);
  CHECK(broker.history().back()[Feature::SamplesPerSecond] == relativeApprox(16.0));
}

// A parameter whose weights are NaN after the update has the largest ratio: infinite. std::max
// passed its NaN over for the other parameter's finite ratio. A history of 0 steps keeps the last.
TEST_CASE("update_ratio_max is infinite where a parameter's ratio is not finite") {
  auto a = torch::ones({4}, torch::requires_grad());
  auto b = torch::ones({4}, torch::requires_grad());
  symtune::MetaInfoBrokerOptions options;
  options.historySize = 0;
  symtune::MetaInfoBroker broker({{"a", a}, {"b", b}}, options);
  auto active = broker.beginStep();
  REQUIRE(broker.wantsUpdateRatio());  // step 0
  (a * 2 + b * 3).sum().backward();
  broker.beforeUpdate();
  {
    torch::NoGradGuard noGrad;
    a.fill_(std::numeric_limits<float>::quiet_NaN());
    b.mul_(1.5);  // a ratio of 0.5
  }
  broker.afterUpdate();
  symtune::StepTimings t;
  t.total = 0.1;
  const auto f = broker.endStep(t, 1.0, 0.1, 8, 0);
  CHECK(f[Feature::UpdateRatioMax] == std::numeric_limits<double>::infinity());
  CHECK(broker.history().size() == 1u);
}

// Note [The loss's average]: a NaN or infinite loss, or a spike a rule skipped, leaves loss_ema as
// it was; the first finite loss seeds it. Before, one NaN loss held it at NaN for good (the spike
// guard blind), and a skipped spike raised it for tens of steps.
TEST_CASE("the loss's average leaves out losses that are not finite and steps that were skipped") {
  auto w = torch::ones({4}, torch::requires_grad());
  symtune::MetaInfoBroker broker({{"w", w}});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto step = [&](double loss, bool skipped = false) {
    auto active = broker.beginStep();
    (w * 2).sum().backward();
    symtune::StepTimings t;
    t.total = 0.1;
    return broker.endStep(t, loss, 0.1, 8, 0, std::nullopt, skipped)[Feature::LossEma];
  };
  CHECK(std::isnan(step(nan)));  // nothing to average yet
  CHECK(step(2.0) == 2.0);       // the first finite loss seeds it
  CHECK(step(std::numeric_limits<double>::infinity()) == 2.0);
  CHECK(step(nan) == 2.0);
  CHECK(step(1000.0, true) == 2.0);  // a spike a rule skipped
  CHECK(step(1.0) == relativeApprox(1.9));
  // What a rule reads during a step has that step's loss in.
  CHECK(broker.featuresSoFar(11.0, 0.1)[Feature::LossEma] == relativeApprox(0.9 * 1.9 + 1.1));
  CHECK(broker.featuresSoFar(nan, 0.1)[Feature::LossEma] == relativeApprox(1.9));
}

// peak_memory_bytes is what the step held on top of what was live when it began: before, from
// the second step on it counted what earlier steps left live (the optimizer's state, say) too.
TEST_CASE("a step's peak is counted on top of what was live when it began") {
  auto w = torch::ones({4}, torch::requires_grad());
  symtune::MetaInfoBroker broker({{"w", w}});
  std::vector<at::Tensor> kept;
  const auto step = [&](int64_t temporary, int64_t keep) {
    auto active = broker.beginStep();
    {
      const at::Tensor scratch = torch::empty({temporary}, torch::kUInt8);
      kept.push_back(torch::empty({keep}, torch::kUInt8));
    }
    symtune::StepTimings t;
    t.total = 0.1;
    return broker.endStep(t, 1.0, 0.1, 8, 0)[Feature::PeakMemory];
  };
  const double first = step(1 << 20, 4 << 20);
  const double second = step(1 << 20, 4 << 20);
  // Each step allocates 5 MiB at most (plus the allocator's rounding): the 4 MiB the first kept
  // is not the second's.
  CHECK(first >= 5 << 20);
  CHECK(second >= 5 << 20);
  CHECK(second < first + (1 << 20));
}
