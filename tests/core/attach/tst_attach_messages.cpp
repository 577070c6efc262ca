// The attach protocol's server messages as typed values: what the runner encodes decodes to the
// same values, every message type decodes, and a message missing a field or holding one of the
// wrong type is a ProtocolError that names the message and the field.

#include "doctest_text.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "symtune/core/attach_messages.h"
#include "symtune/core/attach_protocol.h"

using namespace symtune;
using namespace symtune::attach;
using nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string decodeError(const json& message) {
  try {
    decodeServerMessage(message);
  } catch (const ProtocolError& e) {
    return e.what();
  }
  return "decoded";
}

json rulesField() {
  return {{"in_force", json::array({"nan_guard"})}, {"fired", json::array()}};
}

}  // namespace

// The round trips compare doubles exactly: JSON carries these values without loss, and a message
// must decode to the very values that were encoded.

TEST_CASE("a step message round-trips, a NaN feature as null") {
  StepMessage m;
  m.step = 41;
  m.loss = 2.25;
  m.seconds = 0.125;
  m.features.values.fill(0.5);
  m.features[Feature::GradNanCount] = kNaN;  // sent as null
  m.rulesInForce = {"nan_guard", "clip"};
  m.rulesFired = {"clip"};
  m.skipped = true;
  m.coalesced = 3;
  const json wire = encode(m);
  CHECK(wire["features"][featureName(Feature::GradNanCount)].is_null());
  const auto back = std::get<StepMessage>(decodeServerMessage(wire));
  CHECK(back.step == m.step);
  CHECK(back.loss == m.loss);
  CHECK(back.seconds == m.seconds);
  for (int f = 0; f < kFeatureCount; ++f) {
    INFO(featureName(static_cast<Feature>(f)));
    const double a = m.features.values[f], b = back.features.values[f];
    CHECK(((std::isnan(a) && std::isnan(b)) || a == b));
  }
  CHECK(back.rulesInForce == m.rulesInForce);
  CHECK(back.rulesFired == m.rulesFired);
  CHECK(back.skipped == true);
  CHECK(back.coalesced == 3);
}

TEST_CASE("a nodes message round-trips, absent figures staying absent") {
  NodesMessage m;
  m.step = 8;
  m.attributedSeconds = 0.5;
  m.unattributedSeconds = 0.25;
  NodeFigures a;
  a.node = 3;
  a.calls = 2;
  a.backwardCalls = 1;
  a.forwardSeconds = 0.001;
  a.backwardSeconds = 0.002;
  a.forwardDeviceSeconds = 0.0005;
  a.bytesAllocated = 4096;
  a.backwardBytesAllocated = 8192;
  a.liveBytesAfter = 1 << 20;
  a.cudaBytesAllocated = 4000;
  a.backwardCudaBytesAllocated = 8000;
  a.kernels = 5;
  a.backwardKernels = 3;
  a.kernelList = {{"void gemm<float>(float*)", "kernel", true, 3, 0.00025},
                  {"Memcpy HtoD", "memcpy", false, 1, 0.00001}};
  NodeFigures b;
  b.node = 7;
  m.nodes = {a, b};
  m.parameters = {{"fc.weight", 1.5}, {"fc.bias", kNaN}};
  const auto back = std::get<NodesMessage>(decodeServerMessage(encode(m)));
  CHECK(back.step == 8);
  CHECK(back.attributedSeconds == 0.5);
  REQUIRE(back.nodes.size() == 2);
  CHECK(back.nodes[0].node == 3);
  CHECK(back.nodes[0].forwardDeviceSeconds == std::optional<double>(0.0005));
  CHECK(!back.nodes[0].backwardDeviceSeconds.has_value());
  CHECK(back.nodes[0].liveBytesAfter == std::optional<int64_t>(1 << 20));
  CHECK(!back.nodes[1].liveBytesAfter.has_value());
  // A CUDA run's figures, and GPU activity: there when sent, absent otherwise.
  CHECK(back.nodes[0].cudaBytesAllocated == std::optional<int64_t>(4000));
  CHECK(back.nodes[0].backwardCudaBytesAllocated == std::optional<int64_t>(8000));
  CHECK(back.nodes[0].kernels == std::optional<int64_t>(5));
  CHECK(back.nodes[0].backwardKernels == std::optional<int64_t>(3));
  REQUIRE(back.nodes[0].kernelList.size() == 2);
  CHECK(back.nodes[0].kernelList[0].name == "void gemm<float>(float*)");
  CHECK(back.nodes[0].kernelList[0].kind == "kernel");
  CHECK(back.nodes[0].kernelList[0].backward);
  CHECK(back.nodes[0].kernelList[0].calls == 3);
  CHECK(back.nodes[0].kernelList[0].seconds == 0.00025);
  CHECK(back.nodes[0].kernelList[1].kind == "memcpy");
  CHECK(!back.nodes[1].cudaBytesAllocated.has_value());
  CHECK(!back.nodes[1].kernels.has_value());
  CHECK(back.nodes[1].kernelList.empty());
  REQUIRE(back.parameters.size() == 2);
  CHECK(back.parameters[0].gradNorm == 1.5);
  CHECK(std::isnan(back.parameters[1].gradNorm));
}

