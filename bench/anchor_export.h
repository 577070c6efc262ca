#pragma once
// What bench/python/anchor.py reads to train a model in eager PyTorch on the engine's batches
// (docs/benchmarks.md, "The Python anchor"): the TorchScript archive, the batches and a manifest.

#include <string>

#include "harness.h"
#include "symtune/core/session.h"
#include "symtune/runtime/trainer.h"

namespace symtune::bench {

// Writes RunConfig::exportDir/MODEL: module.pt, batches.pt (warm-up and measured steps) and
// session.json (the model's module tree with its attributes, the optimizer, the steps).
void exportForAnchor(const std::string& model, Trainer& trainer, const Session& session,
                     const RunConfig& config);

}  // namespace symtune::bench
