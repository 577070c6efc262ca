// The attach protocol end to end against the suite's one shared runner (symtune-runner serving a
// zoo session on a unix socket), with this test's clients and a client process of its own
// (attach_probe): handshake, graph and steps; a rule toggled from the next step on; garbage and
// oversized frames closing only their own connection; a second runner refused on a live socket;
// a peer's text quoted, a half-closed client answered; and a killed client leaving the run
// training.
//
// The test cases run in file order (doctest's default: this file sorts before
// tst_attach_runs.cpp) and share one runner, which the last test case there kills.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "attach_fixture.h"

using namespace symtune::test::attach;

TEST_CASE("the runner's unix socket is private to its user") {
  suiteRunner();
  struct stat st {};
  REQUIRE(::stat(suite().socket.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == mode_t{0600});
}

TEST_CASE(
    "a client gets the handshake, the graph, the rules, the bindings, the state and every "
    "step") {
  Client client;
  const Json hello = client.connect(suiteRunner().endpoint);
  CHECK(hello["protocol"].get<int>() == 1);
  CHECK(hello["auth"].get<std::string>() == "none");
  CHECK(hello["run"]["session"].get<std::string>() == "attach test");
  CHECK(hello["run"]["parameters"].get<int64_t>() > 0);
  bool graph = false, rules = false, bindings = false, state = false;
  size_t backward = 0, linked = 0;  // of the latest graph
  std::vector<int64_t> steps;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (steps.size() < 5 && Clock::now() < deadline) {
    auto m = client.next(0.5);
    if (!m)
      continue;
    const std::string type = (*m)["type"];
    if (type == "graph") {
      graph = true;
      CHECK((*m)["graph"]["nodes"].size() > size_t{10});
      // The static graph first (when the client came early), then the second step's
      // captured one (Note [Attached step graph]): autograd nodes linked to forward ops.
      backward = linked = 0;
      for (const auto& n : (*m)["graph"]["nodes"]) {
        backward += n["side"] == "backward";
        linked += n["side"] == "backward" && !n["forward"].is_null();
      }
    } else if (type == "rules") {
      rules = true;
      REQUIRE((*m)["rules"].size() == size_t{2});
      CHECK((*m)["rules"][0]["name"].get<std::string>() == "nan_guard");
      CHECK((*m)["rules"][0]["origin"].get<std::string>() == "pack builtin 1.3.0");
    } else if (type == "bindings") {
      // Binding is on by default: the runner streams its table (the ResNet has no op site of
      // the present patterns, so it is empty; engine.binding.binder checks its content).
      bindings = true;
      CHECK((*m)["bindings"]["format"].get<std::string>() == "symtune-bindings");
      CHECK((*m)["bindings"]["model"].get<std::string>().rfind("attach test:", 0) == 0);
      CHECK((*m)["bindings"]["bindings"].is_array());
    } else if (type == "state") {
      state = true;
    } else if (type == "step") {
      CHECK((*m)["features"].size() == size_t{24});
      CHECK((*m)["loss"].is_number());
      CHECK((*m)["rules"]["in_force"].size() == size_t{2});
      steps.push_back((*m)["step"].get<int64_t>());
    }
  }
  CHECK((graph && rules && bindings && state));
  CHECK_MESSAGE((backward > 10 && linked > 5), "backward nodes ", backward,
                ", of them linked to forward ops ", linked);
  CHECK(steps.size() == size_t{5});
  for (size_t i = 1; i < steps.size(); ++i)
    CHECK(steps[i] == steps[i - 1] + 1);  // none lost, none coalesced: this client reads
}

TEST_CASE("a toggled rule is out of force from the ack's step on, and bad commands get errors") {
  Client client;
  client.connect(suiteRunner().endpoint);
  REQUIRE(until(client, "step"));
  const Json ack =
      client.command({{"command", "toggle_rule"}, {"rule", "nan_guard"}, {"enabled", false}});
  CHECK(ack["type"].get<std::string>() == "ack");
  CHECK_FALSE(ack["rules"][0]["enabled"].get<bool>());
  // The ack comes at a step boundary and names the first step with the change; steps published
  // before it may still be on their way. Every step from that one on has the change.
  const int64_t from = ack["from_step"].get<int64_t>();
  int checked = 0;
  while (checked < 3) {
    const auto step = until(client, "step");
    REQUIRE(step);
    if ((*step)["step"].get<int64_t>() < from) {
      CHECK((*step)["rules"]["in_force"].size() == size_t{2});
      continue;
    }
    CHECK((*step)["rules"]["in_force"] == Json::array({"loss_spike_guard"}));
    ++checked;
  }
  const Json back =
      client.command({{"command", "toggle_rule"}, {"rule", "nan_guard"}, {"enabled", true}});
  CHECK(back["type"].get<std::string>() == "ack");

  const Json unknown =
      client.command({{"command", "toggle_rule"}, {"rule", "nope"}, {"enabled", true}});
  CHECK(unknown["type"].get<std::string>() == "error");
  CHECK(unknown["reason"].get<std::string>() == "no rule named `nope`");
  const Json bad = client.command({{"command", "add_rule"}, {"source", "rule x { set gard = 1 }"}});
  CHECK(bad["type"].get<std::string>() == "error");
  CHECK(bad["reason"].get<std::string>() ==
        "1:14: expected `grad` or `lr` after `set`, found `gard`");
  const Json missing = client.command({{"command", "toggle_rule"}, {"rule", "nan_guard"}});
  CHECK(missing["reason"].get<std::string>() == "\"enabled\" must be true or false");
  const Json snapshot = client.command({{"command", "snapshot"}});
  CHECK(snapshot["session"]["rules"]["enable"] == Json::array({"nan_guard", "loss_spike_guard"}));
  CHECK(snapshot["session"]["model"]["zoo"].get<std::string>() == "dynamic_resnet");
}

TEST_CASE("node sampling, pause and resume, and a rule removed and added back") {
  Client client;
  client.connect(suiteRunner().endpoint);
  REQUIRE(until(client, "step"));
  // Per-node statistics every 2 steps, then off again.
  const Json sampling = client.command({{"command", "set_sampling"}, {"every", 2}});
  CHECK(sampling["every"].get<int>() == 2);
  const auto nodes = until(client, "nodes");
  REQUIRE(nodes);
  CHECK((*nodes)["nodes"]["step"].get<int64_t>() % 2 == int64_t{0});
  REQUIRE((*nodes)["nodes"]["nodes"].size() > size_t{10});
  CHECK((*nodes)["nodes"]["nodes"][0]["forward_s"].get<double>() >= 0);
  // Each parameter's gradient norm of the sampled step, for the studio's overlay.
  const Json& parameters = (*nodes)["nodes"]["parameters"];
  CHECK(parameters.size() > size_t{10});
  for (const auto& p : parameters) {
    CHECK_FALSE(p["name"].get<std::string>().empty());
    CHECK((p["grad_norm"].is_null() || p["grad_norm"].get<double>() >= 0));
  }
  client.command({{"command", "set_sampling"}, {"every", 0}});

  // Pause holds the loop between steps; resume lets it go.
  const Json paused = client.command({{"command", "pause"}});
  CHECK(paused["state"].get<std::string>() == "paused");
  CHECK(until(client, "state"));  // "paused"
  int64_t last = -1;
  while (auto m = client.next(1.0)) {  // drain what was sent before the pause took hold
    if ((*m)["type"] == "step")
      last = (*m)["step"].get<int64_t>();
  }
  CHECK_FALSE(client.next(2.0));  // nothing more while paused
  const Json resumedAck = client.command({{"command", "resume"}});
  CHECK(resumedAck["state"].get<std::string>() == "training");
  const auto resumed = until(client, "step");
  REQUIRE(resumed);
  CHECK((*resumed)["step"].get<int64_t>() > last);

  // A rule removed and added back, in force again from the ack's step on.
  const Json removed = client.command({{"command", "remove_rule"}, {"rule", "loss_spike_guard"}});
  CHECK(removed["rules"].size() == size_t{1});
  const Json added = client.command(
      {{"command", "add_rule"},
       {"source", "rule loss_spike_guard { when step > 10 && loss > 3 * loss_ema  skip step }"}});
  REQUIRE(added["rules"].size() == size_t{2});
  CHECK(added["rules"][1]["origin"].get<std::string>() == "this run");
  CHECK_FALSE(added.contains("warnings"));
  // A selector that selects nothing is added, and said: the rule would change nothing.
  const Json unselected = client.command(
      {{"command", "add_rule"},
       {"source", "rule clip_enc { select params \"encoder.*\"  set grad = clamp(grad, -1, 1) }"}});
  REQUIRE(unselected["type"].get<std::string>() == "ack");
  REQUIRE(unselected["warnings"].size() == size_t{1});
  CHECK(unselected["warnings"][0].get<std::string>().rfind(
            "rule `clip_enc`: params \"encoder.*\" selects none of the model's ", 0) == 0);
  CHECK(client.command({{"command", "remove_rule"}, {"rule", "clip_enc"}})["type"] == "ack");
}

TEST_CASE("a bad frame closes only its own connection") {
  struct BadFrame {
    const char* name;
    std::string bytes;
  };
  const BadFrame frames[] = {
      {"not JSON", std::string("\0\0\0\x05{oops", 9)},
      {"not an object", std::string("\0\0\0\x02[]", 6)},
      {"no type", std::string("\0\0\0\x02{}", 6)},
      {"oversized", std::string("\x7f\xff\xff\xff", 4)},
      {"nested 100000 deep",
       [] {
         const std::string payload = "{\"type\":\"command\",\"id\":" + std::string(100000, '[') +
                                     std::string(100000, ']') + "}";
         const auto n = static_cast<uint32_t>(payload.size());
         return std::string{static_cast<char>(n >> 24), static_cast<char>((n >> 16) & 0xff),
                            static_cast<char>((n >> 8) & 0xff), static_cast<char>(n & 0xff)} +
                payload;
       }()},
  };
  for (const BadFrame& frame : frames) {
    INFO("frame: ", frame.name);
    Client good;
    good.connect(suiteRunner().endpoint);
    const auto before = until(good, "step");
    REQUIRE(before);
    Client bad;
    bad.connect(suiteRunner().endpoint);
    bad.sendBytes(frame.bytes);
    bool closed = false;
    try {
      for (int i = 0; i < 20 && !closed; ++i)
        bad.next(0.5);
    } catch (const Disconnected&) {
      closed = true;
    }
    CHECK(closed);
    // The other client and the run go on.
    const auto after = until(good, "step");
    REQUIRE(after);
    CHECK((*after)["step"].get<int64_t>() > (*before)["step"].get<int64_t>());
  }
}

TEST_CASE("a second runner on a live runner's socket is refused, and the first keeps it") {
  Runner& first = suiteRunner();
  ChildProcess second;
  second.start(kRunner, {suite().session, "--listen", first.endpoint});
  REQUIRE(second.waitForFinished(60s));
  CHECK(second.exitCode() != 0);
  CHECK_MESSAGE(contains(second.standardError(), "another server listens there"),
                second.standardError());
  // It once took the path (the first ran on, unreachable) and removed it when it stopped.
  Client client;
  REQUIRE_NOTHROW(client.connect(first.endpoint));
  CHECK(until(client, "step"));
}

namespace {

// A socket connected to the suite runner's, with no client around it (-1: none), and every
// message the runner sends on it until the end of the stream (30 s at most), which closes it.
int rawConnection() {
  const std::string path = suiteRunner().endpoint.substr(std::string("unix:").size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  timeval wait{30, 0};
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait)) != 0 ||
      ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::vector<Json> readToEnd(int fd) {
  std::string got;
  std::array<char, 65536> buffer{};
  for (ssize_t n; (n = ::recv(fd, buffer.data(), buffer.size(), 0)) > 0;)
    got.append(buffer.data(), static_cast<size_t>(n));
  ::close(fd);
  symtune::attach::FrameDecoder decoder(symtune::attach::kMaxServerFrameBytes);
  decoder.feed(got.data(), got.size());
  std::vector<Json> messages;
  while (auto m = decoder.next())
    messages.push_back(std::move(*m));
  return messages;
}

}  // namespace

TEST_CASE("a refused client's further frames are not read, each refused again") {
  const int fd = rawConnection();
  REQUIRE(fd >= 0);
  // Not a hello, a thousand times in one write.
  std::string frames;
  for (int i = 0; i < 1000; ++i)
    frames += symtune::attach::encodeFrame({{"type", "command"}, {"id", i}});
  CHECK(::send(fd, frames.data(), frames.size(), MSG_NOSIGNAL) > 0);
  // What comes back: the hello, one refusal, then the end of the stream.
  std::vector<std::string> types;
  for (const Json& m : readToEnd(fd))
    types.push_back(m["type"].get<std::string>());
  CHECK(types == std::vector<std::string>{"hello", "error"});
}

TEST_CASE("a peer's own text is quoted as JSON in the refusal, line breaks escaped") {
  const int fd = rawConnection();
  REQUIRE(fd >= 0);
  // Once written to the runner's log as it came: a forged line, a screen cleared.
  const std::string frame =
      symtune::attach::encodeFrame({{"type", "x\nsymtune: attach: client 99: attached\n\x1b[2J"}});
  CHECK(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) > 0);
  const std::vector<Json> messages = readToEnd(fd);
  REQUIRE(messages.size() == 2);
  CHECK(messages[1]["reason"].get<std::string>() ==
        "the first message must be a hello, got \"x\\nsymtune: attach: client 99: "
        "attached\\n\\u001b[2J\"");
}