TEST_CASE("a rules message round-trips") {
  RulesMessage m;
  m.rules = {{"nan_guard", true, "pack builtin 1.1.0", "Skips a step whose gradients hold NaN"},
             {"mine", false, "this run", ""}};
  const auto back = std::get<RulesMessage>(decodeServerMessage(encode(m)));
  REQUIRE(back.rules.size() == 2);
  CHECK(back.rules[0].description == m.rules[0].description);
  CHECK(back.rules[1].enabled == false);
}

TEST_CASE("a bindings message round-trips; a table that cannot be read is an error in it") {
  BindingTable t;
  t.model = "tagger:0011223344556677";
  t.machine = {"AVX2", 2, "", "2.11.0"};
  Binding b;
  b.site = "#10 aten::select rnn";
  b.node = 10;
  b.pattern = "loop-indexed select";
  b.bucket = "float32 [<=32,<=64,<=1024] x<=64";
  b.reference = "aten";
  b.winner = "unbind-once";
  b.candidates = {{"aten", 1e-4, 2e-2, 0, ""}, {"unbind-once", 5e-5, 4e-4, 0, ""}};
  t.put(b);
  const auto back = std::get<BindingsMessage>(decodeServerMessage(encode(t)));
  REQUIRE(back.table.get() != nullptr);
  CHECK(back.error.empty());
  CHECK(back.table->toJson() == t.toJson());

  const auto broken = std::get<BindingsMessage>(
      decodeServerMessage({{"type", "bindings"}, {"bindings", {{"format", "other"}}}}));
  CHECK(broken.table.get() == nullptr);
  CHECK(broken.error.find("the binding table cannot be read") == 0);
  CHECK_THROWS_AS(decodeServerMessage({{"type", "bindings"}}), ProtocolError);
}

TEST_CASE("a step's remat figures and the remat plan round-trip") {
  StepMessage m;
  m.step = 7;
  m.loss = 1.5;
  m.features.values.fill(0);
  StepRemat r;
  r.budgetBytes = 40e6;
  r.predictedPeak = 38.5e6;
  r.peakBytes = 37.25e6;
  r.recomputed = {"layer1.0", "rnn loop #8"};
  r.attempts = 1;
  r.cached = true;
  r.note = "back to budget_mb 40";
  m.remat = r;
  const auto back = std::get<StepMessage>(decodeServerMessage(encode(m)));
  REQUIRE(back.remat.has_value());
  CHECK(back.remat->budgetBytes == r.budgetBytes);
  CHECK(back.remat->predictedPeak == r.predictedPeak);
  CHECK(back.remat->peakBytes == r.peakBytes);
  CHECK(back.remat->recomputed == r.recomputed);
  CHECK(back.remat->attempts == 1);
  CHECK(back.remat->cached);
  CHECK(back.remat->note == r.note);
  // A calibrating step: no budget, no prediction; a step without a budget: no remat at all.
  m.remat = StepRemat{};
  m.remat->peakBytes = 1e6;
  const json calibrating = encode(m);
  CHECK(calibrating["remat"]["budget_bytes"].is_null());
  CHECK(!calibrating["remat"].contains("note"));
  const auto plain = std::get<StepMessage>(decodeServerMessage(calibrating));
  CHECK(!plain.remat->budgetBytes.has_value());
  CHECK(!plain.remat->predictedPeak.has_value());
  m.remat.reset();
  CHECK(!encode(m).contains("remat"));

  RematMessage plan;
  plan.step = 12;
  plan.strategy = "plan";
  plan.budgetBytes = 41.5e6;
  plan.budgetFraction = 0.5;
  plan.units = {{"rnn", "", {3, 4, 5}, 2.5e6, false}, {"rnn loop #8", "rnn", {5}, 2e6, true}};
  const json wire = encode(plan);
  CHECK(wire["type"] == "remat");
  CHECK(wire["remat"]["budget_mb"].is_null());
  const auto decoded = std::get<RematMessage>(decodeServerMessage(wire));
  CHECK(decoded.step == 12);
  CHECK(decoded.strategy == "plan");
  CHECK(decoded.budgetBytes == plan.budgetBytes);
  CHECK(!decoded.budgetMb.has_value());
  CHECK(decoded.budgetFraction == plan.budgetFraction);
  REQUIRE(decoded.units.size() == 2);
  CHECK(decoded.units[1].name == "rnn loop #8");
  CHECK(decoded.units[1].parent == "rnn");
  CHECK(decoded.units[0].nodes == std::vector<int32_t>{3, 4, 5});
  CHECK(decoded.units[0].savedBytes == 2.5e6);
  CHECK(!decoded.units[0].recomputed);
  CHECK(decoded.units[1].recomputed);

  json bad = wire;
  bad["remat"]["units"][0]["nodes"] = json::array({"3"});
  CHECK(decodeError(bad) == R"(remat: "nodes" must hold node ids)");
  bad = wire;
  bad["remat"]["units"][0].erase("recomputed");
  CHECK(decodeError(bad) == R"(remat: "recomputed" must be true or false)");
}

