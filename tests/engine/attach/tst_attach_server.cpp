// attach::Server on its own, with handlers of the test's: a client's commands are read only while
// few wait for their answers; an error's reason is bounded; a reply outliving the server is
// dropped; start() after stop(); silent connections beyond a bound are closed at once; a Unix
// socket path over the kernel's limit is refused by name.

#include "doctest_text.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "symtune/attach/attach_server.h"
#include "symtune/core/attach_client.h"
#include "test_files.h"

namespace {

using symtune::attach::Client;
using symtune::attach::Command;
using symtune::attach::Server;
using Json = nlohmann::json;
using namespace std::chrono_literals;

symtune::attach::ServerOptions quietOn(const std::string& listen) {
  symtune::attach::ServerOptions options;
  options.listen = listen;
  options.log = [](const std::string&) {};
  return options;
}

// The replies a handler kept, to answer later (as a rule change waits for a step boundary).
struct Held {
  std::mutex mutex;
  std::vector<Server::Reply> replies;
  std::atomic<int> handled{0};

  Server::CommandHandler handler() {
    return [this](const Command&, Server::Reply reply) {
      std::lock_guard<std::mutex> lock(mutex);
      replies.push_back(std::move(reply));
      ++handled;
    };
  }
  void answerAll() {
    std::vector<Server::Reply> now;
    {
      std::lock_guard<std::mutex> lock(mutex);
      now.swap(replies);
    }
    for (auto& reply : now)
      reply(Json::object());
  }
};

bool eventually(const std::function<bool()>& holds, std::chrono::milliseconds within = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!holds()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// A raw connection to the Unix socket `path`, saying nothing: -1 when it cannot connect.
int silentConnection(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

TEST_CASE("a client's commands are read while few wait for their answers, then the rest") {
  symtune::test::TempDir dir;
  Held held;
  Server server(quietOn("unix:" + dir.filePath("s.sock")), {{"name", "test"}});
  server.setCommandHandler(held.handler());
  server.start();
  Client client;
  client.connect(server.endpoint().text());
  constexpr int kSent = 1000;
  std::string frames;
  for (int i = 1; i <= kSent; ++i)
    frames +=
        symtune::attach::encodeFrame({{"type", "command"}, {"id", i}, {"command", "snapshot"}});
  client.sendBytes(frames);
  // Read without end, every one of them was handled at once and held its reply (and, in a run,
  // its change) until the next step boundary.
  REQUIRE(eventually([&] { return held.handled >= 64; }));
  std::this_thread::sleep_for(300ms);
  MESSAGE("handled before any answer: ", held.handled.load(), " of ", kSent);
  CHECK(held.handled == 64);
  // Answered as they come, every command is handled in the end, each answered once.
  int acked = 0;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (acked < kSent && std::chrono::steady_clock::now() < deadline) {
    held.answerAll();
    while (auto m = client.next(0.05))
      acked += (*m)["type"] == "ack";
  }
  CHECK(acked == kSent);
  CHECK(held.handled == kSent);
}

TEST_CASE("an error's reason is bounded, whatever the client sent") {
  symtune::test::TempDir dir;
  Server server(quietOn("unix:" + dir.filePath("s.sock")), {{"name", "test"}});
  server.setCommandHandler([](const Command& c, Server::Reply reply) {
    reply({{"error", "no rule named " + c.rule}});  // as the rule engine says it
  });
  server.start();
  Client client;
  client.connect(server.endpoint().text());
  const std::string huge(100000, 'x');
  const Json toggled =
      client.command({{"command", "toggle_rule"}, {"rule", "\xc3\xa9" + huge}, {"enabled", true}});
  REQUIRE(toggled["type"] == "error");
  const std::string reason = toggled["reason"].get<std::string>();
  CHECK(reason.size() < 1200);
  CHECK(reason.rfind("no rule named \xc3\xa9xxx", 0) == 0);
  CHECK(reason.find("bytes more)") != std::string::npos);
  // One the protocol refuses, quoting the command's name.
  const Json unknown = client.command({{"command", huge}});
  REQUIRE(unknown["type"] == "error");
  CHECK(unknown["reason"].get<std::string>().size() < 1200);
}

TEST_CASE("a reply called after the server has gone is dropped; start after stop is refused") {
  symtune::test::TempDir dir;
  Held held;
  {
    Server server(quietOn("unix:" + dir.filePath("s.sock")), {{"name", "test"}});
    server.setCommandHandler(held.handler());
    server.start();
    CHECK_THROWS_AS(server.start(), std::logic_error);
    Client client;
    client.connect(server.endpoint().text());
    client.sendBytes(
        symtune::attach::encodeFrame({{"type", "command"}, {"id", 1}, {"command", "snapshot"}}));
    REQUIRE(eventually([&] { return held.handled == 1; }));
  }
  held.answerAll();  // posted to a destroyed io_context until 2026-12-07
  Server later(quietOn("unix:" + dir.filePath("t.sock")), {{"name", "test"}});
  later.stop();
  CHECK_THROWS_AS(later.start(), std::logic_error);
  CHECK_FALSE(std::filesystem::exists(dir.filePath("t.sock")));
}

TEST_CASE(
    "connections that say nothing are closed at once beyond a bound; a client still attaches") {
  symtune::test::TempDir dir;
  auto options = quietOn("unix:" + dir.filePath("s.sock"));
  options.helloTimeoutSeconds = 60;
  Server server(options, {{"name", "test"}});
  server.start();
  const std::string path = dir.filePath("s.sock");
  std::vector<int> silent;
  for (int i = 0; i < 100; ++i)
    silent.push_back(silentConnection(path));
  // Those beyond the bound read their end at once (the first 64 get a hello and wait for one).
  std::vector<bool> ended(silent.size(), false);
  const auto endedCount = [&] {
    int count = 0;
    for (size_t i = 0; i < silent.size(); ++i) {
      char buffer[65536];
      ssize_t n = 0;
      while (!ended[i] && (n = ::recv(silent[i], buffer, sizeof buffer, MSG_DONTWAIT)) > 0) {
      }
      ended[i] = ended[i] || n == 0;
      count += ended[i];
    }
    return count;
  };
  for (int fd : silent)
    REQUIRE(fd >= 0);
  eventually([&] { return endedCount() >= 36; }, 5s);
  std::this_thread::sleep_for(300ms);
  const int closedAtOnce = endedCount();
  MESSAGE(closedAtOnce, " of 100 silent connections closed at once");
  CHECK(closedAtOnce == 36);
  for (size_t i = 0; i < silent.size(); ++i) {
    if (!ended[i]) {  // places free
      ::close(silent[i]);
      silent[i] = -1;
      break;
    }
  }
  bool attached = false;
  for (int i = 0; i < 50 && !attached; ++i) {
    try {
      Client client;
      client.connect(server.endpoint().text(), {}, 2);
      attached = true;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(100ms);
    }
  }
  CHECK(attached);
  for (int fd : silent)
    if (fd >= 0)
      ::close(fd);
}

TEST_CASE("a Unix socket path over the kernel's limit is refused by name, and nothing is made") {
  symtune::test::TempDir dir;
  const std::string folder = dir.filePath(std::string(60, 'd'));
  const std::string path = folder + "/" + std::string(60, 's') + ".sock";
  Server server(quietOn("unix:" + path), {{"name", "test"}});
  try {
    server.start();
    FAIL("started on a path of ", path.size(), " bytes");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("at most 107 bytes") != std::string::npos);
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(folder));
  Client client;
  CHECK_THROWS_AS(client.connect("unix:" + path), std::invalid_argument);
}
