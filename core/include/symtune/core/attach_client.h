#pragma once
// The attach client (docs/protocol.md): connects to a runner or any attachable program, does the
// handshake, reads messages and sends commands. Blocking calls with timeouts; one thread at a time.
// Part of symtune::core: tests and the command line use it, and the studio runs it off the GUI
// thread.
//
//   symtune::attach::Client client;
//   auto hello = client.connect("unix:/run/user/1000/symtune/runner-42.sock");
//   while (auto m = client.next(1.0)) { if ((*m)["type"] == "step") ... }
//   auto ack = client.command({{"command", "toggle_rule"}, {"rule", "nan_guard"},
//                              {"enabled", false}});

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "symtune/core/attach_protocol.h"

namespace symtune::attach {

// The connection ended: the server closed it, went away, or refused the handshake. what() says
// which ("the server closed the connection", "refused: wrong token", ...).
class Disconnected : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Client {
 public:
  Client();
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Connects to `endpoint` ("unix:/path" or "tcp:127.0.0.1:PORT"), reads the server's hello,
  // answers it (with `token` for TCP) and waits for the welcome. Returns the server's hello
  // (protocol, engine, run, auth). Throws Disconnected when refused or the server goes away,
  // std::runtime_error when it cannot connect or the handshake times out.
  nlohmann::json connect(const std::string& endpoint, const std::string& token = "",
                         double timeoutSeconds = 5);

  // The next message, waiting up to `timeoutSeconds`; nothing on timeout. Throws Disconnected.
  std::optional<nlohmann::json> next(double timeoutSeconds);
  // Sends a command ({"command": ..., arguments}) with a fresh id and waits for its ack or error,
  // keeping the other messages that arrive meanwhile for next(). Returns the ack or error message;
  // throws std::runtime_error on timeout, Disconnected when the connection ends.
  nlohmann::json command(nlohmann::json command, double timeoutSeconds = 10);
  void send(const nlohmann::json& message);
  void sendBytes(const std::string& bytes);  // anything, framed or not (for tests)
  void close();
  bool connected() const;

  // While connect(), next() or command() waits, `interrupted` is asked at least every 50 ms; once
  // it says true the call throws Disconnected("interrupted"). A thread that owns the client can
  // then be told to stop without waiting out a silent server's timeout.
  void setInterrupt(std::function<bool()> interrupted);

 private:
  struct Impl;
  std::function<bool()> interrupted_;  // before impl_, which refers to it
  std::unique_ptr<Impl> impl_;
  int64_t nextId_ = 1;
  std::deque<nlohmann::json> pending_;
};

}  // namespace symtune::attach
