// DynaCompiler's cost model (Note [Binding cost model], docs/binding.md "The cost model"): an
// unseen bucket is bound without measuring when its site's measured buckets settle it, or its
// siblings in the bucket, or its pattern's measured buckets, or a close race among its siblings
// (Note [A close race]); a margin is carried to another bucket's size only as far as it trends.
// Each case adopts a made-up table of measurements and counts what the binder then predicts and
// measures on the steps model.

#include "doctest_torch.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "steps_model.h"
#include "symtune/binding/binder.h"
#include "symtune/binding/shape_bucket.h"
#include "symtune/graph/symugen.h"

namespace {

using symtune::binding::Binder;
using symtune::binding::BinderOptions;
using symtune::test::checkSame;
using symtune::test::forwardBackward;
using symtune::test::here;
using symtune::test::steps;

}  // namespace

TEST_CASE("the cost model binds a bucket its site's measured buckets settle") {
  symtune::SyMuGen gen(steps(), "steps");
  Binder probe(gen.staticGraph(), here());
  forwardBackward(gen, &probe, 3, 5);

  // `buckets` measured buckets per site: the given winner, the runner-up `ratio` times slower
  // (`firstRatio` in the first bucket, when given).
  const auto tableWith = [&](double ratio, bool agree, int buckets = 2, double firstRatio = 0) {
    symtune::BindingTable t = probe.table();
    t.bindings.clear();
    for (const auto& site : probe.sites()) {
      for (int k = 0; k < buckets; ++k) {
        symtune::Binding b;
        b.site = site.name;
        b.node = site.id.value();
        b.pattern = site.pattern;
        b.bucket = "made up " + std::to_string(k);
        b.reference = "aten";
        const std::string other = site.loop != nullptr ? "unbind-once" : "alias";
        b.winner = agree || k == 0 ? other : "aten";
        const double r = k == 0 && firstRatio > 0 ? firstRatio : ratio;
        b.candidates = {{"aten", b.winner == "aten" ? 1e-5 : r * 1e-5, 0, 0, ""},
                        {other, b.winner == "aten" ? r * 1e-5 : 1e-5, 0, 0, ""}};
        t.put(b);
      }
    }
    return t;
  };

  Binder settled(gen.staticGraph(), here());
  REQUIRE_FALSE(settled.adopt(tableWith(4.0, true)).has_value());
  checkSame(forwardBackward(gen, &settled, 3, 5), forwardBackward(gen, nullptr, 3, 5));
  CHECK(settled.measurements() == 0);
  CHECK(settled.predictions() == 4);
  for (const auto& b : settled.table().bindings) {
    if (b.bucket.rfind("made up", 0) != 0) {
      CHECK(b.predicted);
      CHECK(b.winner != "aten");
    }
  }

  Binder close(gen.staticGraph(), here());  // 1.2x is not sure enough
  REQUIRE_FALSE(close.adopt(tableWith(1.2, true)).has_value());
  forwardBackward(gen, &close, 3, 5);
  CHECK(close.predictions() == 0);
  CHECK(close.measurements() == 4);

  // More agreeing buckets ask for less margin: three of a site's own at 1.3x settle; two do
  // not, but the four of its pattern (two sites, two buckets each) do; one each does not.
  for (const auto& [buckets, settles] :
       std::vector<std::pair<int, bool>>{{3, true}, {2, true}, {1, false}}) {
    INFO(buckets, " measured buckets a site at 1.3x");
    Binder binder(gen.staticGraph(), here());
    REQUIRE_FALSE(binder.adopt(tableWith(1.3, true, buckets)).has_value());
    forwardBackward(gen, &binder, 3, 5);
    CHECK(binder.predictions() == (settles ? 4 : 0));
    CHECK(binder.measurements() == (settles ? 0 : 4));
  }

  // The pattern's rule reads the median margin, and every margin above 1.1: a bucket at 1.2x
  // among others at 2x settles; one at 1.05x does not.
  for (const auto& [first, settles] :
       std::vector<std::pair<double, bool>>{{1.2, true}, {1.05, false}}) {
    INFO("a bucket at ", first, "x, the others at 2x");
    Binder binder(gen.staticGraph(), here());
    REQUIRE_FALSE(binder.adopt(tableWith(2.0, true, 2, first)).has_value());
    forwardBackward(gen, &binder, 3, 5);
    CHECK(binder.predictions() == (settles ? 4 : 0));
    CHECK(binder.measurements() == (settles ? 0 : 4));
  }

  Binder split(gen.staticGraph(), here());  // the buckets disagree
  REQUIRE_FALSE(split.adopt(tableWith(4.0, false)).has_value());
  forwardBackward(gen, &split, 3, 5);
  CHECK(split.predictions() == 0);
  CHECK(split.measurements() == 4);

  // Evaluation buckets say nothing of training ones (Note [Evaluation buckets] in binder.cpp):
  // the same table, its buckets evaluation ones, settles none of the training steps' buckets.
  const symtune::BindingTable trained = tableWith(4.0, true);
  symtune::BindingTable evaluated = trained;
  evaluated.bindings.clear();
  for (symtune::Binding b : trained.bindings) {
    b.bucket += symtune::binding::kEvaluationBucket;
    evaluated.put(b);
  }
  Binder otherMode(gen.staticGraph(), here());
  REQUIRE_FALSE(otherMode.adopt(evaluated).has_value());
  forwardBackward(gen, &otherMode, 3, 5);
  CHECK(otherMode.predictions() == 0);
  CHECK(otherMode.measurements() == 4);
}

