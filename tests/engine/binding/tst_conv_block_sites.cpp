// DynaCompiler's convolution-block region (symtune/binding/op_site.h, kBatchNormReluConv): a
// training batch norm, its ReLU and the convolution that reads it are one region, bound to
// `bn-relu-conv` (kernels/' batchNormReluConv2d, which keeps one activation where the three ops
// keep two) within its tolerance — outputs, gradients and running statistics as the unbound
// run's, NCHW and channels-last — measured on copies of the running statistics; with the pair
// site inside it disabled it still runs the ReLU; in evaluation it is the three ATen ops.
// kConvBlockPair, where the binder weighs memory (BinderOptions::memorySlack): two blocks are one
// region whose candidates keep less for the backward (what each keeps measured and recorded), the
// winner the leanest within the slack, and every winner gives the unbound step.

#include "doctest_torch.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "symtune/binding/binder.h"
#include "symtune/binding/shape_bucket.h"
#include "symtune/exec/segment_executor.h"
#include "tensor_compare.h"

namespace {

using symtune::binding::Binder;
using symtune::binding::BinderOptions;
using symtune::binding::kBatchNormReluConv;

symtune::MachineFingerprint here() {
  return symtune::binding::currentMachine(torch::kCPU);
}

// Two convolution blocks and a third convolution: each batch norm feeds a ReLU read only by the
// next convolution (two regions, the second convolution with a stride, the third with a bias,
// whose gradient no batch norm after it cancels). `flattened`: the second block's output is
// flattened by a view instead of convolved (the third convolution's weight and bias still read);
// `pooled`: max-pooled first.
torch::jit::Module convBlocks(bool training, bool flattened = false, bool pooled = false) {
  torch::manual_seed(5);
  torch::jit::Module m("ConvBlocks");
  // Parameters without requires_grad, so that clones of the module have leaves (blockStep asks
  // for their gradients).
  m.register_parameter("w1", torch::randn({8, 3, 3, 3}) * 0.3, false);
  m.register_parameter("w2", torch::randn({12, 8, 3, 3}) * 0.2, false);
  m.register_parameter("w3", torch::randn({12, 12, 3, 3}) * 0.2, false);
  m.register_parameter("c3", torch::randn({12}) * 0.1, false);
  for (const auto& [bn, width] :
       std::vector<std::pair<std::string, int64_t>>{{"1", 8}, {"2", 12}}) {
    m.register_parameter("g" + bn, torch::rand({width}) + 0.5, false);
    m.register_parameter("b" + bn, torch::randn({width}) * 0.1, false);
    m.register_buffer("mean" + bn, torch::zeros({width}));
    m.register_buffer("var" + bn, torch::ones({width}));
  }
  m.register_attribute("train_bn", c10::BoolType::get(), training);
  const std::string blocks = R"(
def forward(self, x: Tensor):
    y = torch.conv2d(x, self.w1, None, [1, 1], [1, 1])
    y = torch.relu(torch.batch_norm(y, self.g1, self.b1, self.mean1, self.var1, self.train_bn,
                                    0.1, 1e-5, False))
    y = torch.conv2d(y, self.w2, None, [2, 2], [1, 1])
    y = torch.relu(torch.batch_norm(y, self.g2, self.b2, self.mean2, self.var2, self.train_bn,
                                    0.1, 1e-5, False))
)";
  m.define(blocks + (pooled      ? R"(
    y = torch.max_pool2d(y, [2, 2])
    return y.view(y.size(0), -1).sum(1, keepdim=True) * self.c3 + self.w3.sum()
)"
                     : flattened ? R"(
    return y.view(y.size(0), -1).sum(1, keepdim=True) * self.c3 + self.w3.sum()
)"
                                 : R"(
    z = torch.conv2d(y, self.w3, self.c3, [1, 1], [1, 1])
    return torch.relu(z) + z
)"));
  return m;
}

struct BlockRun {
  std::vector<torch::Tensor> values;  // the output, the input's gradient, then the parameters'
  std::vector<torch::Tensor> stats;   // the running statistics after the step
};

