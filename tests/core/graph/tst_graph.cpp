// symtune::Graph's JSON (round trip, version refusal, malformed input) and DOT export as text.

#include "doctest_text.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "symtune/core/graph.h"

using namespace symtune;

namespace {

// A forward graph with a module region and an if/else, and one autograd node linked to an op.
Graph sampleGraph() {
  Graph g;
  g.name = "tiny";
  GraphRegion root;
  root.kind = RegionKind::Method;
  root.label = "forward";
  const RegionId r0 = g.addRegion(root);
  GraphRegion block;
  block.kind = RegionKind::Module;
  block.parent = r0;
  block.label = "block";
  const RegionId r1 = g.addRegion(block);

  GraphNode mm;
  mm.kind = "aten::mm";
  mm.region = r1;
  mm.modulePath = "block";
  mm.source = {"model.py", 12, "forward"};
  mm.inputs = {ValueInfo{"Tensor", std::vector<int64_t>{2, 3}, "float32", std::nullopt},
               ValueInfo{"Tensor", std::vector<int64_t>{3, 4}, "float32", std::nullopt}};
  mm.outputs = {ValueInfo{"Tensor", std::vector<int64_t>{2, 4}, "float32", std::nullopt}};
  mm.sequenceNr = 7;
  mm.features.opClass = "matmul";
  mm.features.flops = 48;
  mm.features.bytesRead = 72;
  mm.features.bytesWritten = 32;
  const NodeId a = g.addNode(mm);

  GraphNode cond;
  cond.kind = "prim::If";
  cond.region = r1;
  cond.modulePath = "block";
  cond.features.opClass = "control";
  const NodeId b = g.addNode(cond);
  GraphRegion then;
  then.kind = RegionKind::IfThen;
  then.parent = r1;
  then.owner = b;
  then.taken = true;
  const RegionId r2 = g.addRegion(then);
  GraphNode relu;
  relu.kind = "aten::relu";
  relu.region = r2;
  relu.modulePath = "block";
  relu.features.controlDepth = 1;
  relu.inputs = {ValueInfo{"int[]", std::nullopt, "", std::vector<int64_t>{3, 3}}};
  const NodeId c = g.addNode(relu);
  g.addEdge(a, b, 0, 0);
  g.addEdge(b, c, 0, 0);

  GraphNode back;
  back.side = GraphSide::Backward;
  back.kind = "MmBackward0";
  back.sequenceNr = 7;
  back.features.opClass = "autograd";
  const NodeId d = g.addNode(back);
  g.link(a, d);
  return g;
}

}  // namespace

TEST_CASE("the JSON round trip is exact") {
  const Graph g = sampleGraph();
  const std::string text = toJson(g);
  const Graph back = graphFromJson(text);
  CHECK(toJson(back) == text);
  REQUIRE(back.nodes().size() == 4);
  CHECK(back.node(NodeId(3)).forward == NodeId(0));
  CHECK(back.node(NodeId(0)).backward == std::vector<NodeId>{NodeId(3)});
  REQUIRE(back.region(RegionId(2)).taken.has_value());
  CHECK(*back.region(RegionId(2)).taken == true);
  const std::optional<double> intensity = back.node(NodeId(0)).features.arithmeticIntensity();
  REQUIRE(intensity.has_value());
  CHECK(*intensity == doctest::Approx(48.0 / 104.0).epsilon(1e-12));  // Qt Test's tolerance
  REQUIRE(!back.node(NodeId(2)).inputs.empty());
  REQUIRE(back.node(NodeId(2)).inputs[0].ints.has_value());
  CHECK(*back.node(NodeId(2)).inputs[0].ints == std::vector<int64_t>{3, 3});
}

TEST_CASE("the JSON names its format and version first") {
  const std::string text = toJson(sampleGraph());
  const std::string opening = "{\n \"format\": \"symtune-graph\",\n \"version\": 1,";
  CHECK(text.substr(0, opening.size()) == opening);
}

TEST_CASE("other versions and broken files are refused with a message") {
  struct Row {
    const char* name;
    std::string text;
    std::string message;
  };
  const Row rows[] = {
      {"newer version", R"({"format": "symtune-graph", "version": 2})",
       "graph JSON: version: unsupported graph version 2 (this Symtune reads 1)"},
      {"not a graph", R"({"format": "symtune-session", "version": 1})",
       "graph JSON: format: not a symtune graph"},
      {"edge out of range",
       R"({"format": "symtune-graph", "version": 1, "name": "x", "regions": [], "nodes": [], "edges": [[0, 0, 1, 0]]})",
       "graph JSON: edges[0][0]: id 0 out of range (0 of them)"},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    try {
      graphFromJson(row.text);
      FAIL("accepted");
    } catch (const GraphFormatError& e) {
      CHECK(std::string(e.what()) == row.message);
    }
  }
}

