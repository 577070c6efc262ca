#include "symtune/attach/attach_server.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include <asio.hpp>

#include "symtune/core/version.h"

namespace symtune::attach {

// Note [Back-pressure]
// Publishing posts the message to the server's Asio thread and returns: the training thread never
// touches a socket. Each client has its own queue, written one frame at a time. A client that
// stops reading fills the kernel's socket buffer, then its queue: per-node updates beyond
// maxQueuedNodeUpdates drop the oldest (the client is told how many with a `dropped` message
// before the next frame it gets), and steps beyond maxQueuedSteps fold into the newest queued
// step, whose `coalesced` says how many earlier steps it stands for — the feature vector a
// client sees is always the latest, and it knows what it missed. Graph, rules and state updates
// are rare and queue as they are. So a stalled client costs the trainer one post per message
// and the server bounded memory.

namespace {

using asio::generic::stream_protocol;
using Acceptor = asio::basic_socket_acceptor<stream_protocol>;

std::string randomToken() {
  std::random_device device;  // /dev/urandom on Linux
  static const char* hex = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 4; ++i) {  // 128 bits
    const uint32_t word = device();
    for (int shift = 28; shift >= 0; shift -= 4)
      token += hex[(word >> shift) & 0xf];
  }
  return token;
}

bool sameToken(const std::string& a, const std::string& b) {
  // Constant time in the length of the expected token.
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < b.size(); ++i)
    diff |= static_cast<unsigned>(i < a.size() ? a[i] : 0) ^ static_cast<unsigned>(b[i]);
  return diff == 0;
}

enum class Kind { Control, Step, Nodes };

// The most replies and updates a client may leave unread before it is closed.
constexpr size_t kMostQueuedControl = 4096;

// The most commands of one client waiting for their answers (a rule change waits for a step
// boundary): beyond them its connection is not read until one is answered, and TCP holds back
// the rest. Read without end, a client writing a million snapshots during one step had the
// training thread build a million at the next boundary, and each queued change held its text.
constexpr int kMostPendingCommands = 64;

// The most connections not past their hello: beyond them a new one is closed at once. Each held
// a file descriptor for the hello's timeout, and a local user opening a thousand silent ones ran
// the training process out of them (its checkpoints and data files failed).
constexpr size_t kMostHandshaking = 64;

// The longest reason an error reply carries (bytes): a reason may quote what the client sent (an
// unknown command's or rule's name), and 4096 queued replies quoting a megabyte each held 4 GiB.
constexpr size_t kMostReasonBytes = 1024;

// How long accepting waits after a failure (out of file descriptors: it would fail again at once).
constexpr auto kAcceptRetry = std::chrono::milliseconds(200);

// Whether a server answers at the Unix socket `path`.
bool answers(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  const bool connected =
      ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return connected;
}

struct Outgoing {
  Kind kind = Kind::Control;
  std::string frame;    // Control, Nodes: encoded
  nlohmann::json step;  // Step: encoded when written (it may still coalesce)
  // Control: the type of an update only its latest of which matters ("graph", "state", ...);
  // empty for replies.
  std::string latest;
};

// A peer's own text (a message type it sent) as a log line or a reason may quote it: at most 64
// bytes, as a JSON string, so no control character or line break it sent reaches the log.
std::string peerText(const std::string& text) {
  constexpr size_t kMost = 64;
  const bool cut = text.size() > kMost;
  return nlohmann::json(text.substr(0, kMost))
             .dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) +
         (cut ? "..." : "");
}