// `steps` forwards and backwards through `exec` (a fresh executor of the blocks' module) on the
// same batch; the last one's output.
BlockRun blockStep(symtune::SegmentExecutor& exec, bool channelsLast, int steps = 1) {
  for (auto& p : exec.parameters())
    p.requires_grad_(true);
  torch::manual_seed(9);
  auto x = torch::randn({4, 3, 10, 10});
  if (channelsLast)
    x = x.contiguous(at::MemoryFormat::ChannelsLast);
  x.requires_grad_(true);
  BlockRun r;
  torch::Tensor out;
  for (int i = 0; i < steps; ++i) {
    out = exec.run({x}, symtune::ForwardRequest{}).output;
    out.backward(torch::linspace(-1, 1, out.numel()).view_as(out));
  }
  r.values = {out.detach(), x.grad()};
  for (const auto& [name, p] : exec.namedParameters())
    r.values.push_back(p.grad().clone());
  for (const auto& [name, b] : exec.scriptModule()->named_buffers())
    r.stats.push_back(b.clone());
  return r;
}

void checkClose(const BlockRun& got, const BlockRun& want, double within) {
  symtune::test::checkEach(got.values, want.values, within,
                           "0: the output, 1: the input's gradient, then the parameters'");
  symtune::test::checkEach(got.stats, want.stats, within == 0 ? 0 : 1e-6,
                           "the running means and variances");
}

// A binder of `exec`'s graph; the image-input site left out (these tests are about the region).
std::shared_ptr<Binder> blockBinder(symtune::SegmentExecutor& exec, BinderOptions options = {}) {
  options.disable.push_back(symtune::binding::kChannelsLast);
  auto binder = std::make_shared<Binder>(exec.symugen()->staticGraph(), here(), options);
  exec.setBinder(binder);
  return binder;
}

}  // namespace

TEST_CASE("a batch norm, its ReLU and the convolution reading it are one region, measured") {
  for (const bool channelsLast : {false, true}) {
    INFO("channels-last ", channelsLast);
    const torch::jit::Module module = convBlocks(true);
    symtune::SegmentExecutor plainExec(module.clone(), "blocks");
    symtune::SegmentExecutor exec(module.clone(), "blocks");
    auto binder = blockBinder(exec);
    const BlockRun plain = blockStep(plainExec, channelsLast);
    const BlockRun bound = blockStep(exec, channelsLast);
    std::vector<symtune::binding::OpSite> regions;
    for (const auto& site : binder->sites()) {
      if (site.pattern == kBatchNormReluConv)
        regions.push_back(site);
    }
    REQUIRE(regions.size() == 2);
    for (const auto& site : regions) {
      REQUIRE(site.cell != nullptr);
      REQUIRE(site.cell->nodes.size() == 3);
      CHECK(site.cell->first()->kind() == c10::aten::batch_norm);
      CHECK(site.cell->nodes[1]->kind() == c10::aten::relu);
      CHECK(site.cell->last()->kind() == c10::aten::conv2d);
      CHECK(site.updated.size() == 2);  // the running statistics, copied for each replay
    }
    // Both measured: the reference, then bn-relu-conv, which agrees.
    int measured = 0;
    for (const auto& b : binder->table().bindings) {
      if (b.pattern != kBatchNormReluConv)
        continue;
      ++measured;
      REQUIRE(b.candidates.size() == 3);  // and torchscript, as for every region
      CHECK(b.candidates[1].name == "bn-relu-conv");
      for (const auto& c : b.candidates) {
        INFO(c.name);
        CHECK(c.refused.empty());
        CHECK(c.maxError <= 1e-5);
        CHECK(c.forwardSeconds > 0);
        CHECK(c.backwardSeconds > 0);
      }
    }
    CHECK(measured == 2);
    // Whichever won: the step as the unbound one, running statistics updated once.
    checkClose(bound, plain, 1e-5);
  }
}