TEST_CASE("every message type decodes") {
  const auto hello = std::get<HelloMessage>(
      decodeServerMessage({{"type", "hello"},
                           {"protocol", 1},
                           {"engine", "0.1.0"},
                           {"auth", "token"},
                           {"run", {{"session", "demo"}, {"model", "mlp"}, {"steps", 10}}}}));
  CHECK(hello.session == "demo");
  CHECK(hello.model == "mlp");
  CHECK(hello.run["steps"].get<int>() == 10);
  CHECK(
      std::get<StateMessage>(decodeServerMessage({{"type", "state"}, {"state", "paused"}})).state ==
      "paused");
  CHECK(std::get<DroppedMessage>(decodeServerMessage({{"type", "dropped"}, {"nodes", 4}})).nodes ==
        4);
  const auto ack = std::get<ReplyMessage>(
      decodeServerMessage({{"type", "ack"}, {"id", 5}, {"command", "pause"}, {"state", "paused"}}));
  CHECK(ack.ok);
  REQUIRE(ack.id.has_value());
  CHECK(*ack.id == 5);
  CHECK(ack.result["state"].get<std::string>() == "paused");
  CHECK(!ack.result.contains("type"));
  CHECK(!ack.result.contains("id"));
  const auto error =
      std::get<ReplyMessage>(decodeServerMessage({{"type", "error"}, {"reason", "wrong token"}}));
  CHECK(!error.ok);
  CHECK(!error.id.has_value());
  CHECK(error.reason == "wrong token");

  Graph g;
  g.name = "tiny";
  GraphNode n;
  n.kind = "aten::relu";
  g.addNode(n);
  const auto graph = std::get<GraphMessage>(
      decodeServerMessage({{"type", "graph"}, {"graph", json::parse(toJson(g))}}));
  REQUIRE(graph.graph.get() != nullptr);
  CHECK(graph.graph->nodes().size() == 1);
  const auto none = std::get<GraphMessage>(
      decodeServerMessage({{"type", "graph"}, {"graph", {{"error", "no IR"}}}}));
  CHECK(none.graph.get() == nullptr);
  CHECK(none.error == "no IR");
  const auto broken = std::get<GraphMessage>(
      decodeServerMessage({{"type", "graph"}, {"graph", {{"format", "other"}}}}));
  CHECK(broken.graph.get() == nullptr);
  INFO(broken.error);
  CHECK(broken.error.find("cannot be read") != std::string::npos);
}