// `reason` cut to kMostReasonBytes, at a character's start, saying how much was left out.
std::string bounded(std::string reason) {
  if (reason.size() <= kMostReasonBytes)
    return reason;
  size_t cut = kMostReasonBytes;
  while (cut > 0 && (static_cast<unsigned char>(reason[cut]) & 0xc0) == 0x80)
    --cut;
  const size_t left = reason.size() - cut;
  reason.resize(cut);
  return reason + "... (" + std::to_string(left) + " bytes more)";
}

}  // namespace

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  struct Connection;

  ServerOptions options;
  nlohmann::json run;
  std::string token;
  Endpoint bound;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::unique_ptr<Acceptor> acceptor;
  std::thread thread;
  std::atomic<bool> stopped{false};
  std::mutex handlerMutex;
  CommandHandler handler;
  // Io thread only:
  std::vector<std::shared_ptr<Connection>> connections;
  std::unique_ptr<asio::steady_timer> stopTimer;  // stop(): the deadline for the last frames
  asio::steady_timer acceptRetry{io};
  bool acceptFailing = false;
  bool handshakesFull = false;  // said once until a place frees
  nlohmann::json graph, rules, bindings, remat, control, validation, step;
  std::string state = "starting";
  uint64_t nextId = 1;
  std::atomic<size_t> ready{0};
  ino_t boundInode = 0;  // the socket file this server made (removed at stop only if still it)

  void log(const std::string& line) const {
    if (options.log)
      options.log(line);
    else
      std::cerr << "symtune: attach: " << line << std::endl;
  }

  struct Connection : std::enable_shared_from_this<Connection> {
    Connection(Impl& server, stream_protocol::socket s, uint64_t id)
        : impl(server), socket(std::move(s)), helloTimer(server.io), id(id) {}

    Impl& impl;
    stream_protocol::socket socket;
    asio::steady_timer helloTimer;
    uint64_t id;
    FrameDecoder decoder{kMaxClientFrameBytes};
    std::array<char, 4096> buffer{};
    std::deque<Outgoing> queue;
    std::string writing;  // the frame being written
    bool isWriting = false, isReady = false, closed = false;
    int64_t droppedNodes = 0;

    std::string name() const { return "client " + std::to_string(id); }

    void start() {
      // Where a token is asked for, what the run is (its session's path among it) waits for the
      // welcome: a peer without the token learns nothing of it.
      nlohmann::json hello = {{"type", "hello"},
                              {"protocol", kProtocolVersion},
                              {"engine", kVersion},
                              {"run", impl.token.empty() ? impl.run : nlohmann::json::object()},
                              {"auth", impl.token.empty() ? "none" : "token"}};
      sendControl(hello);
      helloTimer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(impl.options.helloTimeoutSeconds)));
      helloTimer.async_wait([self = shared_from_this()](const asio::error_code& ec) {
        if (!ec && !self->isReady)
          self->close("no hello within " + std::to_string(self->impl.options.helloTimeoutSeconds) +
                      " s");
      });
      read();
    }

    void read() {
      socket.async_read_some(
          asio::buffer(buffer), [self = shared_from_this()](const asio::error_code& ec, size_t n) {
            if (self->closed)
              return;
            if (ec == asio::error::eof && self->isReady) {
              // Its side closed, perhaps only that (`nc -N`): what it asked for is still
              // answered, and the connection closes once the answers are written.
              self->readClosed = true;
              if (self->pendingReplies == 0)
                self->closeWhenWritten("the client closed the connection");
              return;
            }
            if (ec) {
              self->close(ec == asio::error::eof ? "the client closed the connection"
                                                 : "read failed: " + ec.message());
              return;
            }
            self->decoder.feed(self->buffer.data(), n);
            if (self->drain())
              self->read();
          });
    }

    // Handles the frames read so far. False when reading stops: closed, closing, or as many
    // commands waiting for their answers as a client may have (the rest of its frames wait in
    // the decoder; the answer that frees a place drains again).
    bool drain() {
      try {
        while (pendingReplies < kMostPendingCommands) {
          auto message = decoder.next();
          if (!message)
            return true;
          handle(*message);
          // Refused or closing: nothing more it sends is read (each frame was refused again).
          if (closed || closeAfterWrite)
            return false;
        }
      } catch (const ProtocolError& e) {
        close(std::string("protocol error: ") + e.what());
        return false;
      }
      readPaused = true;
      return false;
    }

    void handle(const nlohmann::json& message) {
      const std::string type = message["type"].get<std::string>();
      if (!isReady) {
        if (type != "hello") {
          refuse("the first message must be a hello, got " + peerText(type));
          return;
        }
        const auto protocol = message.find("protocol");
        if (protocol == message.end() || !protocol->is_number_integer() ||
            protocol->get<int64_t>() != kProtocolVersion) {
          // The peer's value only where it is a number: its own text could be anything.
          const std::string given = protocol == message.end() ? "missing"
                                    : protocol->is_number()   ? protocol->dump()
                                                              : "not a number";
          refuse("protocol version " + given + ", this server speaks " +
                 std::to_string(kProtocolVersion));
          return;
        }
        if (!impl.token.empty()) {
          const auto token = message.find("token");
          if (token == message.end() || !token->is_string() ||
              !sameToken(token->get<std::string>(), impl.token)) {
            refuse("wrong token");
            return;
          }
        }
        isReady = true;
        helloTimer.cancel();
        ++impl.ready;
        impl.log(name() + ": attached");
        sendControl({{"type", "welcome"}, {"run", impl.run}});
        if (!impl.graph.is_null())
          sendControl({{"type", "graph"}, {"graph", impl.graph}}, "graph");
        if (!impl.rules.is_null())
          sendControl({{"type", "rules"}, {"rules", impl.rules}}, "rules");
        if (!impl.bindings.is_null())
          sendControl({{"type", "bindings"}, {"bindings", impl.bindings}}, "bindings");
        if (!impl.remat.is_null())
          sendControl({{"type", "remat"}, {"remat", impl.remat}}, "remat");
        if (!impl.control.is_null())
          sendControl({{"type", "control"}, {"control", impl.control}}, "control");
        if (!impl.validation.is_null())
          sendControl({{"type", "validation"}, {"validation", impl.validation}}, "validation");
        sendControl({{"type", "state"}, {"state", impl.state}}, "state");
        if (!impl.step.is_null())
          enqueueStep(impl.step);
        return;
      }
      if (type != "command") {
        sendControl({{"type", "error"}, {"reason", "unknown message type " + peerText(type)}});
        return;
      }
      Command command;
      try {
        command = parseCommand(message);
      } catch (const ProtocolError& e) {
        nlohmann::json error = {{"type", "error"}, {"reason", bounded(e.what())}};
        if (message.contains("id") && message["id"].is_number_integer())
          error["id"] = message["id"];
        sendControl(error);
        return;
      }
      CommandHandler handler;
      {
        std::lock_guard<std::mutex> lock(impl.handlerMutex);
        handler = impl.handler;
      }
      std::weak_ptr<Connection> weak = shared_from_this();
      auto once = std::make_shared<std::atomic<bool>>(false);
      // Held weakly: a reply called after the server has gone (a handler that keeps it) is
      // dropped; it posted to the destroyed io_context until 2026-12-07.
      Reply reply = [weak, id = command.id, name = command.name, once,
                     server = impl.weak_from_this()](nlohmann::json result) {
        if (once->exchange(true))
          return;
        const auto live = server.lock();
        if (!live)
          return;
        asio::post(live->io, [weak, id, name, result = std::move(result)]() mutable {
          auto self = weak.lock();
          if (!self || self->closed)
            return;
          --self->pendingReplies;
          nlohmann::json out = result.is_object() ? result : nlohmann::json::object();
          if (out.contains("error")) {
            const nlohmann::json& error = out["error"];
            nlohmann::json reason =
                error.is_string() ? nlohmann::json(bounded(error.get<std::string>())) : error;
            self->sendControl({{"type", "error"}, {"id", id}, {"reason", std::move(reason)}});
          } else {
            out["type"] = "ack";
            out["id"] = id;
            out["command"] = name;
            self->sendControl(out);
          }
          if (self->readPaused && !self->closed) {  // a place is free: what waits is read
            self->readPaused = false;
            if (self->drain())
              self->read();
          }
          if (self->readClosed && self->pendingReplies == 0)
            self->closeWhenWritten("the client closed the connection; its replies are written");
        });
      };
      ++pendingReplies;  // every path below replies, now or when the change is applied
      if (!handler) {
        reply({{"error", "this server takes no commands"}});
        return;
      }
      try {
        handler(command, reply);
      } catch (const std::exception& e) {
        reply({{"error", e.what()}});
      }
    }

    void refuse(const std::string& reason) {
      sendControl({{"type", "error"}, {"reason", reason}});
      // Close once the error is written: the client reads why.
      closeAfterWrite = true;
      impl.log(name() + ": refused: " + reason);
      if (!isWriting)
        close(reason);
    }
    bool closeAfterWrite = false;
    std::string closeReason = "refused";
    // Commands handled and not yet answered, and whether the client closed its side: it is then
    // closed once the last answer is written.
    int pendingReplies = 0;
    bool readClosed = false;
    bool readPaused = false;  // kMostPendingCommands wait for their answers: nothing is read

    // Closes once what is queued is written (the ack of a stop, the final state).
    void closeWhenWritten(const std::string& reason) {
      closeAfterWrite = true;
      closeReason = reason;
      if (!isWriting)
        write();
    }

    // `message` as a frame; one over the client's limit (a graph or per-node update of a huge
    // model), which it would refuse and close on, becomes an error saying so, in a frame it takes.
    std::string frameOf(const nlohmann::json& message) {
      std::string frame = encodeFrame(message);
      if (frame.size() - 4 <= kMaxServerFrameBytes)
        return frame;
      const std::string reason = "a \"" + message.value("type", std::string("?")) +
                                 "\" message of " + std::to_string(frame.size() - 4) +
                                 " bytes is over the protocol's limit of " +
                                 std::to_string(kMaxServerFrameBytes) + ": not sent";
      impl.log(name() + ": " + reason);
      return encodeFrame({{"type", "error"}, {"reason", reason}});
    }

    // A reply, or with `latest` an update of that type, which replaces one of its type still
    // queued (the client reads only the newest anyway): a client that reads nothing holds one
    // of each, not one per change.
    void sendControl(const nlohmann::json& message, const std::string& latest = {}) {
      if (closed)
        return;
      if (!latest.empty()) {
        queue.erase(std::remove_if(queue.begin(), queue.end(),
                                   [&](const Outgoing& o) {
                                     return o.kind == Kind::Control && o.latest == latest;
                                   }),
                    queue.end());
      } else if (std::count_if(queue.begin(), queue.end(), [](const Outgoing& o) {
                   return o.kind == Kind::Control && o.latest.empty();
                 }) >= static_cast<std::ptrdiff_t>(kMostQueuedControl)) {
        // A client that sends commands and reads none of the replies would grow its queue
        // without end.
        close("it reads none of " + std::to_string(kMostQueuedControl) + " replies");
        return;
      }
      queue.push_back({Kind::Control, frameOf(message), {}, latest});
      write();
    }

    void enqueueNodes(const nlohmann::json& nodes) {
      if (!isReady || closed)
        return;
      size_t queued = 0;
      for (const auto& o : queue)
        queued += o.kind == Kind::Nodes;
      if (queued >= impl.options.maxQueuedNodeUpdates) {
        for (auto it = queue.begin(); it != queue.end(); ++it) {
          if (it->kind == Kind::Nodes) {
            queue.erase(it);
            ++droppedNodes;
            break;
          }
        }
      }
      queue.push_back({Kind::Nodes, frameOf({{"type", "nodes"}, {"nodes", nodes}}), {}, {}});
      write();
    }

    void enqueueStep(const nlohmann::json& step) {
      if (!isReady || closed)
        return;
      size_t queued = 0;
      for (const auto& o : queue)
        queued += o.kind == Kind::Step;
      int64_t coalesced = step.value("coalesced", int64_t{0});
      if (queued >= impl.options.maxQueuedSteps) {
        // Folded into the newest queued step, which then moves behind whatever was queued after
        // it (an ack saying from which step a change holds comes before the step it holds on).
        const auto newest = std::find_if(queue.rbegin(), queue.rend(),
                                         [](const Outgoing& o) { return o.kind == Kind::Step; });
        if (newest != queue.rend()) {
          coalesced += newest->step.value("coalesced", int64_t{0}) + 1;
          queue.erase(std::next(newest).base());
        }
      }
      Outgoing next{Kind::Step, {}, step, {}};
      if (coalesced > 0)
        next.step["coalesced"] = coalesced;
      queue.push_back(std::move(next));
      write();
    }

    void write() {
      if (isWriting || closed)
        return;
      if (droppedNodes > 0) {
        queue.push_front(
            {Kind::Control, encodeFrame({{"type", "dropped"}, {"nodes", droppedNodes}}), {}, {}});
        droppedNodes = 0;
      }
      if (queue.empty()) {
        if (closeAfterWrite)
          close(closeReason);
        return;
      }
      Outgoing next = std::move(queue.front());
      queue.pop_front();
      if (next.kind == Kind::Step) {
        nlohmann::json message = std::move(next.step);
        message["type"] = "step";
        writing = frameOf(message);
      } else {
        writing = std::move(next.frame);
      }
      isWriting = true;
      asio::async_write(socket, asio::buffer(writing),
                        [self = shared_from_this()](const asio::error_code& ec, size_t) {
                          self->isWriting = false;
                          if (self->closed)
                            return;
                          if (ec) {
                            self->close("write failed: " + ec.message());
                            return;
                          }
                          self->write();
                        });
    }

    void close(const std::string& reason) {
      if (closed)
        return;
      closed = true;
      if (isReady)
        --impl.ready;
      impl.log(name() + ": closed: " + reason);
      asio::error_code ignored;
      helloTimer.cancel();
      socket.shutdown(asio::socket_base::shutdown_both, ignored);
      socket.close(ignored);
      queue.clear();
      auto& all = impl.connections;
      all.erase(std::remove(all.begin(), all.end(), shared_from_this()), all.end());
      if (impl.stopTimer && all.empty())
        impl.stopTimer->cancel();  // stopping, and the last client has had its frames
    }
  };

  void accept() {
    acceptor->async_accept(
        [self = shared_from_this()](const asio::error_code& ec, stream_protocol::socket socket) {
          if (self->stopped)
            return;
          const size_t handshaking = static_cast<size_t>(
              std::count_if(self->connections.begin(), self->connections.end(),
                            [](const std::shared_ptr<Connection>& c) { return !c->isReady; }));
          if (!ec && handshaking >= kMostHandshaking) {
            if (!self->handshakesFull)
              self->log("refusing connections: " + std::to_string(kMostHandshaking) +
                        " have not said hello yet");
            self->handshakesFull = true;
            asio::error_code ignored;
            socket.close(ignored);
          } else if (!ec) {
            self->handshakesFull = false;
            auto c = std::make_shared<Connection>(*self, std::move(socket), self->nextId++);
            self->connections.push_back(c);
            self->log(c->name() + ": connected");
            c->start();
          } else if (ec == asio::error::operation_aborted) {
            return;
          } else {
            // Out of file descriptors, say: the waiting connection would fail again at once, so
            // accepting pauses (logged once, not once per spin).
            if (!self->acceptFailing)
              self->log(std::string("accept failed: ") + ec.message() + " (retrying)");
            self->acceptFailing = true;
            self->acceptRetry.expires_after(kAcceptRetry);
            self->acceptRetry.async_wait([self](const asio::error_code& waited) {
              if (!waited && !self->stopped)
                self->accept();
            });
            return;
          }
          self->acceptFailing = false;
          self->accept();
        });
  }

  // Runs `f` on the io thread with the connections that passed the handshake. Held weakly: a
  // message published after stop() stays in the io_context, which a strong hold made a cycle
  // with the server (it was never freed).
  template <typename F>
  void broadcast(F f) {
    asio::post(io, [weak = weak_from_this(), f = std::move(f)]() mutable {
      const auto self = weak.lock();
      if (!self)
        return;
      auto connections = self->connections;  // a write error may close one mid-loop
      f(*self, connections);
    });
  }
};