TEST_CASE("bound to bn-relu-conv, with and without the pair site inside, the step is unchanged") {
  for (const bool channelsLast : {false, true}) {
    INFO("channels-last ", channelsLast);
    const torch::jit::Module module = convBlocks(true);
    symtune::SegmentExecutor plainExec(module.clone(), "blocks");
    const BlockRun plain = blockStep(plainExec, channelsLast);
    symtune::SegmentExecutor measuredExec(module.clone(), "blocks");
    auto measured = blockBinder(measuredExec);
    blockStep(measuredExec, channelsLast);
    // torchscript from a table runs its warm-up on the model's own running statistics (they
    // were updated three times in the step).
    for (const std::string winner : {"bn-relu-conv", "torchscript", "aten"}) {
      for (const bool pairDisabled : {false, true}) {
        const std::string pair = pairDisabled ? "bn-relu disabled" : "bn-relu enabled";
        INFO(winner, ", ", pair);
        symtune::BindingTable table = measured->table();
        for (auto& b : table.bindings) {
          if (b.pattern == kBatchNormReluConv)
            b.winner = winner;
        }
        BinderOptions quiet;
        quiet.measure = false;
        if (pairDisabled)
          quiet.disable.push_back("bn-relu");
        symtune::SegmentExecutor exec(module.clone(), "blocks");
        auto forced = blockBinder(exec, quiet);
        REQUIRE_FALSE(forced->adopt(table).has_value());
        const BlockRun got = blockStep(exec, channelsLast);
        CHECK(forced->measurements() == 0);
        if (winner == "aten" && pairDisabled) {
          CHECK(forced->boundExecutions() == 0);
          checkClose(got, plain, 0);  // the ATen ops as written, bit for bit
        } else {
          if (winner != "aten")
            CHECK(forced->boundExecutions() >= 2);
          checkClose(got, plain, 1e-5);
        }
      }
    }
  }
}

TEST_CASE("in evaluation bn-relu-conv is the three ATen ops") {
  const torch::jit::Module module = convBlocks(false);
  symtune::SegmentExecutor plainExec(module.clone(), "blocks");
  symtune::SegmentExecutor exec(module.clone(), "blocks");
  auto binder = blockBinder(exec);
  const BlockRun plain = blockStep(plainExec, false);
  const BlockRun bound = blockStep(exec, false);
  checkClose(bound, plain, 0);
  // Measured in evaluation buckets, where the kernels would run the ops as written: refused, not
  // timed against themselves.
  int regions = 0;
  for (const auto& b : binder->table().bindings) {
    INFO(b.site, " ", b.bucket);
    CHECK(symtune::binding::isEvaluationBucket(b.bucket));
    for (const auto& c : b.candidates) {
      if (c.name == "bn-relu-conv" || c.name == "bn-relu")
        CHECK(c.refused == "runs the ops as written on these inputs");
    }
    regions += b.pattern == kBatchNormReluConv;
  }
  CHECK(regions == 2);
}

// Note [Evaluation buckets] (binder.cpp): a model evaluated, then trained, on the same shapes
// measures its training buckets anew. Until 2026-12-07 the mode was not in the bucket, and the
// training steps were bound to what evaluation measured — where the kernels ran the ops as
// written, so by noise.
TEST_CASE("a training step after an evaluation step on the same shapes measures its own buckets") {
  symtune::SegmentExecutor exec(convBlocks(false).clone(), "blocks");
  auto binder = blockBinder(exec);
  blockStep(exec, false);
  const int64_t evaluating = binder->measurements();
  CHECK(evaluating >= 2);  // the region, the second block's batch norm and ReLU
  exec.scriptModule()->setattr("train_bn", true);
  blockStep(exec, false);
  CHECK(binder->measurements() == 2 * evaluating);
  std::map<std::string, int> byMode;
  for (const auto& b : binder->table().bindings) {
    const bool eval = symtune::binding::isEvaluationBucket(b.bucket);
    ++byMode[eval ? "eval" : "train"];
    for (const auto& c : b.candidates) {
      INFO(b.site, " ", b.bucket, " ", c.name, ": ", c.refused);
      if (c.name == "bn-relu-conv" || c.name == "bn-relu")
        CHECK(c.refused.empty() != eval);
    }
  }
  CHECK(byMode["eval"] == evaluating);
  CHECK(byMode["train"] == evaluating);
  // And back: evaluation reads its own buckets again, measuring nothing.
  exec.scriptModule()->setattr("train_bn", false);
  blockStep(exec, false);
  CHECK(binder->measurements() == 2 * evaluating);
}