TEST_CASE("the cost model binds a close race among a site's siblings to the one nearest") {
  symtune::SyMuGen gen(steps(), "steps");
  Binder probe(gen.staticGraph(), here());
  forwardBackward(gen, &probe, 3, 5);
  // Siblings of every site, measured in its very bucket: the site's candidate (alias or
  // unbind-once) and the ATen op taking these times (x 1e-5 s), the winner as a measurement
  // chooses it (ahead of the ATen op by the binder's 3 %); `refusedLast`: the candidate refused
  // at the last sibling.
  const auto tableWith = [&](std::vector<double> candidate, std::vector<double> aten,
                             bool refusedLast = false) {
    symtune::BindingTable t = probe.table();
    t.bindings.clear();
    for (const auto& site : probe.sites()) {
      const auto real = probe.table().ofSite(site.name);
      REQUIRE_FALSE(real.empty());
      const std::string other = site.loop != nullptr ? "unbind-once" : "alias";
      for (size_t k = 0; k < candidate.size(); ++k) {
        symtune::Binding b;
        b.site = "sibling " + std::to_string(k) + " of " + site.name;
        b.node = 1000 + static_cast<int64_t>(k);
        b.pattern = site.pattern;
        b.bucket = real.front()->bucket;
        b.reference = "aten";
        const bool refused = refusedLast && k + 1 == candidate.size();
        b.winner = !refused && candidate[k] < 0.97 * aten[k] ? other : "aten";
        b.candidates = {{"aten", aten[k] * 1e-5, 0, 0, ""},
                        {other, candidate[k] * 1e-5, 0, 0, refused ? "differs from aten" : ""}};
        t.put(b);
      }
    }
    return t;
  };
  struct Case {
    const char* what;
    std::vector<double> candidate, aten;
    bool refusedLast;
    const char* predicts;  // the winner bound without measuring; nullptr: measured
  };
  for (const Case& c : std::vector<Case>{
           {"ahead at four of five, behind at one",
            {1, 1, 1, 1, 1.1},
            {1.3, 1.3, 1.3, 1.3, 1},
            false,
            "candidate"},
           {"within 4 % either way: the ATen op",
            {1, 1, 1.04, 1.04, 1.04},
            {1.05, 1.05, 1, 1, 1},
            false,
            "aten"},
           {"each 1.5x behind at some: measured",
            {1, 1, 1.5, 1.5, 1.5},
            {1.5, 1.5, 1, 1, 1},
            false,
            nullptr},
           {"three siblings are too few", {1, 1, 1.1}, {1.3, 1.3, 1}, false, nullptr},
           {"refused at one of five", {1, 1, 1, 1, 1}, {1.3, 1.3, 1.3, 1.3, 1.3}, true, nullptr}}) {
    INFO(std::string(c.what));
    Binder binder(gen.staticGraph(), here());
    REQUIRE_FALSE(binder.adopt(tableWith(c.candidate, c.aten, c.refusedLast)).has_value());
    checkSame(forwardBackward(gen, &binder, 3, 5), forwardBackward(gen, nullptr, 3, 5));
    CHECK(binder.predictions() == (c.predicts != nullptr ? 4 : 0));
    CHECK(binder.measurements() == (c.predicts != nullptr ? 0 : 4));
    for (const auto& b : binder.table().bindings) {
      if (b.site.rfind("sibling", 0) == 0 || c.predicts == nullptr)
        continue;
      CHECK(b.predicted);
      CHECK((b.winner == "aten") == (std::string(c.predicts) == "aten"));
    }
  }

  // Under a memory slack the siblings' winners are not the fastest: no close race is read.
  BinderOptions slack;
  slack.memorySlack = 0.1;
  Binder lean(gen.staticGraph(), here(), slack);
  auto table = tableWith({1, 1, 1, 1, 1.1}, {1.3, 1.3, 1.3, 1.3, 1});
  table.memorySlack = 0.1;
  REQUIRE_FALSE(lean.adopt(table).has_value());
  forwardBackward(gen, &lean, 3, 5);
  CHECK(lean.predictions() == 0);
}