Server::Server(ServerOptions options, nlohmann::json run) : impl_(std::make_shared<Impl>()) {
  impl_->options = std::move(options);
  impl_->run = std::move(run);
}

Server::~Server() {
  stop();
}

void Server::setCommandHandler(CommandHandler handler) {
  std::lock_guard<std::mutex> lock(impl_->handlerMutex);
  impl_->handler = std::move(handler);
}

void Server::start() {
  // A second start overwrote the running thread (std::terminate); one after stop() served a
  // single client and then held its thread, listener and socket file for good.
  if (impl_->stopped || impl_->thread.joinable())
    throw std::logic_error("attach::Server::start: already started, or stopped");
  Endpoint e = parseEndpoint(impl_->options.listen.empty() ? "unix:" + defaultSocketPath()
                                                           : impl_->options.listen);
  auto& io = impl_->io;
  auto acceptor = std::make_unique<Acceptor>(io);
  asio::error_code ec;
  if (e.kind == Endpoint::Kind::Unix) {
    namespace fs = std::filesystem;
    const fs::path path(e.path);
    std::error_code fec;
    if (!fs::exists(path.parent_path(), fec)) {
      fs::create_directories(path.parent_path(), fec);
      fs::permissions(path.parent_path(), fs::perms::owner_all, fec);
    }
    struct stat st {};
    if (impl_->options.listen.empty()) {
      // The default folder (under /tmp where XDG_RUNTIME_DIR is unset) must be this user's alone:
      // one another user made could have its socket swapped.
      const std::string folder = path.parent_path().string();
      if (::lstat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() ||
          (st.st_mode & 077) != 0)
        throw std::runtime_error("cannot listen in " + folder +
                                 ": not a folder private to this user (mode 0700); remove it, "
                                 "or give --listen");
    }
    if (::lstat(e.path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode))
        throw std::runtime_error(e.text() + ": exists and is not a socket");
      if (answers(e.path))
        throw std::runtime_error(e.text() + ": another server listens there");
      fs::remove(path, fec);  // a stale socket: connecting to it fails
    }
    const asio::local::stream_protocol::endpoint local(e.path);
    acceptor->open(stream_protocol(AF_UNIX, 0), ec);
    if (!ec) {
      // Created private: a chmod after the bind would leave a moment in which others may connect.
      const mode_t mask = ::umask(0177);
      acceptor->bind(stream_protocol::endpoint(local), ec);
      ::umask(mask);
    }
    if (!ec && ::chmod(e.path.c_str(), 0600) != 0)
      ec = asio::error_code(errno, asio::system_category());
    if (!ec && ::lstat(e.path.c_str(), &st) == 0)
      impl_->boundInode = st.st_ino;
  } else {
    const asio::ip::tcp::endpoint tcp(asio::ip::make_address(e.host, ec), e.port);
    if (!ec)
      acceptor->open(stream_protocol(tcp.protocol().family(), IPPROTO_TCP), ec);
    if (!ec)
      acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec)
      acceptor->bind(stream_protocol::endpoint(tcp), ec);
    if (!ec) {
      impl_->token = randomToken();
      // The bound port (0 picks one).
      const auto local = acceptor->local_endpoint(ec);
      if (!ec) {
        const auto* address = local.data();
        e.port = address->sa_family == AF_INET6
                     ? ntohs(reinterpret_cast<const sockaddr_in6*>(address)->sin6_port)
                     : ntohs(reinterpret_cast<const sockaddr_in*>(address)->sin_port);
      }
    }
  }
  if (!ec)
    acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::runtime_error("cannot listen on " + e.text() + ": " + ec.message());
  impl_->bound = e;
  impl_->acceptor = std::move(acceptor);
  impl_->accept();
  impl_->thread = std::thread([impl = impl_] { impl->io.run(); });
}