namespace {

using symtune::binding::kConvBlockPair;

// Two steps of the blocks' module with a binder weighing memory by `slack` (the first measures,
// the second begins by spending the slack); the executor kept: the binder holds its graph.
struct PairRun {
  std::unique_ptr<symtune::SegmentExecutor> exec;
  std::shared_ptr<Binder> binder;
  BlockRun step;
};
PairRun pairSteps(const torch::jit::Module& module, double slack, bool channelsLast,
                  int steps = 2) {
  PairRun r;
  r.exec = std::make_unique<symtune::SegmentExecutor>(module.clone(), "blocks");
  BinderOptions options;
  options.memorySlack = slack;
  r.binder = blockBinder(*r.exec, options);
  r.step = blockStep(*r.exec, channelsLast, steps);
  return r;
}

// The measured candidate the binder binds by time (BinderOptions::margin's 3 %).
const symtune::CandidateMeasurement& fastestOf(const symtune::Binding& b) {
  const symtune::CandidateMeasurement* fastest = &b.candidates.front();
  for (const auto& c : b.candidates) {
    if (c.refused.empty() && c.seconds() < 0.97 * b.candidates.front().seconds() &&
        c.seconds() < fastest->seconds())
      fastest = &c;
  }
  return *fastest;
}

const symtune::Binding& pairBinding(const symtune::BindingTable& table) {
  const symtune::Binding* found = nullptr;
  for (const auto& b : table.bindings) {
    if (b.pattern == kConvBlockPair) {
      REQUIRE(found == nullptr);
      found = &b;
    }
  }
  REQUIRE(found != nullptr);
  return *found;
}

}  // namespace

TEST_CASE("weighing memory, two convolution blocks are one region; each candidate keeps less") {
  for (const bool channelsLast : {false, true}) {
    INFO("channels-last ", channelsLast);
    const torch::jit::Module module = convBlocks(true);
    symtune::SegmentExecutor plainExec(module.clone(), "blocks");
    const BlockRun plain = blockStep(plainExec, channelsLast, 2);
    const PairRun run = pairSteps(module, 0.5, channelsLast);
    std::vector<symtune::binding::OpSite> regions;
    for (const auto& site : run.binder->sites()) {
      // The pair holds both blocks; the third convolution's lean block region would overlap it.
      CHECK(site.pattern != kBatchNormReluConv);
      if (site.pattern == kConvBlockPair)
        regions.push_back(site);
    }
    REQUIRE(regions.size() == 1);
    const auto& site = regions.front();
    REQUIRE(site.cell != nullptr);
    REQUIRE(site.cell->nodes.size() == 6);
    CHECK(site.cell->first()->kind() == c10::aten::conv2d);
    CHECK(site.cell->last()->kind() == c10::aten::relu);
    CHECK(site.updated.size() == 4);  // both batch norms' running statistics
    CHECK(site.name.find(" (+ block)") != std::string::npos);
    const symtune::Binding& b = pairBinding(run.binder->table());
    std::map<std::string, const symtune::CandidateMeasurement*> by;
    for (const auto& c : b.candidates) {
      INFO(c.name);
      CHECK(c.refused.empty());
      CHECK(c.maxError <= 1e-5);
      CHECK(c.keptBytes > 0);
      by[c.name] = &c;
    }
    REQUIRE(by.count("aten") == 1);
    REQUIRE(by.count("conv-block-pair") == 1);
    REQUIRE(by.count("conv-block-pair-again") == 1);
    // 4 x 8 x 10 x 10 and 4 x 12 x 5 x 5 floats: ATen keeps both batch norms' inputs and both
    // ReLUs' outputs (the second is the output), the lean block one less, the pair run again
    // its output alone and its input, which the caller has already unless it is copied to
    // channels-last (the pair candidates run channels-last).
    const int64_t first = 4 * 8 * 10 * 10 * 4, second = 4 * 12 * 5 * 5 * 4;
    const int64_t copied = channelsLast ? 0 : 4 * 3 * 10 * 10 * 4;
    CHECK(by["aten"]->keptBytes >= 2 * first + 2 * second);
    CHECK(by["conv-block-pair"]->keptBytes < by["aten"]->keptBytes - first / 2);
    CHECK(by["conv-block-pair-again"]->keptBytes < second + copied + first / 4);
    // The rule (Note [Memory slack]): half the sites' time bound by time may go to trades, the
    // one worth most bytes per second first, a site moving on from its choice so far. The pair
    // is the only site with any (the pairs' bn-relu keeps what the batch norm and ReLU keep).
    double total = 0;
    for (const auto& x : run.binder->table().bindings)
      total += fastestOf(x).seconds();
    const symtune::CandidateMeasurement* current = &fastestOf(b);
    double spent = 0;
    for (bool moved = true; moved;) {
      moved = false;
      const symtune::CandidateMeasurement* to = nullptr;
      double best = -1;
      for (const auto& c : b.candidates) {
        const double seconds = c.seconds() - current->seconds();
        const double saved = static_cast<double>(current->keptBytes - c.keptBytes);
        if (static_cast<double>(c.keptBytes) >= 0.95 * static_cast<double>(current->keptBytes) ||
            spent + seconds > 0.5 * total)
          continue;
        const double worth = seconds > 0 ? saved / seconds : 1e300;
        if (worth > best) {
          best = worth;
          to = &c;
        }
      }
      if (to != nullptr) {
        spent += to->seconds() - current->seconds();
        current = to;
        moved = true;
      }
    }
    INFO("fastest ", fastestOf(b).name, ", spent ", spent, " s of ", 0.5 * total);
    CHECK(b.winner == current->name);
    for (const auto& x : run.binder->table().bindings) {
      if (x.pattern != kConvBlockPair)
        CHECK(x.winner == fastestOf(x).name);
    }
    checkClose(run.step, plain, 1e-5);
    // The table says what each keeps, and under which slack it was chosen.
    const auto read = symtune::BindingTable::fromJson(run.binder->table().toJson(), "test");
    CHECK(read.memorySlack == 0.5);
    const symtune::Binding& again = pairBinding(read);
    REQUIRE(again.candidates.size() == b.candidates.size());
    for (size_t i = 0; i < b.candidates.size(); ++i)
      CHECK(again.candidates[i].keptBytes == b.candidates[i].keptBytes);
  }
}

