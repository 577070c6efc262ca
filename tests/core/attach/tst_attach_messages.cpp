// The attach protocol's server messages as typed values: what the runner encodes decodes to the
// same values, every message type decodes, and a message missing a field or holding one of the
// wrong type is a ProtocolError that names the message and the field.

#include <cmath>
#include <limits>

#include "symtune/core/attach_messages.h"
#include "symtune/core/attach_protocol.h"
#include "test_main.h"

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

class TestAttachMessages : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void stepRoundTrips() {
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
    QVERIFY(wire["features"][featureName(Feature::GradNanCount)].is_null());
    const auto back = std::get<StepMessage>(decodeServerMessage(wire));
    QCOMPARE(back.step, m.step);
    QCOMPARE(back.loss, m.loss);
    QCOMPARE(back.seconds, m.seconds);
    for (int f = 0; f < kFeatureCount; ++f) {
      const double a = m.features.values[f], b = back.features.values[f];
      QVERIFY((std::isnan(a) && std::isnan(b)) || a == b);
    }
    QCOMPARE(back.rulesInForce, m.rulesInForce);
    QCOMPARE(back.rulesFired, m.rulesFired);
    QCOMPARE(back.skipped, true);
    QCOMPARE(back.coalesced, int64_t{3});
  }

  void nodesRoundTrip() {
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
    NodeFigures b;
    b.node = 7;
    m.nodes = {a, b};
    m.parameters = {{"fc.weight", 1.5}, {"fc.bias", kNaN}};
    const auto back = std::get<NodesMessage>(decodeServerMessage(encode(m)));
    QCOMPARE(back.step, int64_t{8});
    QCOMPARE(back.attributedSeconds, 0.5);
    QCOMPARE(back.nodes.size(), size_t{2});
    QCOMPARE(back.nodes[0].node, 3);
    QCOMPARE(back.nodes[0].forwardDeviceSeconds, std::optional<double>(0.0005));
    QVERIFY(!back.nodes[0].backwardDeviceSeconds);
    QCOMPARE(back.nodes[0].liveBytesAfter, std::optional<int64_t>(1 << 20));
    QVERIFY(!back.nodes[1].liveBytesAfter);
    QCOMPARE(back.parameters.size(), size_t{2});
    QCOMPARE(back.parameters[0].gradNorm, 1.5);
    QVERIFY(std::isnan(back.parameters[1].gradNorm));
  }

  void rulesRoundTrip() {
    RulesMessage m;
    m.rules = {{"nan_guard", true, "pack builtin 1.1.0", "Skips a step whose gradients hold NaN"},
               {"mine", false, "this run", ""}};
    const auto back = std::get<RulesMessage>(decodeServerMessage(encode(m)));
    QCOMPARE(back.rules.size(), size_t{2});
    QCOMPARE(back.rules[0].description, m.rules[0].description);
    QCOMPARE(back.rules[1].enabled, false);
  }

  void everyTypeDecodes() {
    const auto hello = std::get<HelloMessage>(
        decodeServerMessage({{"type", "hello"},
                             {"protocol", 1},
                             {"engine", "0.1.0"},
                             {"auth", "token"},
                             {"run", {{"session", "demo"}, {"model", "mlp"}, {"steps", 10}}}}));
    QCOMPARE(hello.session, std::string("demo"));
    QCOMPARE(hello.model, std::string("mlp"));
    QCOMPARE(hello.run["steps"].get<int>(), 10);
    QCOMPARE(
        std::get<StateMessage>(decodeServerMessage({{"type", "state"}, {"state", "paused"}})).state,
        std::string("paused"));
    QCOMPARE(
        std::get<DroppedMessage>(decodeServerMessage({{"type", "dropped"}, {"nodes", 4}})).nodes,
        int64_t{4});
    const auto ack = std::get<ReplyMessage>(decodeServerMessage(
        {{"type", "ack"}, {"id", 5}, {"command", "pause"}, {"state", "paused"}}));
    QVERIFY(ack.ok);
    QCOMPARE(*ack.id, int64_t{5});
    QCOMPARE(ack.result["state"].get<std::string>(), std::string("paused"));
    QVERIFY(!ack.result.contains("type") && !ack.result.contains("id"));
    const auto error =
        std::get<ReplyMessage>(decodeServerMessage({{"type", "error"}, {"reason", "wrong token"}}));
    QVERIFY(!error.ok && !error.id);
    QCOMPARE(error.reason, std::string("wrong token"));

    Graph g;
    g.name = "tiny";
    GraphNode n;
    n.kind = "aten::relu";
    g.addNode(n);
    const auto graph = std::get<GraphMessage>(
        decodeServerMessage({{"type", "graph"}, {"graph", json::parse(toJson(g))}}));
    QVERIFY(graph.graph != nullptr);
    QCOMPARE(graph.graph->nodes().size(), size_t{1});
    const auto none = std::get<GraphMessage>(
        decodeServerMessage({{"type", "graph"}, {"graph", {{"error", "no IR"}}}}));
    QVERIFY(none.graph == nullptr);
    QCOMPARE(none.error, std::string("no IR"));
    const auto broken = std::get<GraphMessage>(
        decodeServerMessage({{"type", "graph"}, {"graph", {{"format", "other"}}}}));
    QVERIFY(broken.graph == nullptr);
    QVERIFY2(broken.error.find("cannot be read") != std::string::npos, broken.error.c_str());
  }

  void badMessagesNameTheField_data() {
    QTest::addColumn<QString>("message");
    QTest::addColumn<QString>("error");
    const std::string step = json{
        {"type", "step"},
        {"step", 1},
        {"loss", 1.0},
        {"seconds", 0.1},
        {"features", json::object()},
        {"rules", rulesField()},
        {"skipped", false}}.dump();
    QTest::addRow("unknown type") << R"({"type": "gossip"})"
                                  << R"(unknown server message type "gossip")";
    QTest::addRow("no type") << R"({"step": 1})"
                             << R"("type" must be a string)";
    QTest::addRow("a well-formed step") << QString::fromStdString(step) << "decoded";
    auto without = [&](const char* key) {
      json m = json::parse(step);
      m.erase(key);
      return QString::fromStdString(m.dump());
    };
    QTest::addRow("step without loss") << without("loss") << R"(step: "loss" is missing)";
    QTest::addRow("step without rules") << without("rules") << R"(step: "rules" is missing)";
    QTest::addRow("step with a text loss") << QString::fromStdString([&] {
      json m = json::parse(step);
      m["loss"] = "low";
      return m.dump();
    }()) << R"(step: "loss" must be a number)";
    QTest::addRow("node id not a number")
        << R"({"type": "nodes", "nodes": {"step": 1, "attributed_s": 0, "unattributed_s": 0,
              "nodes": [{"node": "0", "calls": 1, "backward_calls": 0, "forward_s": 0,
              "backward_s": 0, "bytes_allocated": 0, "backward_bytes_allocated": 0}]}})"
        << R"(nodes: "node" must be an integer)";
    QTest::addRow("node id missing")
        << R"({"type": "nodes", "nodes": {"step": 1, "attributed_s": 0, "unattributed_s": 0,
              "nodes": [{"calls": 1}]}})"
        << R"(nodes: "node" must be an integer)";
    QTest::addRow("rules not a list") << R"({"type": "rules", "rules": {}})"
                                      << R"(rules: "rules" must be an array)";
    QTest::addRow("rule without enabled") << R"({"type": "rules", "rules": [{"name": "a"}]})"
                                          << R"(rules: "enabled" must be true or false)";
    QTest::addRow("state without state") << R"({"type": "state"})"
                                         << R"(state: "state" must be a string)";
    QTest::addRow("ack without command") << R"({"type": "ack", "id": 1})"
                                         << R"(ack: "command" must be a string)";
  }

  void badMessagesNameTheField() {
    QFETCH(QString, message);
    QFETCH(QString, error);
    QCOMPARE(QString::fromStdString(decodeError(json::parse(message.toStdString()))), error);
  }

  // Commands travel typed too: what the studio encodes, the runner parses to the same command.
  void commandsRoundTrip() {
    for (Command c :
         {Command::toggleRule("nan_guard", false), Command::addRule("rule r { }"),
          Command::removeRule("r"), Command::setSampling(5), Command::named("snapshot")}) {
      c.id = 9;
      const Command back = parseCommand(encodeCommand(c));
      QCOMPARE(back.id, int64_t{9});
      QCOMPARE(back.name, c.name);
      QCOMPARE(back.rule, c.rule);
      QCOMPARE(back.enabled, c.enabled);
      QCOMPARE(back.source, c.source);
      QCOMPARE(back.every, c.every);
    }
  }
};

SYMTUNE_TEST_MAIN_CORE(TestAttachMessages)
#include "tst_attach_messages.moc"
