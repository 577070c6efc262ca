// The binding table as data: what it keeps survives a save and a load, a table measured on
// another kind of machine or for another model is refused with the reason, and a malformed file
// is refused naming the field.

#include "doctest_text.h"

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "symtune/core/binding_table.h"
#include "test_files.h"

namespace {

symtune::MachineFingerprint machine() {
  return {"AVX2", 2, "", "2.11.0"};
}

symtune::BindingTable sample() {
  symtune::BindingTable t;
  t.machine = machine();
  t.model = "tagger:00ff00ff00ff00ff";
  symtune::Binding b;
  b.site = "#10 aten::select rnn";
  b.node = 10;
  b.pattern = "loop-indexed select";
  b.bucket = "float32 [<=32,<=64,768] x<=64";
  b.reference = "aten";
  b.winner = "unbind-once";
  b.candidates = {{"aten", 2e-5, 4e-3, 0, ""},
                  {"unbind-once", 1e-5, 1e-4, 0, ""},
                  {"nan-maker", 1e-5, 1e-4, std::numeric_limits<double>::infinity(),
                   "differs from aten by inf (tolerance 1e-06)"}};
  b.nodes = {11, 12};  // as for a site of several nodes
  t.put(b);
  symtune::Binding p = b;
  p.nodes.clear();
  p.bucket = "float32 [<=32,<=128,768] x<=128";
  p.candidates.clear();
  p.predicted = true;
  t.put(p);
  return t;
}

std::string errorOf(const std::string& text) {
  try {
    symtune::BindingTable::fromJson(text, "t.json");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a table survives a save and a load") {
  symtune::test::TempDir dir;
  const std::string path = (dir.path() / "t.bindings.json").string();
  const symtune::BindingTable t = sample();
  t.save(path);
  const symtune::BindingTable back = symtune::BindingTable::load(path);
  CHECK(back.machine == t.machine);
  CHECK(back.model == t.model);
  REQUIRE(back.bindings.size() == 2);
  const symtune::Binding* b = back.find("#10 aten::select rnn", "float32 [<=32,<=64,768] x<=64");
  REQUIRE(b != nullptr);
  CHECK(b->winner == "unbind-once");
  CHECK(b->node == 10);
  CHECK(b->nodes == std::vector<int32_t>{11, 12});
  CHECK(back.bindings[1].nodes.empty());
  REQUIRE(b->candidates.size() == 3);
  CHECK(std::isinf(b->candidates[2].maxError));  // written as null: JSON has no infinity
  CHECK(b->speedup() == doctest::Approx((2e-5 + 4e-3) / (1e-5 + 1e-4)).epsilon(1e-12));
  CHECK(back.bindings[1].predicted);
  CHECK(back.bindings[1].speedup() == 1.0);  // predicted: nothing measured
  CHECK(back.toJson() == t.toJson());
}

TEST_CASE("put replaces the binding of the same site and bucket") {
  symtune::BindingTable t = sample();
  symtune::Binding b = t.bindings[0];
  b.winner = "aten";
  t.put(b);
  CHECK(t.bindings.size() == 2);
  CHECK(t.bindings[0].winner == "aten");
  CHECK(t.ofSite("#10 aten::select rnn").size() == 2);
  CHECK(t.ofSite("#11 aten::slice rnn").empty());
}

TEST_CASE("a table is used only for its model on its kind of machine") {
  const symtune::BindingTable t = sample();
  CHECK_FALSE(t.refusal(machine(), "tagger:00ff00ff00ff00ff").has_value());
  // The session's name may change; the model's ops decide.
  CHECK_FALSE(t.refusal(machine(), "renamed:00ff00ff00ff00ff").has_value());

  const auto otherModel = t.refusal(machine(), "tagger:0123456789abcdef");
  REQUIRE(otherModel.has_value());
  CHECK(otherModel->find("another model") != std::string::npos);

  symtune::MachineFingerprint wider = machine();
  wider.cpu = "AVX512";
  const auto otherCpu = t.refusal(wider, t.model);
  REQUIRE(otherCpu.has_value());
  CHECK(otherCpu->find("another kind of machine") != std::string::npos);
  CHECK(otherCpu->find("AVX512") != std::string::npos);

  symtune::MachineFingerprint threads = machine();
  threads.threads = 16;
  CHECK(t.refusal(threads, t.model).has_value());
  symtune::MachineFingerprint gpu = machine();
  gpu.gpu = "NVIDIA H200";
  CHECK(t.refusal(gpu, t.model).has_value());
  symtune::MachineFingerprint version = machine();
  version.libtorch = "2.5.1";
  CHECK(t.refusal(version, t.model).has_value());
}

TEST_CASE("a malformed table is refused naming the field") {
  const std::string good = sample().toJson();
  CHECK(errorOf(good).empty());
  CHECK(errorOf("{").find("t.json: not JSON") == 0);
  CHECK(errorOf("[]").find("expected a binding table") != std::string::npos);

  std::string wrongFormat = good;
  wrongFormat.replace(wrongFormat.find("symtune-bindings"), 16, "symtune-sessions");
  CHECK(errorOf(wrongFormat).find("format") != std::string::npos);

  std::string badWinner = good;
  badWinner.replace(badWinner.find("\"winner\": \"unbind-once\""), 23, "\"winner\": \"nothing\"");
  const std::string why = errorOf(badWinner);
  CHECK(why.find("bindings[0].winner") != std::string::npos);
  CHECK(why.find("not among the measured candidates") != std::string::npos);

  std::string badTime = good;
  badTime.replace(badTime.find("\"forward_seconds\": 2e-05"), 24, "\"forward_seconds\": \"x\"");
  CHECK(errorOf(badTime).find("bindings[0].candidates[0].forward_seconds") != std::string::npos);

  std::string badNodes = good;
  const size_t nodesAt = badNodes.find("\"nodes\": [");
  REQUIRE(nodesAt != std::string::npos);
  badNodes.replace(nodesAt, badNodes.find(']', nodesAt) + 1 - nodesAt, "\"nodes\": [11, \"x\"]");
  CHECK(errorOf(badNodes).find("bindings[0].nodes[1]: expected a node id") != std::string::npos);

  std::string twice = good;  // JSON keeps the last: the first would pass unseen
  twice.replace(twice.find("\"winner\": \"unbind-once\""), 23,
                "\"winner\": \"aten\", \"winner\": \"unbind-once\"");
  CHECK(errorOf(twice) ==
        "t.json: bindings[0].winner: given twice in one object (JSON keeps only the last): say "
        "it once");

  std::string unknown = good;
  unknown.replace(unknown.find("\"pattern\""), 9, "\"patern\"");
  CHECK(errorOf(unknown).find("patern") != std::string::npos);

  CHECK_THROWS_WITH_AS(symtune::BindingTable::load("/nonexistent/t.json"),
                       doctest::Contains("/nonexistent/t.json: cannot open"), std::runtime_error);
}

// What no binder writes: the decision would bind a candidate the file itself records as wrong,
// or read a node id or a time as another. Until 2026-12-07 each of these loaded.
TEST_CASE("a table the binder could not have written is refused naming the field") {
  const nlohmann::json good = nlohmann::json::parse(sample().toJson());
  const auto refusal = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json t = good;
    change(t);
    return errorOf(t.dump());
  };
  const auto first = [](nlohmann::json& t) -> nlohmann::json& { return t["bindings"][0]; };
  CHECK(refusal([&](nlohmann::json& t) { first(t)["winner"] = "nan-maker"; }) ==
        "t.json: bindings[0].winner: \"nan-maker\" is recorded as refused (differs from aten by "
        "inf (tolerance 1e-06))");
  CHECK(refusal([&](nlohmann::json& t) {
          std::swap(first(t)["candidates"][0], first(t)["candidates"][1]);
        }) ==
        "t.json: bindings[0].candidates[0]: expected the reference, \"aten\", found "
        "\"unbind-once\"");
  CHECK(refusal([&](nlohmann::json& t) {
          first(t)["candidates"][0]["refused"] = "failed";
          first(t)["winner"] = "unbind-once";
        }) == "t.json: bindings[0].candidates[0].refused: the reference cannot be refused");
  CHECK(refusal([&](nlohmann::json& t) { first(t)["node"] = 4294967306LL; }) ==
        "t.json: bindings[0].node: expected a node id (an integer in [0, 2^31), or -1 for none), "
        "found 4294967306");
  CHECK(refusal([&](nlohmann::json& t) { first(t)["nodes"][1] = -2; }) ==
        "t.json: bindings[0].nodes[1]: expected a node id (an integer in [0, 2^31), or -1 for "
        "none), found -2");
  CHECK(refusal([&](nlohmann::json& t) { first(t)["candidates"][1]["backward_seconds"] = -1; }) ==
        "t.json: bindings[0].candidates[1].backward_seconds: expected a number at least 0");
  CHECK(refusal([&](nlohmann::json& t) {
          first(t)["candidates"][1]["kept_bytes"] = -5;
        }).find("bindings[0].candidates[1].kept_bytes: expected a byte count") !=
        std::string::npos);
  CHECK(refusal([&](nlohmann::json& t) { t["bindings"].push_back(t["bindings"][0]); }) ==
        "t.json: bindings[2]: site #10 aten::select rnn on bucket float32 [<=32,<=64,768] x<=64 "
        "is bound already, at bindings[0]");
}

TEST_CASE("describe names each site, bucket, winner, speedup and pattern") {
  const std::string text = sample().describe();
  CHECK(text.find("measured on AVX2, 2 threads, no GPU, LibTorch 2.11.0") != std::string::npos);
  CHECK(text.find("#10 aten::select rnn  [float32 [<=32,<=64,768] x<=64]  -> unbind-once") !=
        std::string::npos);
  // A predicted binding has no times: no speedup is made up for it.
  CHECK(text.find("(predicted, not measured)  (") != std::string::npos);
  CHECK(text.find("(predicted, not measured)  1.00x") == std::string::npos);
  CHECK(text.find("over aten  (loop-indexed select, 3 nodes)\n") != std::string::npos);
  CHECK(text.find("aten: forward 20.0 us, backward 4.00 ms") != std::string::npos);
}