TEST_CASE("a bad message is a ProtocolError naming the message and the field") {
  const std::string step = json{
      {"type", "step"},
      {"step", 1},
      {"loss", 1.0},
      {"seconds", 0.1},
      {"features", json::object()},
      {"rules", rulesField()},
      {"skipped", false}}.dump();
  auto without = [&](const char* key) {
    json m = json::parse(step);
    m.erase(key);
    return m.dump();
  };
  auto withTextLoss = [&] {
    json m = json::parse(step);
    m["loss"] = "low";
    return m.dump();
  };
  struct Row {
    const char* name;
    std::string message;
    std::string error;
  };
  const Row rows[] = {
      {"unknown type", R"({"type": "gossip"})", R"(unknown server message type "gossip")"},
      {"no type", R"({"step": 1})", R"("type" must be a string)"},
      {"a well-formed step", step, "decoded"},
      {"step without loss", without("loss"), R"(step: "loss" is missing)"},
      {"step without rules", without("rules"), R"(step: "rules" is missing)"},
      {"step with a text loss", withTextLoss(), R"(step: "loss" must be a number)"},
      {"node id not a number",
       R"({"type": "nodes", "nodes": {"step": 1, "attributed_s": 0, "unattributed_s": 0,
           "nodes": [{"node": "0", "calls": 1, "backward_calls": 0, "forward_s": 0,
           "backward_s": 0, "bytes_allocated": 0, "backward_bytes_allocated": 0}]}})",
       R"(nodes: "node" must be an integer)"},
      {"node id missing",
       R"({"type": "nodes", "nodes": {"step": 1, "attributed_s": 0, "unattributed_s": 0,
           "nodes": [{"calls": 1}]}})",
       R"(nodes: "node" must be an integer)"},
      {"rules not a list", R"({"type": "rules", "rules": {}})",
       R"(rules: "rules" must be an array)"},
      {"rule without enabled", R"({"type": "rules", "rules": [{"name": "a"}]})",
       R"(rules: "enabled" must be true or false)"},
      {"state without state", R"({"type": "state"})", R"(state: "state" must be a string)"},
      {"ack without command", R"({"type": "ack", "id": 1})", R"(ack: "command" must be a string)"},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    CHECK(decodeError(json::parse(row.message)) == row.error);
  }
}

// Commands travel typed too: what the studio encodes, the runner parses to the same command.
TEST_CASE("commands round-trip through their encoding") {
  for (Command c : {Command::toggleRule("nan_guard", false), Command::addRule("rule r { }"),
                    Command::removeRule("r"), Command::setSampling(5), Command::named("snapshot"),
                    Command::setBudget(512.5, std::nullopt), Command::setBudget(std::nullopt, 0.25),
                    Command::pin("threads", 2.0), Command::pin("remat_budget", std::nullopt)}) {
    INFO(c.name);
    c.id = 9;
    const Command back = parseCommand(encodeCommand(c));
    CHECK(back.id == 9);
    CHECK(back.name == c.name);
    CHECK(back.rule == c.rule);
    CHECK(back.enabled == c.enabled);
    CHECK(back.source == c.source);
    CHECK(back.every == c.every);
    CHECK(back.budgetMb == c.budgetMb);
    CHECK(back.budgetFraction == c.budgetFraction);
    CHECK(back.knob == c.knob);
    CHECK(back.value == c.value);
  }
}

