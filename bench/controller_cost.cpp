// What the online controller costs a step by itself: choose() before the step, observe() after it,
// on simulated steps (no model runs), over two configuration spaces shaped like the ones the cpu
// presets give it on two threads (micro-batches 1-32, threads 1-2, binding_explore 0-1):
// "constant" batches (one shape bucket, no sequence length: the tree network, the ResNet) and
// "sequences" (a length of 8-64 in four buckets: the tagger, Transformer-XL). The JSON gives each
// call's median microseconds per step after the first 200, the median over the rounds. With
// --evict MB it writes to MB of memory before each call, outside its timing, as a model's step
// does between them: what a run pays, its caches cold (in symtune-bench's runs the decision took
// two to three times what it takes here warm).
//
//   build/ci/bin/symtune-bench-controller [--steps 2000] [--rounds 5] [--evict 64]
//
// It needs only the control sources and nlohmann/json, so it also builds against an earlier
// commit's, to compare the two on one machine (docs/benchmarks.md):
//
//   g++ -O3 -DNDEBUG -std=c++17 -Iengine/include -o /tmp/controller-cost bench/controller_cost.cpp
//       engine/src/control/{additive_model,controller,controller_state,config_space}.cpp
//
// (one command line).

#include <chrono>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "symtune/control/controller.h"

namespace {

using Clock = std::chrono::steady_clock;
using symtune::control::ConfigSpace;
using symtune::control::Configuration;
using symtune::control::Knob;

struct Cost {
  double choose = 0, observe = 0;  // median microseconds per step
  int64_t explored = 0;
};

// Writes to every cache line of `memory` (nothing when it is empty).
void evict(std::vector<char>& memory) {
  for (size_t i = 0; i < memory.size(); i += 64)
    memory[i] = static_cast<char>(memory[i] + 1);
}

// One run of `steps` decisions; `sequences`: the batches' lengths vary (and their buckets);
// `memory` is written to before each call.
Cost run(bool sequences, int steps, uint64_t seed, std::vector<char>& memory) {
  const ConfigSpace space({Knob{"microbatches", {1, 2, 4, 8, 16, 32}, 1, ""},
                           Knob{"threads", {1, 2}, 2, ""}, Knob{"binding_explore", {0, 1}, 1, ""}});
  symtune::control::ControllerOptions options;
  options.seed = seed;
  symtune::control::OnlineController controller(space, options);
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> noise(0.0, 0.05);
  std::vector<double> chooseUs, observeUs;
  Cost cost;
  for (int step = 0; step < steps; ++step) {
    const int length = sequences ? 8 + static_cast<int>(rng() % 57) : -1;
    const std::string bucket =
        sequences
            ? "[32, <=" + std::to_string(1 << static_cast<int>(std::ceil(std::log2(length)))) + "]"
            : "[32]";
    evict(memory);
    const auto t0 = Clock::now();
    const symtune::control::Decision d =
        controller.choose(step, bucket, {32.0, static_cast<double>(length)});
    const auto t1 = Clock::now();
    // A step's seconds: the whole batch on two threads fastest, each halving of the batch 8 %
    // slower, one thread 30 %; longer batches longer.
    const Configuration& c = d.chosen;
    const double seconds = 0.005 * (sequences ? length / 32.0 : 1.0) *
                           (1 + 0.08 * std::log2(c.microbatches)) * (c.threads == 1 ? 1.3 : 1.0) *
                           noise(rng);
    evict(memory);
    const auto t2 = Clock::now();
    controller.observe(d, seconds, 32, 1.0);
    const auto t3 = Clock::now();
    if (step >= 200) {
      chooseUs.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      observeUs.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
    }
    cost.explored += d.explored ? 1 : 0;
  }
  cost.choose = symtune::bench::median(chooseUs);
  cost.observe = symtune::bench::median(observeUs);
  return cost;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 2000, rounds = 5, evictMb = 0;
  for (int i = 1; i < argc; i += 2) {
    const std::string arg = argv[i];
    if (i + 1 < argc && arg == "--steps") {
      steps = static_cast<int>(
          symtune::bench::wholeNumberArg("symtune-bench-controller", arg, argv[i + 1]));
    } else if (i + 1 < argc && arg == "--rounds") {
      rounds = static_cast<int>(
          symtune::bench::wholeNumberArg("symtune-bench-controller", arg, argv[i + 1]));
    } else if (i + 1 < argc && arg == "--evict") {
      evictMb = static_cast<int>(
          symtune::bench::wholeNumberArg("symtune-bench-controller", arg, argv[i + 1], 0));
    } else {
      std::cerr << "usage: symtune-bench-controller [--steps N] [--rounds R] [--evict MB]\n";
      return 2;
    }
  }
  if (steps <= 200 || rounds < 1 || evictMb < 0) {
    std::cerr << "symtune-bench-controller: --steps must be above 200 (the first 200 are not "
                 "timed), --rounds at least 1 and --evict not negative\n";
    return 2;
  }
  std::vector<char> memory(static_cast<size_t>(evictMb) << 20, 0);
  nlohmann::ordered_json out;
  out["machine"] = {{"cpu", symtune::bench::cpuModel()}};
  out["steps"] = steps;
  out["rounds"] = rounds;
  out["evict_mb"] = evictMb;
  for (const bool sequences : {false, true}) {
    std::vector<double> choose, observe, explored;
    for (int r = 0; r < rounds; ++r) {
      const Cost c = run(sequences, steps, 7 + static_cast<uint64_t>(r), memory);
      choose.push_back(c.choose);
      observe.push_back(c.observe);
      explored.push_back(static_cast<double>(c.explored));
    }
    out["spaces"].push_back({{"batches", sequences ? "sequences" : "constant"},
                             {"choose_us", symtune::bench::summary(choose)},
                             {"observe_us", symtune::bench::summary(observe)},
                             {"explored", symtune::bench::summary(explored)}});
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}
