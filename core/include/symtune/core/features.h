#pragma once
// The 24 step features of MetaInfoBroker (docs/features.md), their order and names. Part of
// symtune::core: the rule language's checker, reports and the studio name them without LibTorch.

#include <array>
#include <optional>
#include <string>

namespace symtune {

// The features, in vector order. Each is defined once, in docs/features.md.
enum class Feature : int {
  Step,
  StepTime,
  DataTime,
  ForwardTime,
  BackwardTime,
  OptimizerTime,
  SamplesPerSecond,
  BatchSize,
  SequenceLength,
  PeakMemory,
  LiveMemory,
  Allocations,
  Loss,
  LossDelta,
  LossEma,
  GradGlobalNorm,
  GradMaxParamNorm,
  GradMinParamNorm,
  GradMeanAbs,
  GradNanCount,
  GradInfCount,
  ParamsWithoutGrad,
  UpdateRatioMax,
  LearningRate,
};
inline constexpr int kFeatureCount = 24;
static_assert(static_cast<int>(Feature::LearningRate) + 1 == kFeatureCount);

// The feature's name as docs/features.md and the JSON outputs spell it ("step_time_s", ...).
const char* featureName(Feature feature);

struct StepFeatures {
  std::array<double, kFeatureCount> values{};
  double operator[](Feature f) const { return values[static_cast<size_t>(f)]; }
  double& operator[](Feature f) { return values[static_cast<size_t>(f)]; }
};

// The feature named `name` ("loss_ema"), if there is one.
std::optional<Feature> featureNamed(const std::string& name);

}  // namespace symtune