TEST_CASE("a step's configuration and decision, and the control message, round-trip") {
  StepMessage m;
  m.step = 7;
  m.features.values.fill(0);
  StepControl c;
  c.microbatches = 4;
  c.configuration = "microbatches 2, threads 1, remat_budget 0.5";
  c.knobs = {{"microbatches", 2}, {"remat_budget", 0.5}, {"threads", 1}};  // by name
  c.decided = true;
  c.predictedSamplesPerSecond = 812.5;
  c.samplesPerSecond = 790.25;
  c.explored = true;
  c.alternatives = {{"microbatches 1, threads 1, remat_budget 0.5", 800}};
  c.batchSignals = {{"batch_size", 32}, {"sequence_length", 512}};
  c.drivers = {{"sequence_length 512", 1.25}, {"microbatches 2 rather than 1", 0.9}};
  c.violation = "the loss diverged (nan against its average 2.1) when the configuration changed";
  c.heldBack =
      "microbatches 8, threads 1, remat_budget 0.3: as slow as it may be, it could take "
      "the run below 0.97 of the throughput of microbatches 1, threads 2, remat_budget "
      "0.6 since the warm-up";
  c.levelMoved = true;
  c.idle = {{"binding_explore", 1}};
  m.control = c;
  const json wire = encode(m);
  CHECK(wire["control"]["knobs"]["threads"] == 1);
  const auto back = std::get<StepMessage>(decodeServerMessage(wire));
  REQUIRE(back.control.has_value());
  CHECK(back.control->microbatches == 4);
  CHECK(back.control->configuration == c.configuration);
  CHECK(back.control->knobs == c.knobs);
  CHECK(back.control->decided);
  CHECK(back.control->predictedSamplesPerSecond == 812.5);
  CHECK(back.control->samplesPerSecond == 790.25);
  CHECK(back.control->explored);
  REQUIRE(back.control->alternatives.size() == 1);
  CHECK(back.control->alternatives[0].configuration == c.alternatives[0].configuration);
  CHECK(back.control->alternatives[0].predictedSamplesPerSecond == 800);
  CHECK(back.control->batchSignals == c.batchSignals);  // by name, as the knobs
  CHECK(back.control->drivers == c.drivers);            // largest first, as sent
  CHECK(back.control->violation == c.violation);
  CHECK(back.control->heldBack == c.heldBack);
  CHECK(back.control->levelMoved);
  CHECK(back.control->idle == c.idle);
  {  // a peer from before level_moved and idle: none moved, none idle
    json older = wire;
    older["control"]["decision"].erase("level_moved");
    older["control"]["decision"].erase("idle");
    const auto fromOlder = std::get<StepMessage>(decodeServerMessage(older));
    CHECK_FALSE(fromOlder.control->levelMoved);
    CHECK(fromOlder.control->idle.empty());
  }
  // A fixed configuration: no decision; a step not learnt from: no measure.
  m.control->decided = false;
  CHECK_FALSE(encode(m)["control"].contains("decision"));
  CHECK_FALSE(std::get<StepMessage>(decodeServerMessage(encode(m))).control->decided);
  m.control->decided = true;
  m.control->samplesPerSecond.reset();
  CHECK_FALSE(std::get<StepMessage>(decodeServerMessage(encode(m))).control->samplesPerSecond);
  m.control.reset();
  CHECK_FALSE(encode(m).contains("control"));

  ControlMessage space;
  space.mode = "online";
  space.knobs = {{"microbatches", {1, 2, 4}, 2, "powers of two", std::nullopt},
                 {"threads", {1, 2}, 1, "the machine's 2", 1.0}};
  space.excluded = {"microbatches 4, threads 2, remat_budget as the session"};
  const json sent = encode(space);
  CHECK(sent["type"] == "control");
  const auto decoded = std::get<ControlMessage>(decodeServerMessage(sent));
  CHECK(decoded.mode == "online");
  REQUIRE(decoded.knobs.size() == 2);
  CHECK(decoded.knobs[0].values == std::vector<double>{1, 2, 4});
  CHECK(decoded.knobs[0].current == 2);
  CHECK(decoded.knobs[0].constraint == "powers of two");
  CHECK_FALSE(decoded.knobs[0].pinned.has_value());
  CHECK(decoded.knobs[1].pinned == 1.0);
  CHECK(decoded.excluded == space.excluded);
  json bad = sent;
  bad["control"]["excluded"] = json::array({2});
  CHECK(decodeError(bad) == R"(control: "excluded" must hold strings)");
  bad = sent;
  bad["control"]["knobs"][0]["values"] = json::array({"one"});
  CHECK(decodeError(bad) == R"(control: "values" must hold numbers)");
  bad = wire;
  bad["control"].erase("configuration");
  CHECK(decodeError(bad) == R"(step: "configuration" must be a string)");
}

TEST_CASE("a validation message round-trips, its accuracies absent when the run sent null") {
  using symtune::attach::ValidationMessage;
  const ValidationMessage sent{60, 24, 0.125, 0.75, std::nullopt};
  const auto got = std::get<ValidationMessage>(decodeServerMessage(encode(sent)));
  CHECK(got.step == 60);
  CHECK(got.samples == 24);
  CHECK(got.loss == 0.125);
  REQUIRE(got.top1.has_value());
  CHECK(*got.top1 == 0.75);
  CHECK(!got.top5.has_value());
  const auto regression = std::get<ValidationMessage>(decodeServerMessage(
      {{"type", "validation"},
       {"validation", {{"step", 5}, {"samples", 16}, {"loss", 0.5}, {"top1", nullptr}}}}));
  CHECK(!regression.top1.has_value());
  CHECK_THROWS_AS(decodeServerMessage({{"type", "validation"}, {"validation", {{"step", 5}}}}),
                  symtune::attach::ProtocolError);
}
