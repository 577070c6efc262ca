// The operator expression templates against figures computed by hand (docs/cost-templates.md
// gives the formulas), unknown ops and unknown shapes, and the expression syntax.

#include "doctest_text.h"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "symtune/core/cost_templates.h"

using symtune::ValueInfo;

namespace {

ValueInfo t(std::vector<int64_t> shape, const char* dtype = "float32") {
  return ValueInfo{"Tensor", std::move(shape), dtype, std::nullopt};
}
ValueInfo none() {
  return ValueInfo{"NoneType", std::nullopt, "", std::nullopt};
}
ValueInfo ints(std::vector<int64_t> v) {
  return ValueInfo{"int[]", std::nullopt, "", std::move(v)};
}
ValueInfo scalar() {
  return ValueInfo{"Scalar", std::nullopt, "", std::nullopt};
}
ValueInfo typed(const char* type) {
  return ValueInfo{type, std::nullopt, "", std::nullopt};
}

using Values = std::vector<ValueInfo>;

// Qt Test's fuzzy tolerance for doubles (relative 1e-12): the figures are counts the templates
// compute in double arithmetic.
doctest::Approx figure(double expected) {
  return doctest::Approx(expected).epsilon(1e-12);
}

struct FigureRow {
  const char* name;
  std::string kind;
  Values in;
  Values out;
  double flops;
  double read;  // -1: not checked in this row
  double written;
  double saved;
};

std::vector<FigureRow> handComputedRows() {
  return {
      // addmm: 2*M*N*K + M*N with M=32, K=128, N=64
      {"addmm 32x128 @ 128x64 + bias", "aten::addmm", Values{t({64}), t({32, 128}), t({128, 64})},
       Values{t({32, 64})}, 526336.0, (64 + 32 * 128 + 128 * 64) * 4.0, 32 * 64 * 4.0,
       (32 * 128 + 128 * 64) * 4.0},
      // conv: 2 * numel(out) * (C*kh*kw) + numel(out) for the bias; out 8x16x32x32, C*kh*kw = 27
      {"conv2d 3->16 3x3 with bias", "aten::conv2d",
       Values{t({8, 3, 32, 32}), t({16, 3, 3, 3}), t({16})}, Values{t({8, 16, 32, 32})}, 7208960.0,
       (24576 + 432 + 16) * 4.0, 524288.0, (24576 + 432) * 4.0},
      {"conv2d without bias", "aten::conv2d", Values{t({8, 3, 32, 32}), t({16, 3, 3, 3}), none()},
       Values{t({8, 16, 32, 32})}, 7077888.0, (24576 + 432) * 4.0, 524288.0, -1.0},
      // A transposed convolution 64 -> 32, 3x3, stride 2: each of the 8*64*16*16 input elements
      // meets 32*9 weights, 2 FLOPs each, then the bias over 8*32*33*33 outputs. Through
      // _convolution (torch.jit.trace's form) the flag at input 6 says which; read as a plain
      // convolution it was 2*numel(out)*288, 2.1x this.
      {"conv_transpose2d 64->32 3x3 stride 2", "aten::conv_transpose2d",
       Values{t({8, 64, 16, 16}), t({64, 32, 3, 3}), t({32})}, Values{t({8, 32, 33, 33})},
       2.0 * 8 * 64 * 16 * 16 * 288 + 8 * 32 * 33 * 33, -1.0, -1.0, -1.0},
      {"_convolution, transposed", "aten::_convolution",
       Values{t({8, 64, 16, 16}), t({64, 32, 3, 3}), t({32}), ints({2, 2}), ints({0, 0}),
              ints({1, 1}), ints({1}), ints({0, 0}), ints({1})},
       Values{t({8, 32, 33, 33})}, 2.0 * 8 * 64 * 16 * 16 * 288 + 8 * 32 * 33 * 33, -1.0, -1.0,
       -1.0},
      {"_convolution, not transposed", "aten::_convolution",
       Values{t({8, 3, 32, 32}), t({16, 3, 3, 3}), t({16}), ints({1, 1}), ints({1, 1}),
              ints({1, 1}), ints({0}), ints({0, 0}), ints({1})},
       Values{t({8, 16, 32, 32})}, 7208960.0, -1.0, -1.0, -1.0},
      {"linear 20->30, batch 10", "aten::linear", Values{t({10, 20}), t({30, 20}), t({30})},
       Values{t({10, 30})}, 12300.0, -1.0, 1200.0, -1.0},
      {"bmm 4x(8x16 @ 16x32)", "aten::bmm", Values{t({4, 8, 16}), t({4, 16, 32})},
       Values{t({4, 8, 32})}, 32768.0, -1.0, -1.0, -1.0},
      {"matmul 5x7 @ 7x3", "aten::matmul", Values{t({5, 7}), t({7, 3})}, Values{t({5, 3})}, 210.0,
       -1.0, -1.0, -1.0},
      {"relu saves its output", "aten::relu", Values{t({2, 3, 4})}, Values{t({2, 3, 4})}, 24.0,
       96.0, 96.0, 96.0},
      {"batch_norm: 6 per element", "aten::batch_norm",
       Values{t({8, 16, 4, 4}), t({16}), t({16}), t({16}), t({16}), typed("bool")},
       Values{t({8, 16, 4, 4})}, 12288.0, (2048 + 64) * 4.0, 8192.0, 8192.0},
      {"layer_norm: 8 per element", "aten::layer_norm",
       Values{t({4, 10, 32}), ints({32}), t({32}), t({32})}, Values{t({4, 10, 32})}, 10240.0,
       (1280 + 64) * 4.0, -1.0, -1.0},
      // index_add(x[10,8], 0, index[4] int64, source[4,8]): 32 adds; reads x, index and source.
      {"index_add", "aten::index_add", Values{t({10, 8}), typed("int"), t({4}, "int64"), t({4, 8})},
       Values{t({10, 8})}, 32.0, (320 + 32 + 128) * 1.0, 320.0, 32.0},
      // topk(x[6,5], 2): a selection over every element; values and indices written.
      {"topk", "aten::topk", Values{t({6, 5}), typed("int")}, Values{t({6, 2}), t({6, 2}, "int64")},
       30.0, 120.0, (48 + 96) * 1.0, 96.0},
      {"index_select reads what it selects", "aten::index_select",
       Values{t({100, 8}), typed("int"), t({3}, "int64")}, Values{t({3, 8})}, 0.0, (96 + 24) * 1.0,
       96.0, 24.0},
      {"softmax", "aten::softmax", Values{t({4, 10}), ints({1}), none()}, Values{t({4, 10})}, 200.0,
       -1.0, -1.0, 160.0},
      {"max_pool2d 2x2", "aten::max_pool2d", Values{t({1, 4, 8, 8}), ints({2, 2})},
       Values{t({1, 4, 4, 4})}, 256.0, -1.0, -1.0, -1.0},
      {"max_pool2d kernel [3] means 3x3", "aten::max_pool2d", Values{t({1, 4, 8, 8}), ints({3})},
       Values{t({1, 4, 4, 4})}, 576.0, -1.0, -1.0, -1.0},
      {"embedding reads the rows it looks up", "aten::embedding",
       Values{t({1000, 64}), t({8, 12}, "int64")}, Values{t({8, 12, 64})}, 0.0,
       8 * 12 * 64 * 4.0 + 96 * 8, -1.0, 96 * 8.0},
      {"cross_entropy_loss", "aten::cross_entropy_loss", Values{t({16, 10}), t({16}, "int64")},
       Values{t({})}, 816.0, 16 * 10 * 4.0 + 16 * 8, 4.0, -1.0},
      // lstm_cell: 2*B*4H*(I+H) + 2*B*4H (biases) + 23*B*H with B=4, I=10, H=20
      {"lstm_cell", "aten::lstm_cell",
       Values{t({4, 10}), typed("Tensor[]"), t({80, 10}), t({80, 20}), t({80}), t({80})},
       Values{t({4, 20}), t({4, 20})}, 21680.0, -1.0, -1.0, -1.0},
      {"gru_cell", "aten::gru_cell",
       Values{t({4, 10}), t({4, 20}), t({60, 10}), t({60, 20}), t({60}), t({60})},
       Values{t({4, 20})}, 16240.0, -1.0, -1.0, -1.0},
      // attention: 2*(B*L)*S*E + 5*(B*L)*S + 2*(B*L)*S*Ev with B*L = 128, S = 32, E = Ev = 8
      {"scaled_dot_product_attention", "aten::scaled_dot_product_attention",
       Values{t({2, 4, 16, 8}), t({2, 4, 32, 8}), t({2, 4, 32, 8})}, Values{t({2, 4, 16, 8})},
       151552.0, -1.0, -1.0, -1.0},
      {"add with a scalar reads one tensor", "aten::add", Values{t({3, 4}), scalar(), scalar()},
       Values{t({3, 4})}, 12.0, 48.0, 48.0, 0.0},
      {"views cost nothing", "aten::view", Values{t({3, 4}), ints({12})}, Values{t({12})}, 0.0, 0.0,
       0.0, 0.0},
      {"float64 doubles the bytes", "aten::relu", Values{t({10}, "float64")},
       Values{t({10}, "float64")}, 10.0, 80.0, 80.0, 80.0},
  };
}

}  // namespace