TEST_CASE("a client that closes its side after a command still gets the answer") {
  const int fd = rawConnection();
  REQUIRE(fd >= 0);
  // `nc -N`: the command, then the end of what it sends. The toggle is answered at the next step
  // boundary, after the end came: it was applied and its ack was lost.
  const std::string frames =
      symtune::attach::encodeFrame(
          {{"type", "hello"}, {"protocol", symtune::attach::kProtocolVersion}}) +
      symtune::attach::encodeFrame({{"type", "command"},
                                    {"id", 7},
                                    {"command", "toggle_rule"},
                                    {"rule", "nan_guard"},
                                    {"enabled", true}});
  CHECK(::send(fd, frames.data(), frames.size(), MSG_NOSIGNAL) > 0);
  REQUIRE(::shutdown(fd, SHUT_WR) == 0);
  bool acked = false;
  for (const Json& m : readToEnd(fd))
    acked = acked || (m["type"] == "ack" && m["id"] == 7 && m["command"] == "toggle_rule");
  CHECK(acked);
}

TEST_CASE("a client that reads none of its replies is closed, and the run goes on") {
  Runner& runner = suiteRunner();
  Client greedy;
  greedy.connect(runner.endpoint);
  // Each an error to answer; none read until all are sent (the server's queue once grew without
  // end: 136 MB for 600k).
  std::string frames;
  const int sent = 30000;
  for (int i = 0; i < sent; ++i)
    frames += symtune::attach::encodeFrame({{"type", "nonsense"}});
  int errors = 0;
  bool closed = false;
  try {
    greedy.sendBytes(frames);  // may fail part-way: closed while it still sends
    while (auto m = greedy.next(5)) {
      if ((*m)["type"] == "error")
        ++errors;
    }
  } catch (const Disconnected&) {
    closed = true;
  }
  CHECK(closed);
  CHECK(errors < sent);
  Client other;
  other.connect(runner.endpoint);
  CHECK(until(other, "step"));
}

TEST_CASE("a killed client process leaves the runner training") {
  Runner& runner = suiteRunner();
  ChildProcess probe;
  REQUIRE_NOTHROW(probe.start(kProbe, {runner.endpoint}));
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!contains(probe.standardOutput(), "step") && Clock::now() < deadline)
    probe.waitForOutput(500ms);
  REQUIRE_MESSAGE(contains(probe.standardOutput(), "step"), probe.standardOutput());
  probe.kill();
  CHECK(probe.waitForFinished(5s));
  Client client;
  client.connect(runner.endpoint);
  const auto first = until(client, "step");
  REQUIRE(first);
  const auto later = until(client, "step");
  REQUIRE(later);
  CHECK((*later)["step"].get<int64_t>() > (*first)["step"].get<int64_t>());
  CHECK(runner.process.running());
}