// `flattened`: a view reads the pair's output. The pair runs channels-last; given an NCHW input
// it returned a channels-last output, which the view refused; `pooled`: the view reads the
// output max-pooled, which keeps the layout (until 2026-12-07 only a view of the output itself
// was seen, and the view of the pooled output failed).
TEST_CASE("bound to either pair candidate or run as written, the step is unchanged") {
  struct Variant {
    bool channelsLast, flattened, pooled;
  };
  for (const auto& [channelsLast, flattened, pooled] : std::vector<Variant>{{false, false, false},
                                                                            {true, false, false},
                                                                            {false, true, false},
                                                                            {false, true, true}}) {
    const torch::jit::Module module = convBlocks(true, flattened, pooled);
    symtune::SegmentExecutor plainExec(module.clone(), "blocks");
    const BlockRun plain = blockStep(plainExec, channelsLast);
    const PairRun measured = pairSteps(module, 0.2, channelsLast, 1);
    for (const std::string winner : {"conv-block-pair-again", "conv-block-pair", "aten"}) {
      INFO("channels-last ", channelsLast, ", flattened ", flattened, ", pooled ", pooled, ", ",
           winner);
      symtune::BindingTable table = measured.binder->table();
      for (auto& b : table.bindings) {
        if (b.pattern == kConvBlockPair)
          b.winner = winner;
      }
      symtune::SegmentExecutor exec(module.clone(), "blocks");
      BinderOptions quiet;
      quiet.measure = false;
      quiet.memorySlack = 0.2;
      auto forced = blockBinder(exec, quiet);
      REQUIRE_FALSE(forced->adopt(table).has_value());
      const BlockRun got = blockStep(exec, channelsLast);
      CHECK(forced->measurements() == 0);
      if (winner != "aten")
        CHECK(forced->boundExecutions() >= 1);
      checkClose(got, plain, 1e-5);
    }
  }
}

TEST_CASE("a table chosen under another memory slack is not reused") {
  const torch::jit::Module module = convBlocks(true);
  const PairRun measured = pairSteps(module, 0.2, false, 1);
  symtune::SegmentExecutor exec(module.clone(), "blocks");
  auto byTime = blockBinder(exec);
  const auto why = byTime->adopt(measured.binder->table());
  REQUIRE(why.has_value());
  CHECK(why->find("memory slack of 0.2 (this run's is 0") != std::string::npos);
  // By time alone there is no pair region: the lean block regions, as before.
  blockStep(exec, false);
  for (const auto& site : byTime->sites())
    CHECK(site.pattern != kConvBlockPair);
  BinderOptions tooMuch;
  tooMuch.memorySlack = 1.0;
  CHECK_THROWS_WITH_AS(Binder(exec.symugen()->staticGraph(), here(), tooMuch),
                       doctest::Contains("memory slack must be in [0, 1)"), c10::Error);
}
