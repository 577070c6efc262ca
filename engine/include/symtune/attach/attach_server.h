#pragma once
// The attach server (docs/protocol.md): what makes a training process attachable. The training
// thread publishes; an Asio thread serves any number of clients; commands come back through a
// handler. Nothing a client does — connecting, stalling, sending garbage, vanishing — blocks or
// slows the publisher (Note [Back-pressure]).
//
//   symtune::attach::ServerOptions options;
//   options.listen = "unix:/run/user/1000/symtune/me.sock";
//   symtune::attach::Server server(options, {{"name", "my run"}});
//   server.setCommandHandler([&](const Command& c, Server::Reply reply) { ... reply({}); });
//   server.start();
//   ...; server.publishStep({{"step", i}, {"loss", loss}, ...});   // after each step

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "symtune/core/attach_protocol.h"

namespace symtune::attach {

struct ServerOptions {
  std::string listen;               // "unix:/path", "tcp:127.0.0.1:PORT" (0: any free port); "" is
                                    // unix:defaultSocketPath()
  size_t maxQueuedNodeUpdates = 8;  // per client: older per-node updates are dropped, and counted
  size_t maxQueuedSteps = 256;      // per client: further steps coalesce into the newest queued
  double helloTimeoutSeconds = 5;   // a client that does not say hello by then is closed
  // One line per connection event (accepted, refused, closed and why). Default: stderr.
  std::function<void(const std::string&)> log;
};

class Server {
 public:
  // The result of a command: ack fields, or {"error": "reason"}. Callable from any thread, once.
  using Reply = std::function<void(nlohmann::json result)>;
  using CommandHandler = std::function<void(const Command& command, Reply reply)>;

  // `run` describes the run in the handshake (session name, model, device, parameters, ...).
  Server(ServerOptions options, nlohmann::json run);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Commands without a handler are answered with an error.
  void setCommandHandler(CommandHandler handler);
  // Listens and starts serving. Throws std::runtime_error (the endpoint and the reason) when it
  // cannot listen, std::invalid_argument for a bad endpoint.
  void start();
  void stop();  // closes every connection and the listener; removes the Unix socket file

  Endpoint endpoint() const;         // the bound endpoint (a TCP port 0 resolved)
  const std::string& token() const;  // TCP: what a client's hello must carry; empty for Unix
  size_t clientCount() const;        // clients past the handshake

  // The training side: thread-safe, never waits for a client. A new client gets the latest
  // graph, rules, bindings, remat plan, control, state and step right after its handshake.
  void publishGraph(nlohmann::json graph);
  void publishRules(nlohmann::json rules);
  void publishBindings(nlohmann::json table);         // DynaCompiler's binding table
  void publishRemat(nlohmann::json plan);             // the remat plan in force
  void publishControl(nlohmann::json control);        // the configuration space and its pins
  void publishValidation(nlohmann::json validation);  // the latest on the held-out samples
  void publishState(const std::string& state);
  void publishStep(nlohmann::json step);
  void publishNodes(nlohmann::json nodes);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace symtune::attach
