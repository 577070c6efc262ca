// The attach protocol end to end with runners of each test case's own: --linger after the last
// step and while paused; TCP with its token, loopback only; a client that stops reading for 10 s
// costing the run no throughput and missing no step silently; a plain torch::nn program behind
// AttachedLoop; the online controller on the stream; validations on data files; a snapshot with
// the session's rewrites. Last, a killed
// runner reported to its client at once: it kills the suite's shared runner (attach_fixture.h),
// which this file's test cases also ask, so it must stay the last test case of the suite.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "attach_fixture.h"

using namespace symtune::test::attach;

// A runner of a three-step session with `more` arguments, and `client` attached to it; true once
// the run has said it finished.
bool attachedWhenFinished(const symtune::test::TempDir& dir, Runner& runner, Client& client,
                          const std::vector<std::string>& more) {
  const std::string shortSession = dir.filePath("short.json");
  std::string text = kSession;
  text.replace(text.find("1000000"), 7, "3");
  symtune::test::writeFile(shortSession, text);
  if (!runner.start(shortSession, "unix:" + dir.filePath("short.sock"), more))
    return false;
  client.connect(runner.endpoint);
  for (int i = 0; i < 200; ++i) {
    const auto m = until(client, "state", 1);
    if (m && (*m)["state"] == "finished")
      return true;
  }
  return false;
}

// --linger: after its last step a runner serves while a client is attached, and exits once
// none has been for the linger time (a studio-started run the studio has left).
TEST_CASE("a finished runner lingers while a client is attached, then exits") {
  symtune::test::TempDir dir;
  Runner runner;
  {
    Client client;
    REQUIRE(attachedWhenFinished(dir, runner, client,
                                 {"--linger", "1", "--report", dir.filePath("short.report.json")}));
    // Finished: nothing to pause (it once said "paused", and the studio's Start then resumed).
    const Json pause = client.command({{"command", "pause"}});
    CHECK(pause["type"] == "error");
    CHECK(pause["reason"] == "the run has finished: nothing to pause");
    // Attended: still serving well past the linger time.
    CHECK_FALSE(runner.process.waitForFinished(2500ms));
    CHECK(runner.process.running());
  }  // the client leaves
  REQUIRE(runner.process.waitForFinished(30s));
  CHECK(runner.process.exitedNormally());
  CHECK(runner.process.exitCode() == 0);
}

// docs/protocol.md: a change a client asked for at the last step boundary is answered before the
// final state. A toggle sent with the stop to a finished run was answered after "stopped".
TEST_CASE("a finished runner answers a change sent with the stop before it says stopped") {
  symtune::test::TempDir dir;
  Runner runner;
  Client client;
  REQUIRE(attachedWhenFinished(dir, runner, client, {"--linger", "30"}));
  client.sendBytes(
      symtune::attach::encodeFrame({{"type", "command"},
                                    {"id", 41},
                                    {"command", "toggle_rule"},
                                    {"rule", "nan_guard"},
                                    {"enabled", false}}) +
      symtune::attach::encodeFrame({{"type", "command"}, {"id", 42}, {"command", "stop"}}));
  std::vector<std::string> seen;  // the toggle's answer and the states, in order
  try {
    for (int i = 0; i < 60; ++i) {
      const auto m = client.next(0.5);
      if (!m)
        continue;
      if ((*m)["type"] == "state")
        seen.push_back((*m)["state"].get<std::string>());
      else if ((*m).value("id", 0) == 41)
        seen.push_back((*m)["type"].get<std::string>());
    }
  } catch (const Disconnected&) {
  }
  CHECK(seen == std::vector<std::string>{"ack", "stopped"});
  CHECK(runner.process.waitForFinished(30s));
}