TEST_CASE("the templates give the hand-computed figures") {
  for (const FigureRow& row : handComputedRows()) {
    INFO(row.name);
    const auto cost = symtune::evaluateCost(row.kind, row.in, row.out);
    CHECK(cost.known);
    REQUIRE(cost.flops.has_value());
    CHECK(*cost.flops == figure(row.flops));
    if (row.read >= 0)
      CHECK(cost.bytesRead.value_or(-2) == figure(row.read));
    if (row.written >= 0)
      CHECK(cost.bytesWritten.value_or(-2) == figure(row.written));
    if (row.saved >= 0)
      CHECK(cost.savedBytes.value_or(-2) == figure(row.saved));
  }
}

TEST_CASE("an unknown op is reported, not guessed") {
  const auto cost = symtune::evaluateCost("aten::frobnicate", {t({3})}, {t({3})});
  CHECK(!cost.known);
  CHECK(!cost.flops.has_value());
  CHECK(!cost.bytesRead.has_value());
  CHECK(!cost.bytesWritten.has_value());
  CHECK(!cost.savedBytes.has_value());
}

TEST_CASE("an unknown shape gives no figure for what depends on it") {
  ValueInfo unshaped{"Tensor", std::nullopt, "float32", std::nullopt};
  const auto cost =
      symtune::evaluateCost("aten::addmm", {t({64}), unshaped, t({128, 64})}, {t({32, 64})});
  CHECK(cost.known);
  CHECK(cost.opClass == "matmul");
  CHECK(!cost.flops.has_value());
  CHECK(!cost.bytesRead.has_value());
  CHECK(cost.bytesWritten.value_or(-1) == figure(8192.0));
}

TEST_CASE("every template's expressions parse") {
  const Values in(6, t({2, 3, 4, 5})), out(2, t({2, 3, 4, 5}));
  for (const auto& tpl : symtune::costTemplates()) {
    for (const auto& e : {tpl.flops, tpl.bytesRead, tpl.bytesWritten, tpl.savedBytes}) {
      INFO(tpl.kinds, ": ", e);
      try {
        symtune::evaluateCostExpression(e, in, out);
      } catch (const std::invalid_argument& err) {
        FAIL(err.what());
      }
    }
  }
}

TEST_CASE("malformed expressions throw") {
  struct Row {
    const char* name;
    const char* expression;
  };
  const Row rows[] = {
      {"unclosed parenthesis", "2 * (in0[0]"},
      {"unknown name", "flops(in0)"},
      {"bad reference", "numel(x0)"},
      {"trailing input", "1 2"},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    CHECK_THROWS_AS(symtune::evaluateCostExpression(row.expression, {}, {}), std::invalid_argument);
  }
}