void Server::stop() {
  auto& impl = *impl_;
  if (impl.stopped.exchange(true) || !impl.thread.joinable())
    return;
  asio::post(impl.io, [&impl] {
    asio::error_code ignored;
    if (impl.acceptor)
      impl.acceptor->close(ignored);
    impl.acceptRetry.cancel();
    // What is queued for each client goes out first — the ack of the command that stopped the
    // run, the final state — then the connection closes; a client that does not take it within
    // a second is closed anyway.
    impl.stopTimer = std::make_unique<asio::steady_timer>(impl.io, std::chrono::seconds(1));
    impl.stopTimer->async_wait([&impl](const asio::error_code&) {
      auto left = impl.connections;
      for (auto& c : left)
        c->close("the server stopped");
    });
    auto connections = impl.connections;
    for (auto& c : connections)
      c->closeWhenWritten("the server stopped");
    if (impl.connections.empty())
      impl.stopTimer->cancel();
    impl.work.reset();
  });
  impl.thread.join();
  if (impl.bound.kind == Endpoint::Kind::Unix && !impl.bound.path.empty()) {
    struct stat st {};
    if (::lstat(impl.bound.path.c_str(), &st) == 0 && st.st_ino == impl.boundInode) {
      std::error_code ignored;
      std::filesystem::remove(impl.bound.path, ignored);
    }
  }
}