TEST_CASE("a paused runner left alone stops after its linger; a stopped run says so last") {
  symtune::test::TempDir dir;
  Runner runner;
  const std::string report = dir.filePath("paused.report.json");
  REQUIRE(runner.start(suite().session, "unix:" + dir.filePath("paused.sock"),
                       {"--linger", "1", "--report", report}));
  {
    Client client;
    client.connect(runner.endpoint);
    REQUIRE(until(client, "step"));
    CHECK(client.command({{"command", "pause"}})["state"] == "paused");
  }                                              // the client leaves the run paused
  REQUIRE(runner.process.waitForFinished(30s));  // it once stayed paused for good
  CHECK(runner.process.exitCode() == 130);       // interrupted, as by stop
  CHECK(contains(runner.process.standardOutput(),
                 "paused with no client attached for 1 s: stopping"));
  CHECK(nlohmann::json::parse(symtune::test::readFile(report))["status"] == "interrupted");

  // Stopped mid-run: the final state reaches the client before the stream ends.
  Runner stopped;
  REQUIRE(stopped.start(suite().session, "unix:" + dir.filePath("stopped.sock"),
                        {"--report", dir.filePath("stopped.report.json")}));
  Client client;
  client.connect(stopped.endpoint);
  REQUIRE(until(client, "step"));
  CHECK(client.command({{"command", "stop"}})["state"] == "stopping");
  std::string last;
  bool ended = false;
  try {
    for (int i = 0; i < 60; ++i) {
      if (auto m = client.next(0.5); m && (*m)["type"] == "state")
        last = (*m)["state"].get<std::string>();
    }
  } catch (const Disconnected&) {
    ended = true;
  }
  CHECK(ended);
  CHECK(last == "stopped");
  CHECK(stopped.process.waitForFinished(30s));
}