// Ids the studio indexes with, checked where they are read: each of these went through, then
// crashed the studio's views (nlohmann's type_error, std::out_of_range) or hung them (a cycle).
TEST_CASE("ids out of range, of the wrong type or in a cycle are refused with a message") {
  struct Row {
    const char* name;
    std::vector<std::string> path;  // the field to set in sampleGraph()'s JSON
    nlohmann::json value;
    std::string message;
  };
  const Row rows[] = {
      {"a fractional version", {"version"}, 1.9, "graph JSON: top.version: expected an integer"},
      {"a backward id that is text",
       {"nodes", "0", "backward", "0"},
       "x",
       "graph JSON: nodes[0].backward[0]: expected an id"},
      {"an edge end that is text",
       {"edges", "0", "0"},
       "a",
       "graph JSON: edges[0][0]: expected an id"},
      {"a parent out of range",
       {"regions", "1", "parent"},
       999,
       "graph JSON: regions[1].parent: id 999 out of range (3 of them)"},
      {"a node's region out of range",
       {"nodes", "0", "region"},
       999,
       "graph JSON: nodes[0].region: id 999 out of range (3 of them)"},
      {"a forward link past int32",
       {"nodes", "3", "forward"},
       4294967297LL,
       "graph JSON: nodes[3].forward: integer out of range"},
      {"an owner out of range",
       {"regions", "2", "owner"},
       -2,
       "graph JSON: regions[2].owner: id -2 out of range (4 of them)"},
      {"a region its own parent",
       {"regions", "1", "parent"},
       1,
       "graph JSON: regions[1]: its parents form a cycle"},
      {"an edge's input position that is a fraction",
       {"edges", "1", "3"},
       0.5,
       "graph JSON: edges[1][3]: expected an integer"},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    nlohmann::json j = nlohmann::json::parse(toJson(sampleGraph()));
    nlohmann::json* at = &j;
    for (const std::string& key : row.path)
      at = at->is_array() ? &(*at)[std::stoul(key)] : &(*at)[key];
    *at = row.value;
    try {
      graphFromJson(j.dump());
      FAIL("accepted");
    } catch (const GraphFormatError& e) {
      CHECK(std::string(e.what()) == row.message);
    }
  }
}

TEST_CASE("the DOT export is exactly the expected text") {
  const std::string expected =
      "digraph \"tiny\" {\n"
      "  rankdir=TB;\n"
      "  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n"
      "  subgraph cluster_r1 {\n"
      "    label=\"block\";\n"
      "    n0 [label=\"aten::mm\\nblock\"];\n"
      "    n1 [label=\"prim::If\\nblock\"];\n"
      "    subgraph cluster_r2 {\n"
      "      label=\"if: then (taken)\";\n"
      "      n2 [label=\"aten::relu\\nblock\"];\n"
      "    }\n"
      "  }\n"
      "  subgraph cluster_backward {\n"
      "    label=\"autograd\";\n"
      "    n3 [label=\"MmBackward0\", style=filled, fillcolor=\"#f3e8ff\"];\n"
      "  }\n"
      "  n0 -> n1;\n"
      "  n1 -> n2;\n"
      "  n0 -> n3 [style=dashed, color=\"#9333ea\", constraint=false];\n"
      "}\n";
  CHECK(toDot(sampleGraph()) == expected);
}

TEST_CASE("a forward-only DOT export leaves the autograd nodes out") {
  DotOptions options;
  options.backward = false;
  const std::string dot = toDot(sampleGraph(), options);
  CHECK(dot.find("MmBackward0") == std::string::npos);
  CHECK(dot.find("n3") == std::string::npos);
  CHECK(dot.find("n0 -> n1;") != std::string::npos);
}

TEST_CASE("the DOT export escapes quotes in the graph's name") {
  Graph g;
  g.name = "say \"hi\"";
  const std::string dot = toDot(g);
  const std::string opening = "digraph \"say \\\"hi\\\"\" {";
  CHECK(dot.substr(0, opening.size()) == opening);
}

TEST_CASE("region labels say what is known of the captured step") {
  struct Row {
    const char* name;
    RegionKind kind;
    std::optional<bool> taken;     // empty: unknown
    std::optional<int64_t> trips;  // empty: unknown
    std::string label;
  };
  const Row rows[] = {
      {"module", RegionKind::Module, std::nullopt, std::nullopt, "layer1.0"},
      {"then, taken", RegionKind::IfThen, true, std::nullopt, "if: then (taken)"},
      {"else, unknown", RegionKind::IfElse, std::nullopt, std::nullopt, "if: else"},
      {"loop ×6", RegionKind::Loop, std::nullopt, 6, "loop ×6"},
      {"loop, unknown trips", RegionKind::Loop, std::nullopt, std::nullopt, "loop"},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    GraphRegion r;
    r.kind = row.kind;
    r.label = "layer1.0";
    r.taken = row.taken;
    r.tripCount = row.trips;
    CHECK(regionLabel(r) == row.label);
  }
}
