// DynaCompiler's convolution-block region (symtune/binding/op_site.h, kBatchNormReluConv): a
// training batch norm, its ReLU and the convolution that reads it are one region, bound to
// `bn-relu-conv` (kernels/' batchNormReluConv2d, which keeps one activation where the three ops
// keep two) within its tolerance — outputs, gradients and running statistics as the unbound
// run's, NCHW and channels-last — measured on copies of the running statistics; with the pair
// site inside it disabled it still runs the ReLU; in evaluation it is the three ATen ops.

#include "doctest_torch.h"

#include <memory>
#include <string>
#include <vector>

#include "symtune/binding/binder.h"
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
// whose gradient no batch norm after it cancels).
torch::jit::Module convBlocks(bool training) {
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
  m.define(R"(
def forward(self, x: Tensor):
    y = torch.conv2d(x, self.w1, None, [1, 1], [1, 1])
    y = torch.relu(torch.batch_norm(y, self.g1, self.b1, self.mean1, self.var1, self.train_bn,
                                    0.1, 1e-5, False))
    y = torch.conv2d(y, self.w2, None, [2, 2], [1, 1])
    y = torch.relu(torch.batch_norm(y, self.g2, self.b2, self.mean2, self.var2, self.train_bn,
                                    0.1, 1e-5, False))
    z = torch.conv2d(y, self.w3, self.c3, [1, 1], [1, 1])
    return torch.relu(z) + z
)");
  return m;
}

struct BlockRun {
  std::vector<torch::Tensor> values;  // the output, the input's gradient, then the parameters'
  std::vector<torch::Tensor> stats;   // the running statistics after the step
};

// One forward and backward through `exec` (a fresh executor of the blocks' module).
BlockRun blockStep(symtune::SegmentExecutor& exec, bool channelsLast) {
  for (auto& p : exec.parameters())
    p.requires_grad_(true);
  torch::manual_seed(9);
  auto x = torch::randn({4, 3, 10, 10});
  if (channelsLast)
    x = x.contiguous(at::MemoryFormat::ChannelsLast);
  x.requires_grad_(true);
  BlockRun r;
  const torch::Tensor out = exec.run({x}, symtune::ForwardRequest{}).output;
  out.backward(torch::linspace(-1, 1, out.numel()).view_as(out));
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
    for (const std::string winner : {"bn-relu-conv", "aten"}) {
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
  for (const auto& b : binder->table().bindings) {
    if (b.pattern == kBatchNormReluConv) {
      CHECK(b.candidates.at(1).name == "bn-relu-conv");
      CHECK(b.candidates.at(1).maxError == 0);
    }
  }
}