TEST_CASE("a TCP runner refuses a wrong or missing token and accepts its own") {
  Runner tcp;
  REQUIRE(tcp.start(suite().session, "tcp:127.0.0.1:0"));
  CHECK(tcp.token.size() == size_t{32});
  Client client;
  CHECK_THROWS_WITH_AS(client.connect(tcp.endpoint, std::string(32, '0')), "refused: wrong token",
                       Disconnected);
  CHECK_THROWS_WITH_AS(client.connect(tcp.endpoint), "refused: wrong token", Disconnected);
  const Json hello = client.connect(tcp.endpoint, tcp.token);
  CHECK(hello["auth"].get<std::string>() == "token");
  CHECK(hello["run"]["session"] == "attach test");  // from the welcome
  CHECK(until(client, "step"));

  // Before the token, the hello tells nothing of the run (its session's path was in it).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port =
      htons(static_cast<uint16_t>(symtune::attach::parseEndpoint(tcp.endpoint).port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0);
  symtune::attach::FrameDecoder decoder(symtune::attach::kMaxServerFrameBytes);
  std::optional<Json> first;
  std::array<char, 4096> buffer{};
  for (ssize_t n; !first && (n = ::recv(fd, buffer.data(), buffer.size(), 0)) > 0;) {
    decoder.feed(buffer.data(), static_cast<size_t>(n));
    first = decoder.next();
  }
  ::close(fd);
  REQUIRE(first);
  CHECK((*first)["type"] == "hello");
  CHECK((*first)["run"] == Json::object());
}

TEST_CASE("the runner refuses to listen on TCP beyond loopback") {
  ChildProcess runner;
  runner.start(kRunner, {suite().session, "--listen", "tcp:0.0.0.0:0"});
  REQUIRE(runner.waitForFinished(120s));
  CHECK(runner.exitCode() == 2);
  CHECK_MESSAGE(contains(runner.standardError(), "TCP is for loopback only"),
                "its standard error: ", runner.standardError());
}

TEST_CASE("a client that stops reading for 10 s costs the run nothing and misses no step") {
  // Two 10-second windows of one run: in the first no client is attached; in the second a
  // client attaches and stops reading. The trainer's own step times (the report's step_s, their
  // median) over each window give the throughput ratio.
  Runner run;
  const std::string report = suite().dir.filePath("stall.report.json");
  REQUIRE(run.start(suite().session, "unix:" + suite().dir.filePath("stall.sock"),
                    {"--report", report}));
  auto latestStep = [&] {
    Client c;
    c.connect(run.endpoint);
    return until(c, "step").value()["step"].get<int64_t>();
  };
  std::this_thread::sleep_for(3s);  // past the first steps (TorchScript's profiling runs)
  const int64_t a0 = latestStep();
  std::this_thread::sleep_for(10s);
  const int64_t a1 = latestStep();

  Client stalled;
  stalled.connect(run.endpoint);
  const int64_t b0 = until(stalled, "step").value()["step"].get<int64_t>();
  std::this_thread::sleep_for(10s);  // it reads nothing meanwhile
  Client control;
  control.connect(run.endpoint);
  const int64_t b1 = until(control, "step").value()["step"].get<int64_t>();

  // The stalled client, reading again, accounts for every step: each step message stands for
  // itself and the `coalesced` steps folded into it.
  int64_t accounted = 0, last = b0, messages = 0;
  while (last < b1) {
    const auto m = until(stalled, "step", 60);
    REQUIRE(m);
    accounted += 1 + m->value("coalesced", int64_t{0});
    last = (*m)["step"].get<int64_t>();
    ++messages;
  }
  CHECK(accounted == last - b0);
  MESSAGE("the stalled client got ", messages, " step messages for ", accounted, " steps");
  const Json stopped = control.command({{"command", "stop"}});
  CHECK(stopped["type"].get<std::string>() == "ack");
  REQUIRE(run.process.waitForFinished(60s));

  std::string reportText;
  REQUIRE_NOTHROW(reportText = symtune::test::readFile(report));
  const Json steps = Json::parse(reportText)["throughput"]["step_s"];
  // Medians: a step slowed by something else on the machine (a compile, another test) moves a
  // mean, not a median, and what the stalled client would cost shows in every step.
  auto medianSeconds = [&](int64_t from, int64_t to) {
    std::vector<double> v;
    for (int64_t i = from; i <= to; ++i)
      v.push_back(steps[static_cast<size_t>(i)].get<double>());
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const double ratio = medianSeconds(a0 + 1, a1) / medianSeconds(b0 + 1, b1);
  MESSAGE("throughput with a stalled client / without a client: ", ratio, " (steps ", b0 + 1, "-",
          b1, " vs ", a0 + 1, "-", a1, ")");
  // The target is at most 2 % lost, a benchmark figure this message reports; what is asserted is
  // that the run did not wait for the client. A training loop that blocked on a full socket would
  // stall within a few hundred messages, a ratio near zero; other tests and builds sharing the two
  // cores under ctest -j2 have moved a healthy run's ratio down to 0.71.
  CHECK_MESSAGE(ratio > 0.25, "ratio ", ratio);
}

TEST_CASE("a plain torch::nn program behind AttachedLoop is attachable") {
  // examples/attachable_mlp: a plain torch::nn loop behind AttachedLoop.
  Runner program;
  REQUIRE(
      program.startProgram(kExample, {"unix:" + suite().dir.filePath("mlp.sock"), "100000000"}));
  Client client;
  const Json hello = client.connect(program.endpoint);
  CHECK(hello["run"]["session"].get<std::string>() == "attachable MLP");
  CHECK(hello["run"]["parameters"].get<int64_t>() ==
        int64_t{8 * 64 + 64 + 64 * 64 + 64 + 64 * 4 + 4});
  // The rules as the program set them up (the loop republishes them when they change).
  std::optional<Json> rules;
  while ((rules = until(client, "rules")) && (*rules)["rules"].empty()) {
  }
  REQUIRE(rules);
  CHECK((*rules)["rules"][0]["name"].get<std::string>() == "nan_guard");
  const auto step = until(client, "step");
  REQUIRE(step);
  CHECK((*step)["features"].size() == size_t{24});
  CHECK((*step)["features"]["grad_global_norm"].get<double>() > 0);
  const Json added = client.command(
      {{"command", "add_rule"},
       {"source", "rule clip { select params \"*\"  set grad = clamp(grad, -1, 1) }"}});
  CHECK(added["type"].get<std::string>() == "ack");
  const int64_t from = added["from_step"].get<int64_t>();
  while (true) {
    const auto s = until(client, "step");
    REQUIRE(s);
    if ((*s)["step"].get<int64_t>() >= from) {
      CHECK((*s)["rules"]["in_force"] == Json::array({"nan_guard", "clip"}));
      CHECK((*s)["rules"]["fired"] == Json::array({"clip"}));
      break;
    }
  }
  const Json paused = client.command({{"command", "pause"}});
  CHECK(paused["state"].get<std::string>() == "paused");
  const Json snapshot = client.command({{"command", "snapshot"}});
  CHECK(snapshot["reason"].get<std::string>() == "this run has no session to snapshot");
  const Json sampling = client.command({{"command", "set_sampling"}, {"every", 2}});
  CHECK(sampling["reason"].get<std::string>() ==
        "this run has no per-node statistics (it has no graph of its ops)");
  int64_t lastStep = -1;  // of the steps sent before the pause held
  while (auto m = client.next(1.0)) {
    if ((*m)["type"] == "step")
      lastStep = (*m)["step"].get<int64_t>();
  }
  const Json stopped = client.command({{"command", "stop"}});
  CHECK(stopped["type"].get<std::string>() == "ack");
  // Stopped while paused: no step more (one once ran), and the final state last.
  std::string lastState;
  try {
    for (int i = 0; i < 60; ++i) {
      const auto m = client.next(0.5);
      if (m && (*m)["type"] == "step")
        CHECK((*m)["step"].get<int64_t>() <= lastStep);
      if (m && (*m)["type"] == "state")
        lastState = (*m)["state"].get<std::string>();
    }
  } catch (const Disconnected&) {
  }
  CHECK(lastState == "stopped");
  REQUIRE(program.process.waitForFinished(30s));
  CHECK(program.process.exitCode() == 0);
  CHECK(contains(program.process.standardOutput(), "stopped by a client"));
}

// Paused, then left by its client: the loop waited for a resume that could never come, its
// training thread held for good. With AttachedLoopOptions::pausedLinger it stops.
TEST_CASE("an AttachedLoop paused and left stops after its linger") {
  Runner program;
  REQUIRE(program.startProgram(kExample,
                               {"unix:" + suite().dir.filePath("left.sock"), "100000000", "1"}));
  {
    Client client;
    client.connect(program.endpoint);
    REQUIRE(until(client, "step"));
    const Json paused = client.command({{"command", "pause"}});
    CHECK(paused["state"].get<std::string>() == "paused");
  }  // disconnected
  REQUIRE(program.process.waitForFinished(30s));
  CHECK(program.process.exitCode() == 0);
  INFO(program.process.standardOutput());
  CHECK(contains(program.process.standardOutput(),
                 "paused with no client attached for 1 s: stopping"));
  CHECK(contains(program.process.standardOutput(), "outlasting the linger"));
}

// A run held to a memory budget (docs/remat.md): its plan reaches the client — the units with
// their graph nodes, kept or recomputed — its steps carry the budget, the prediction and the
// peak, and the budget changes on the running job from the step the ack names; a budget no plan
// fits is refused and the run goes on under the one before.
TEST_CASE(
    "a budget changed on the running job holds from the ack's step, an impossible one is "
    "refused") {
  symtune::test::TempDir dir;
  const std::string session = dir.filePath("remat.json");
  symtune::test::writeFile(
      session,
      "{\"format\": \"symtune-session\", \"version\": 1, \"name\": \"remat attach\",\n"
      " \"model\": {\"zoo\": \"dynamic_resnet\", \"preset\": \"ci\"},\n"
      " \"run\": {\"steps\": 1000000, \"threads\": 1},\n"
      " \"remat\": {\"budget_fraction\": 0.9}}\n");
  Runner runner;
  REQUIRE(runner.start(session, "unix:" + dir.filePath("remat.sock")));
  Client client;
  client.connect(runner.endpoint);

  // The plan once a step was held to the budget (the first one measures the plain peak, nothing
  // recomputed): every top-level block a unit, with its nodes.
  const auto recomputes = [](const Json& m) {
    for (const Json& u : m["remat"]["units"]) {
      if (u["recomputed"].get<bool>())
        return true;
    }
    return false;
  };
  std::optional<Json> plan;
  const auto deadline = Clock::now() + 90s;
  while (Clock::now() < deadline) {
    plan = until(client, "remat");
    if (plan && !(*plan)["remat"]["budget_bytes"].is_null() && recomputes(*plan))
      break;
  }
  REQUIRE(plan);
  REQUIRE(recomputes(*plan));
  const Json& units = (*plan)["remat"]["units"];
  REQUIRE_FALSE(units.empty());
  CHECK((*plan)["remat"]["budget_fraction"].get<double>() == doctest::Approx(0.9));
  CHECK((*plan)["remat"]["strategy"].get<std::string>() == "plan");
  int recomputed = 0;
  for (const Json& u : units) {
    INFO(u.dump());
    CHECK_FALSE(u["nodes"].empty());  // the ResNet's blocks are all in the graph
    recomputed += u["recomputed"].get<bool>() ? 1 : 0;
  }
  CHECK(recomputed > 0);  // 0.9 of the plain peak (its ci preset fits no less than ~0.82)

  // Steps under the budget: held to it, with the prediction.
  double lastBudget = 0;
  for (int seen = 0; seen < 2;) {
    const auto step = until(client, "step");
    REQUIRE(step);
    const Json& r = (*step)["remat"];
    REQUIRE(r.is_object());
    if (r["budget_bytes"].is_null())
      continue;  // the calibration step
    CHECK(r["peak"].get<double>() <= r["budget_bytes"].get<double>());
    lastBudget = r["budget_bytes"].get<double>();
    ++seen;
  }

  // A wider budget, in megabytes, from the step the ack names.
  const double megabytes = std::ceil(2 * lastBudget / 1e6);
  const Json wider = client.command({{"command", "set_budget"}, {"budget_mb", megabytes}});
  REQUIRE(wider["type"].get<std::string>() == "ack");
  CHECK(wider["budget_mb"].get<double>() == megabytes);
  const int64_t from = wider["from_step"].get<int64_t>();
  for (int checked = 0; checked < 2;) {
    const auto step = until(client, "step");
    REQUIRE(step);
    if ((*step)["step"].get<int64_t>() < from)
      continue;
    const Json& r = (*step)["remat"];
    CHECK(r["budget_bytes"].get<double>() == megabytes * 1e6);
    CHECK(r["peak"].get<double>() <= r["budget_bytes"].get<double>());
    ++checked;
  }
  const Json snapshot = client.command({{"command", "snapshot"}});
  CHECK(snapshot["session"]["remat"]["budget_mb"].get<double>() == megabytes);
  CHECK_FALSE(snapshot["session"]["remat"].contains("budget_fraction"));

  // 1 kB: below what any plan fits, refused with the smallest feasible budget; the run goes on.
  const Json tiny = client.command({{"command", "set_budget"}, {"budget_mb", 0.001}});
  CHECK(tiny["type"].get<std::string>() == "error");
  CHECK(contains(tiny["reason"].get<std::string>(), "smallest feasible budget"));
  const auto after = until(client, "step");
  REQUIRE(after);
  CHECK(after->at("remat")["budget_bytes"].get<double>() == megabytes * 1e6);

  const Json both =
      client.command({{"command", "set_budget"}, {"budget_mb", 10}, {"budget_fraction", 0.5}});
  CHECK(both["reason"].get<std::string>() ==
        "set_budget takes one of \"budget_mb\" and \"budget_fraction\"");
  const Json above = client.command({{"command", "set_budget"}, {"budget_fraction", 1.5}});
  CHECK(above["reason"].get<std::string>() == "\"budget_fraction\" must be in (0, 1]");

  // A run without a remat block holds no budget to change.
  Client plain;
  plain.connect(suiteRunner().endpoint);
  const Json none = plain.command({{"command", "set_budget"}, {"budget_mb", 100}});
  CHECK(none["reason"].get<std::string>() ==
        "this run holds no memory budget: its session has no remat block");
}

TEST_CASE("the online controller's space, decisions and pins on the attach stream") {
  const symtune::test::TempDir dir;
  const std::string session = dir.filePath("online.json");
  symtune::test::writeFile(
      session,
      "{\"format\": \"symtune-session\", \"version\": 1, \"name\": \"online attach\",\n"
      " \"model\": {\"zoo\": \"dynamic_tagger\", \"preset\": \"ci\"},\n"
      " \"binding\": {\"enabled\": false},\n"
      " \"run\": {\"steps\": 1000000, \"threads\": 1},\n"
      " \"control\": {\"mode\": \"online\"}}\n");
  Runner runner;
  REQUIRE(runner.start(session, "unix:" + dir.filePath("online.sock")));
  Client client;
  client.connect(runner.endpoint);

  // The space after the handshake: each knob with its values, none pinned.
  const auto space = until(client, "control");
  REQUIRE(space);
  CHECK((*space)["control"]["mode"].get<std::string>() == "online");
  std::map<std::string, Json> knobs;
  for (const Json& k : (*space)["control"]["knobs"])
    knobs[k["name"].get<std::string>()] = k;
  REQUIRE(knobs.count("microbatches") == 1);
  REQUIRE(knobs.count("threads") == 1);
  CHECK(knobs["microbatches"]["values"].size() == 5);  // 1..16: the ci tagger's 16 sentences
  CHECK(knobs["microbatches"]["pinned"].is_null());

  // Every step says how it was configured and what the controller decided.
  const auto step = until(client, "step");
  REQUIRE(step);
  const Json& control = (*step)["control"];
  REQUIRE(control.is_object());
  CHECK(control["microbatches"].get<int64_t>() >= 1);
  CHECK(contains(control["configuration"].get<std::string>(), "microbatches "));
  REQUIRE(control["decision"].is_object());
  CHECK(control["decision"]["alternatives"].is_array());

  // Pinned: from the ack's step on, every decision keeps to it; the space says so.
  const Json pin = client.command({{"command", "pin"}, {"knob", "microbatches"}, {"value", 2}});
  REQUIRE(pin["type"].get<std::string>() == "ack");
  CHECK(pin["pins"]["microbatches"].get<double>() == 2);
  const int64_t from = pin["from_step"].get<int64_t>();
  std::optional<Json> pinnedSpace;
  for (int checked = 0; checked < 3;) {
    const auto next = client.next(30);
    REQUIRE(next);
    if ((*next)["type"] == "control")
      pinnedSpace = *next;
    if ((*next)["type"] != "step" || (*next)["step"].get<int64_t>() < from)
      continue;
    CHECK((*next)["control"]["knobs"]["microbatches"].get<double>() == 2);
    ++checked;
  }
  REQUIRE(pinnedSpace);
  for (const Json& k : (*pinnedSpace)["control"]["knobs"]) {
    if (k["name"] == "microbatches")
      CHECK(k["pinned"].get<double>() == 2);
  }
  // Let go; a value or a knob outside the space is refused.
  const Json unpin =
      client.command({{"command", "pin"}, {"knob", "microbatches"}, {"value", nullptr}});
  CHECK(unpin["type"].get<std::string>() == "ack");
  CHECK(unpin["pins"].empty());
  const Json three = client.command({{"command", "pin"}, {"knob", "microbatches"}, {"value", 3}});
  REQUIRE(three["type"].get<std::string>() == "error");
  CHECK(contains(three["reason"].get<std::string>(), "cannot take"));
  const Json nobody = client.command({{"command", "pin"}, {"knob", "warp"}, {"value", 1}});
  REQUIRE(nobody["type"].get<std::string>() == "error");
  CHECK(contains(nobody["reason"].get<std::string>(), "no knob warp"));
  const Json letGo = client.command({{"command", "pin"}, {"knob", "warp"}, {"value", nullptr}});
  REQUIRE(letGo["type"].get<std::string>() == "error");
  CHECK(contains(letGo["reason"].get<std::string>(), "no knob warp"));

  // A run without the online controller has nothing to pin.
  Client plain;
  plain.connect(suiteRunner().endpoint);
  const Json none = plain.command({{"command", "pin"}, {"knob", "threads"}, {"value", 1}});
  REQUIRE(none["type"].get<std::string>() == "error");
  CHECK(contains(none["reason"].get<std::string>(), "this run has no online controller"));
}

TEST_CASE("a run on data files streams its validations; a late client gets the latest") {
  symtune::test::TempDir dir;
  const std::string data = SYMTUNE_SOURCE_DIR "/tests/data/";
  const std::string session = dir.filePath("tagger.json");
  REQUIRE_NOTHROW(symtune::test::writeFile(
      session, Json{{"format", "symtune-session"},
                    {"version", 1},
                    {"name", "validating"},
                    {"model", {{"file", data + "tagger.pt"}, {"classes", 3}}},
                    {"data",
                     {{"format", "npz"},
                      {"file", data + "tagger.npz"},
                      {"inputs", {"tokens", "lengths"}},
                      {"target", "tags"},
                      {"lengths", "lengths"},
                      {"batch_size", 16},
                      {"validation_fraction", 0.25},
                      {"validate_every", 10}}},
                    {"optimizer", {{"name", "adamw"}, {"lr", 0.05}}},
                    {"binding", {{"table", nullptr}}},
                    {"run", {{"steps", 30}, {"threads", 1}}}}
                   .dump()));
  Runner runner;
  REQUIRE(runner.start(session, "unix:" + dir.filePath("v.sock"),
                       {"--linger", "1", "--report", dir.filePath("v.report.json")}));
  Client client;
  client.connect(runner.endpoint);
  std::optional<Json> last;
  bool finished = false;
  for (int i = 0; i < 200 && !finished; ++i) {
    const auto m = client.next(0.5);
    if (m && (*m)["type"] == "validation")
      last = m;
    finished = m && (*m)["type"] == "state" && (*m)["state"] == "finished";
  }
  REQUIRE(finished);
  REQUIRE(last.has_value());
  const Json& v = (*last)["validation"];
  CHECK(v["step"] == 30);
  CHECK(v["samples"] == 24);
  CHECK(v["top1"].get<double>() > 0.9);
  CHECK(v["top5"].is_null());  // three classes
  // A client attaching after the last step is handed the latest validation in its welcome.
  Client late;
  late.connect(runner.endpoint);
  const auto welcome = until(late, "validation", 10);
  REQUIRE(welcome.has_value());
  CHECK((*welcome)["validation"]["step"] == 30);
}

// A snapshot is the session as it stands, the rewrites it was built with too: they are applied
// once, when the trainer is built, and are not in the rule set the studio toggles. Until
// 2026-12-07 the snapshot left them out, and a run of it trained another model.
TEST_CASE("a snapshot keeps the session's rewrites beside the rules in force") {
  symtune::test::TempDir dir;
  const std::string session = dir.filePath("rewrites.json");
  const std::string own =
      "rule relu_to_threshold {\n  rewrite \"\"\"graph(%x):\n  %y = aten::relu(%x)\n  return "
      "(%y)\"\"\" "
      "=> \"\"\"graph(%x):\n  %zero : int = prim::Constant[value=0]()\n  %y = "
      "aten::threshold(%x, %zero, %zero)\n  return (%y)\"\"\"\n}\n"
      "rule every_step { select params \"*\"  set grad = grad * 1 }";
  const Json text = {{"format", "symtune-session"},
                     {"version", 1},
                     {"name", "rewrites"},
                     {"model", {{"zoo", "transformer_xl"}, {"preset", "ci"}}},
                     {"run", {{"steps", 1000000}, {"threads", 1}}},
                     {"rules", {{"enable", {"tanh_gelu", "nan_guard"}}, {"source", own}}}};
  symtune::test::writeFile(session, text.dump());
  Runner runner;
  REQUIRE(runner.start(session, "unix:" + dir.filePath("rewrites.sock")));
  Client client;
  client.connect(runner.endpoint);
  REQUIRE(until(client, "step"));
  const Json snapshot = client.command({{"command", "snapshot"}});
  const Json& rules = snapshot["session"]["rules"];
  CHECK(rules["enable"] == Json::array({"tanh_gelu", "nan_guard"}));
  const std::string source = rules["source"].get<std::string>();
  INFO(source);
  CHECK(contains(source, "rule relu_to_threshold {"));
  CHECK(contains(source, "rule every_step {"));
}

// Last: it kills the suite's runner.
TEST_CASE("a killed runner is reported to its client at once") {
  Runner& runner = suiteRunner();
  Client client;
  client.connect(runner.endpoint);
  REQUIRE(until(client, "step"));
  runner.process.kill();
  const auto killed = Clock::now();
  bool reported = false;
  try {
    while (Clock::now() - killed < std::chrono::seconds(5))
      client.next(0.1);
  } catch (const Disconnected&) {
    reported = true;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  CHECK(reported);
  CHECK_MESSAGE(seconds < 1.0, "reported after ", seconds, " s");
  runner.process.waitForFinished(5s);
}
