// Frames recorded from a real run (tests/fixtures/attach_frames.jsonl, written by
// tests/fixtures/record_attach_frames.py) go through the protocol's decoder into the studio's
// models as AttachConnection hands them over: the graph into the graph and inspector models, the
// rules into the Rules list, steps into the run history, per-node statistics onto graph nodes,
// and the answer to set_sampling to the command it answers. Nothing re-reads JSON on the way.

#include <QFile>

#include <cmath>

#include "symtune/core/attach_messages.h"
#include "symtune/graphview/graph_model.h"
#include "symtune/ui/node_inspector_model.h"
#include "symtune/ui/rule_list_model.h"
#include "symtune/ui/run_history_model.h"
#include "test_main.h"

using namespace symtune;

namespace {

std::vector<attach::ServerMessage> recordedFrames() {
  QFile file(QStringLiteral(SYMTUNE_SOURCE_DIR "/tests/fixtures/attach_frames.jsonl"));
  if (!file.open(QIODevice::ReadOnly))
    throw std::runtime_error("cannot read " + file.fileName().toStdString());
  std::vector<attach::ServerMessage> out;
  while (!file.atEnd()) {
    const QByteArray line = file.readLine().trimmed();
    if (!line.isEmpty())
      out.push_back(attach::decodeServerMessage(nlohmann::json::parse(line.toStdString())));
  }
  return out;
}

}  // namespace

class TestRecordedFrames : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void framesReachTheStudiosModels() {
    const std::vector<attach::ServerMessage> frames = recordedFrames();
    QVERIFY(frames.size() > 5);
    QVERIFY(std::holds_alternative<attach::HelloMessage>(frames.front()));
    const auto& hello = std::get<attach::HelloMessage>(frames.front());
    QCOMPARE(hello.session, std::string("recorded frames"));
    QCOMPARE(hello.protocol, int64_t{1});

    graphview::GraphModel forward(GraphSide::Forward);
    ui::NodeInspectorModel inspector;
    ui::RuleListModel rules;
    ui::RunHistoryModel history;
    int steps = 0, graphs = 0, nodeMessages = 0;
    bool samplingAnswered = false;
    std::vector<NodeId> measured;
    for (const auto& frame : frames) {
      if (const auto* graph = std::get_if<attach::GraphMessage>(&frame)) {
        QVERIFY2(graph->graph != nullptr, graph->error.c_str());
        forward.setGraph(graph->graph);
        inspector.setGraph(graph->graph);
        ++graphs;
      } else if (const auto* r = std::get_if<attach::RulesMessage>(&frame)) {
        rules.setRules(r->rules);
      } else if (const auto* step = std::get_if<attach::StepMessage>(&frame)) {
        history.appendStep(*step);
        ++steps;
      } else if (const auto* nodes = std::get_if<attach::NodesMessage>(&frame)) {
        forward.addNodeStats(*nodes);
        inspector.addNodeStats(*nodes);
        for (const auto& n : nodes->nodes)
          measured.push_back(NodeId(n.node));
        ++nodeMessages;
      } else if (const auto* reply = std::get_if<attach::ReplyMessage>(&frame)) {
        QVERIFY2(reply->ok, reply->reason.c_str());
        if (reply->id == 1 && reply->command == "set_sampling")
          samplingAnswered = reply->result.value("every", 0) == 2;
      }
    }
    // The static graph after the handshake, and the captured step's (with its autograd graph).
    QVERIFY(graphs >= 1);
    QVERIFY(forward.graph() != nullptr && !forward.graph()->nodes().empty());
    QCOMPARE(rules.rowOf("nan_guard") >= 0, true);
    QCOMPARE(history.rowCount(), steps);
    QVERIFY(steps >= 6);
    QVERIFY(std::isfinite(history.value(steps - 1, ui::RunHistoryModel::Loss)));
    QVERIFY(history.value(steps - 1, ui::RunHistoryModel::PeakMemoryMiB) > 0);
    QVERIFY(samplingAnswered);
    // Per-node figures land on the graph's nodes: latency on the forward view, a history in the
    // inspector.
    QVERIFY(nodeMessages >= 1);
    QVERIFY(!measured.empty());
    int painted = 0, inspected = 0;
    for (NodeId id : measured) {
      painted += forward.value(graphview::Overlay::Latency, id).has_value();
      inspected += !inspector.history(id).isEmpty();
    }
    QVERIFY2(painted > 0, "per-node latency painted on forward nodes");
    QVERIFY2(inspected > 0, "per-node history in the inspector");
  }
};

SYMTUNE_TEST_MAIN_CORE(TestRecordedFrames)
#include "tst_recorded_frames.moc"