TEST_CASE("the cost model carries a site's margin to a bucket's size only as far as it trends") {
  symtune::SyMuGen gen(steps(), "steps");
  Binder probe(gen.staticGraph(), here());
  forwardBackward(gen, &probe, 3, 5);
  // Two measured buckets per site at `fractions` of the real bucket's size, the winner ahead by
  // the `margins`.
  const auto tableWith = [&](std::vector<double> fractions, std::vector<double> margins) {
    symtune::BindingTable t = probe.table();
    t.bindings.clear();
    for (const auto& site : probe.sites()) {
      const auto real = probe.table().ofSite(site.name);
      REQUIRE_FALSE(real.empty());
      const auto volume = symtune::binding::bucketVolume(real.front()->bucket);
      REQUIRE(volume.has_value());
      for (size_t k = 0; k < fractions.size(); ++k) {
        symtune::Binding b;
        b.site = site.name;
        b.node = site.id.value();
        b.pattern = site.pattern;
        // (",1": two buckets of one size are two keys)
        b.bucket = "float32 [<=" + std::to_string(std::llround(*volume * fractions[k])) +
                   (k % 2 == 1 ? ",1]" : "]");
        b.reference = "aten";
        b.winner = site.loop != nullptr ? "unbind-once" : "alias";
        b.candidates = {{"aten", margins[k] * 1e-5, 0, 0, ""}, {b.winner, 1e-5, 0, 0, ""}};
        t.put(b);
      }
    }
    return t;
  };
  struct Case {
    const char* what;
    std::vector<double> fractions, margins;
    bool predicts;
  };
  for (const Case& c : std::vector<Case>{
           {"growing with the size", {0.25, 0.5}, {1.6, 2.2}, true},
           {"shrinking with the size: gone by twice the largest", {0.25, 0.5}, {2.6, 1.6}, false},
           {"within the sizes measured", {0.5, 2.0}, {2.0, 1.6}, true},
           {"one size, near", {0.25, 0.25}, {2.0, 2.0}, true},
           {"one size, far above", {256, 256}, {4.0, 4.0}, false}}) {
    INFO(std::string(c.what));
    // Nothing measured (a fresh measurement at the real size would be evidence too): predicted,
    // or run as written.
    BinderOptions tableOnly;
    tableOnly.budget = 0;
    Binder binder(gen.staticGraph(), here(), tableOnly);
    REQUIRE_FALSE(binder.adopt(tableWith(c.fractions, c.margins)).has_value());
    checkSame(forwardBackward(gen, &binder, 3, 5), forwardBackward(gen, nullptr, 3, 5));
    CHECK(binder.predictions() == (c.predicts ? 4 : 0));
    CHECK(binder.measurements() == 0);
  }
}