Endpoint Server::endpoint() const {
  return impl_->bound;
}

const std::string& Server::token() const {
  return impl_->token;
}

size_t Server::clientCount() const {
  return impl_->ready.load();
}

namespace {

// Keeps `value` as the latest of its kind (what a new client gets after its handshake) and sends
// it to every client past the handshake as {"type": type, key: value}.
template <typename Impl, typename T>
void publishLatest(Impl& impl, T Impl::*latest, const char* type, const char* key, T value) {
  impl.broadcast([latest, type, key, value = std::move(value)](Impl& i, auto& connections) {
    i.*latest = value;
    for (auto& c : connections) {
      if (c->isReady)
        c->sendControl({{"type", type}, {key, value}}, type);
    }
  });
}

}  // namespace

void Server::publishGraph(nlohmann::json graph) {
  publishLatest(*impl_, &Impl::graph, "graph", "graph", std::move(graph));
}

void Server::publishRules(nlohmann::json rules) {
  publishLatest(*impl_, &Impl::rules, "rules", "rules", std::move(rules));
}

void Server::publishRemat(nlohmann::json plan) {
  publishLatest(*impl_, &Impl::remat, "remat", "remat", std::move(plan));
}

void Server::publishControl(nlohmann::json control) {
  publishLatest(*impl_, &Impl::control, "control", "control", std::move(control));
}

void Server::publishValidation(nlohmann::json validation) {
  publishLatest(*impl_, &Impl::validation, "validation", "validation", std::move(validation));
}

void Server::publishBindings(nlohmann::json table) {
  publishLatest(*impl_, &Impl::bindings, "bindings", "bindings", std::move(table));
}

void Server::publishState(const std::string& state) {
  publishLatest(*impl_, &Impl::state, "state", "state", state);
}

void Server::publishStep(nlohmann::json step) {
  impl_->broadcast([step = std::move(step)](Impl& impl, auto& connections) {
    impl.step = step;
    for (auto& c : connections)
      c->enqueueStep(step);
  });
}

void Server::publishNodes(nlohmann::json nodes) {
  impl_->broadcast([nodes = std::move(nodes)](Impl&, auto& connections) {
    for (auto& c : connections)
      c->enqueueNodes(nodes);
  });
}

}  // namespace symtune::attach
