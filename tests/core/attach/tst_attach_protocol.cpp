// The attach protocol's frames, commands and endpoints as data: frames reassembled from any
// split, every way a frame can be bad (with its message), commands checked field by field, and
// TCP endpoints limited to loopback. And the client's waits: a silent server times out, or ends
// the wait as soon as the client's owner interrupts it.

#include "doctest_text.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "error_of.h"
#include "symtune/core/attach_client.h"
#include "symtune/core/attach_protocol.h"

namespace {

using namespace symtune::attach;
using Json = nlohmann::json;

using symtune::test::errorOf;

// A Unix socket that listens and never speaks: the kernel completes a client's connect, and the
// client then waits for a hello that never comes.
class SilentServer {
 public:
  SilentServer()
      : path_((std::filesystem::temp_directory_path() /
               ("symtune-silent-" + std::to_string(::getpid()) + ".sock"))
                  .string()) {
    ::unlink(path_.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    listening_ = fd_ >= 0 &&
                 ::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 &&
                 ::listen(fd_, 4) == 0;
  }
  ~SilentServer() {
    if (fd_ >= 0)
      ::close(fd_);
    ::unlink(path_.c_str());
  }
  SilentServer(const SilentServer&) = delete;
  SilentServer& operator=(const SilentServer&) = delete;
  bool listening() const { return listening_; }
  std::string endpoint() const { return "unix:" + path_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool listening_ = false;
};

// The frame of `payload`, as it is.
std::string frameOf(const std::string& payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  return std::string{static_cast<char>(n >> 24), static_cast<char>((n >> 16) & 0xff),
                     static_cast<char>((n >> 8) & 0xff), static_cast<char>(n & 0xff)} +
         payload;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("frames are reassembled from any split of the stream") {
  const std::string stream = encodeFrame({{"type", "a"}, {"n", 1}}) +
                             encodeFrame({{"type", "b"}, {"text", "ünïcode"}}) +
                             encodeFrame({{"type", "c"}});
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, stream.size()}) {
    INFO("pieces of ", piece, " bytes");
    FrameDecoder decoder(kMaxClientFrameBytes);
    std::vector<std::string> types;
    for (size_t at = 0; at < stream.size(); at += piece) {
      decoder.feed(stream.data() + at, std::min(piece, stream.size() - at));
      while (auto m = decoder.next())
        types.push_back((*m)["type"]);
    }
    CHECK(types == std::vector<std::string>{"a", "b", "c"});
    CHECK(decoder.buffered() == 0);
  }
  CHECK(encodeFrame({{"type", "x"}}).substr(0, 4) == std::string("\0\0\0\x0c", 4));
}

TEST_CASE("each kind of bad frame gives its message and leaves the decoder broken") {
  struct Row {
    const char* name;
    std::string bytes;
    const char* message;
  };
  const Row rows[] = {
      {"oversized", std::string("\0\x10\0\x01", 4),
       "frame of 1048577 bytes is over the limit of 1048576"},
      {"not JSON", std::string("\0\0\0\x03{x}", 7), "frame is not JSON"},
      {"not UTF-8", std::string("\0\0\0\x0d{\"type\":\"\xff\"}", 17), "frame is not JSON"},
      {"an array", std::string("\0\0\0\x02[]", 6), "frame is not a JSON object"},
      {"no type", std::string("\0\0\0\x02{}", 6), "message has no string \"type\""},
      {"type not a string", std::string("\0\0\0\x0a{\"type\":1}", 14),
       "message has no string \"type\""},
      // A peer's deep nesting once overflowed the stack of the server's refusal (it dumped it).
      {"nested too deep",
       frameOf("{\"type\":\"hello\",\"protocol\":" + std::string(65, '[') + std::string(65, ']') +
               "}"),
       "frame nests deeper than 64 levels"},
  };
  {
    // 64 levels pass, and brackets inside strings are not nesting.
    FrameDecoder decoder(kMaxClientFrameBytes);
    const std::string deep =
        frameOf("{\"type\":\"x\",\"s\":\"[[[[\\\"{{\",\"a\":" + std::string(63, '[') +
                std::string(63, ']') + "}");
    decoder.feed(deep.data(), deep.size());
    const auto message = decoder.next();
    REQUIRE(message.has_value());
    CHECK((*message)["s"] == "[[[[\"{{");
  }
  for (const Row& row : rows) {
    INFO(row.name);
    FrameDecoder decoder(kMaxClientFrameBytes);
    decoder.feed(row.bytes.data(), row.bytes.size());
    CHECK(errorOf([&] { decoder.next(); }) == row.message);
    // The stream has lost its framing: the decoder stays broken.
    const std::string good = encodeFrame({{"type", "ok"}});
    decoder.feed(good.data(), good.size());
    CHECK(errorOf([&] { decoder.next(); }) == "the stream lost its framing after an earlier error");
  }
}

TEST_CASE("commands are checked field by field") {
  struct Row {
    const char* name;
    const char* json;
    const char* error;
  };
  const Row rows[] = {
      {"toggle", R"({"id": 1, "command": "toggle_rule", "rule": "a", "enabled": true})",
       "(no error)"},
      {"no id", R"({"command": "pause"})", "\"id\" must be an integer"},
      {"id a string", R"({"id": "1", "command": "pause"})", "\"id\" must be an integer"},
      {"unknown command", R"({"id": 1, "command": "explode"})",
       "unknown command \"explode\" (toggle_rule, add_rule, remove_rule, set_sampling, set_budget, "
       "pin, pause, resume, snapshot, stop)"},
      {"pin", R"({"id": 1, "command": "pin", "knob": "threads", "value": 1})", "(no error)"},
      {"unpin", R"({"id": 1, "command": "pin", "knob": "threads", "value": null})", "(no error)"},
      {"pin without value", R"({"id": 1, "command": "pin", "knob": "threads"})",
       "\"value\" is missing (null lets the knob go)"},
      {"pin to words", R"({"id": 1, "command": "pin", "knob": "threads", "value": "one"})",
       "\"value\" must be a number, or null to let the knob go"},
      {"pin without knob", R"({"id": 1, "command": "pin", "value": 1})",
       "\"knob\" must be a string"},
      {"toggle without enabled", R"({"id": 1, "command": "toggle_rule", "rule": "a"})",
       "\"enabled\" must be true or false"},
      {"add without source", R"({"id": 1, "command": "add_rule"})", "\"source\" must be a string"},
      {"negative sampling", R"({"id": 1, "command": "set_sampling", "every": -1})",
       "\"every\" must be 0 (off) or a positive number of steps"},
      {"huge id", R"({"id": 18446744073709551615, "command": "stop"})", "\"id\" is out of range"},
      {"budget in MB", R"({"id": 1, "command": "set_budget", "budget_mb": 512})", "(no error)"},
      {"budget as a share", R"({"id": 1, "command": "set_budget", "budget_fraction": 0.5})",
       "(no error)"},
      {"budget of neither", R"({"id": 1, "command": "set_budget"})",
       "set_budget takes one of \"budget_mb\" and \"budget_fraction\""},
      {"budget of both",
       R"({"id": 1, "command": "set_budget", "budget_mb": 512, "budget_fraction": 0.5})",
       "set_budget takes one of \"budget_mb\" and \"budget_fraction\""},
      {"budget of nothing", R"({"id": 1, "command": "set_budget", "budget_mb": 0})",
       "\"budget_mb\" must be a number above 0"},
      {"budget in words", R"({"id": 1, "command": "set_budget", "budget_mb": "lots"})",
       "\"budget_mb\" must be a number above 0"},
      {"share above one", R"({"id": 1, "command": "set_budget", "budget_fraction": 1.5})",
       "\"budget_fraction\" must be in (0, 1]"},
      {"budget past a session's", R"({"id": 1, "command": "set_budget", "budget_mb": 1e13})",
       "\"budget_mb\" must be in (0, 1e9]"},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    const Json message = Json::parse(row.json);
    CHECK(errorOf([&] { parseCommand(message); }) == row.error);
  }
}

TEST_CASE("endpoints parse, and TCP is limited to loopback") {
  CHECK(parseEndpoint("unix:/run/x.sock").path == "/run/x.sock");
  const Endpoint tcp = parseEndpoint("tcp:127.0.0.1:4567");
  CHECK(tcp.port == 4567);
  CHECK(tcp.text() == "tcp:127.0.0.1:4567");
  CHECK(parseEndpoint("tcp:[::1]:0").host == "::1");
  CHECK(parseEndpoint("tcp:localhost:1").host == "127.0.0.1");
  CHECK(errorOf([] { parseEndpoint("tcp:0.0.0.0:80"); }) ==
        "TCP is for loopback only (127.0.0.1 or ::1), got \"0.0.0.0\": use a Unix socket, or a "
        "tunnel, to reach another machine");
  CHECK(errorOf([] { parseEndpoint("unix:relative.sock"); }) ==
        "a Unix endpoint needs an absolute path: unix:/path/to.sock");
  CHECK(errorOf([] { parseEndpoint("tcp:127.0.0.1:99999"); }) ==
        "bad TCP port \"99999\" (0 picks a free one)");
  CHECK(errorOf([] { parseEndpoint("http://x"); }) ==
        "an endpoint is unix:/path or tcp:127.0.0.1:PORT, got \"http://x\"");
}

TEST_CASE("a client waiting on a silent server times out, or stops as soon as it is interrupted") {
  SilentServer server;
  REQUIRE(server.listening());
  {
    Client client;
    CHECK(errorOf([&] { client.connect(server.endpoint(), "", 0.2); }) ==
          server.endpoint() + ": no hello from the server within the timeout");
  }
  // The studio's worker thread owns its client; closing the studio interrupts it. The 30 s
  // handshake timeout must not be waited out.
  Client client;
  std::atomic<bool> stop{false};
  client.setInterrupt([&] { return stop.load(); });
  const auto start = std::chrono::steady_clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
  });
  CHECK(errorOf([&] { client.connect(server.endpoint(), "", 30); }) == "interrupted");
  stopper.join();
  CHECK(secondsSince(start) < 10);
  CHECK_FALSE(client.connected());
  CHECK(errorOf([&] { client.next(1); }) == "not connected");
}
