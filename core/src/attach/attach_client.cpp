#include "symtune/core/attach_client.h"

#include <algorithm>
#include <array>
#include <chrono>

#include <asio.hpp>

namespace symtune::attach {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kInterruptSlice = std::chrono::milliseconds(50);

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

struct Client::Impl {
  explicit Impl(const std::function<bool()>& interrupted) : interrupted(interrupted) {}

  asio::io_context io;
  asio::generic::stream_protocol::socket socket{io};
  FrameDecoder decoder{kMaxServerFrameBytes};
  std::array<char, 65536> buffer{};
  bool open = false;
  const std::function<bool()>& interrupted;  // the client's, asked between slices of a wait

  bool isInterrupted() const { return interrupted && interrupted(); }

  // An interrupted wait ends the connection: its owner is going away.
  void throwIfInterrupted() {
    if (!isInterrupted())
      return;
    open = false;
    asio::error_code ignored;
    socket.close(ignored);
    throw Disconnected("interrupted");
  }

  // Runs the io context until `done`, the deadline or an interrupt (asked every slice), then
  // cancels what is still pending on the socket (its handler runs with operation_aborted).
  void runUntil(const bool& done, Clock::time_point deadline) {
    while (!done && Clock::now() < deadline && !isInterrupted()) {
      io.restart();
      io.run_until(interrupted ? std::min(deadline, Clock::now() + kInterruptSlice) : deadline);
    }
    if (!done) {
      asio::error_code ignored;
      socket.cancel(ignored);
      io.restart();
      io.run();
    }
  }

  // Connects by `deadline`. Throws on failure, timeout or interrupt.
  void connect(const asio::generic::stream_protocol::endpoint& to, const std::string& name,
               Clock::time_point deadline) {
    bool done = false;
    asio::error_code error;
    socket.async_connect(to, [&](const asio::error_code& ec) {
      done = true;
      error = ec;
    });
    runUntil(done, deadline);
    if (!error)
      return;
    asio::error_code ignored;
    socket.close(ignored);
    throwIfInterrupted();
    throw std::runtime_error("cannot connect to " + name + ": " +
                             (error == asio::error::operation_aborted
                                  ? "no answer within the timeout"
                                  : error.message()));
  }

  // Reads once, waiting until `deadline`; false on timeout. Throws Disconnected at the end of
  // the stream.
  bool readSome(Clock::time_point deadline) {
    bool done = false;
    asio::error_code error;
    size_t got = 0;
    socket.async_read_some(asio::buffer(buffer), [&](const asio::error_code& ec, size_t n) {
      done = true;
      error = ec;
      got = n;
    });
    runUntil(done, deadline);
    if (error == asio::error::operation_aborted) {
      if (got > 0)
        decoder.feed(buffer.data(), got);
      return got > 0;
    }
    if (error) {
      open = false;
      throw Disconnected(error == asio::error::eof ? "the server closed the connection"
                                                   : "the connection failed: " + error.message());
    }
    decoder.feed(buffer.data(), got);
    return true;
  }

  // The next message by `deadline`, or nothing.
  std::optional<nlohmann::json> next(Clock::time_point deadline) {
    if (!open)
      throw Disconnected("not connected");
    while (true) {
      if (auto m = decoder.next())
        return m;
      throwIfInterrupted();
      if (Clock::now() >= deadline)
        return std::nullopt;
      readSome(deadline);
    }
  }
};

Client::Client() : impl_(std::make_unique<Impl>(interrupted_)) {
}

Client::~Client() {
  close();
}

nlohmann::json Client::connect(const std::string& endpointText, const std::string& token,
                               double timeoutSeconds) {
  close();
  impl_ = std::make_unique<Impl>(interrupted_);
  pending_.clear();
  const Endpoint e = parseEndpoint(endpointText);
  auto& impl = *impl_;
  const auto deadline = Clock::now() + seconds(timeoutSeconds);
  if (e.kind == Endpoint::Kind::Unix) {
    const asio::local::stream_protocol::endpoint local(e.path);
    impl.connect(asio::generic::stream_protocol::endpoint(local), e.text(), deadline);
  } else {
    asio::error_code ec;
    const asio::ip::tcp::endpoint tcp(asio::ip::make_address(e.host, ec), e.port);
    if (ec)
      throw std::runtime_error("cannot connect to " + e.text() + ": " + ec.message());
    impl.connect(asio::generic::stream_protocol::endpoint(tcp), e.text(), deadline);
  }
  impl.open = true;
  auto hello = impl.next(deadline);
  if (!hello)
    throw std::runtime_error(e.text() + ": no hello from the server within the timeout");
  if ((*hello)["type"] != "hello")
    throw ProtocolError("the server's first message is not a hello but a \"" +
                        (*hello)["type"].get<std::string>() + "\"");
  nlohmann::json answer = {{"type", "hello"}, {"protocol", kProtocolVersion}};
  if (!token.empty())
    answer["token"] = token;
  send(answer);
  while (true) {
    auto m = impl.next(deadline);
    if (!m)
      throw std::runtime_error(e.text() + ": no welcome from the server within the timeout");
    if ((*m)["type"] == "welcome") {
      if (m->contains("run"))  // a server that asked for a token tells the run only now
        (*hello)["run"] = (*m)["run"];
      return *hello;
    }
    if ((*m)["type"] == "error") {
      impl.open = false;
      throw Disconnected("refused: " + m->value("reason", std::string("no reason given")));
    }
  }
}

std::optional<nlohmann::json> Client::next(double timeoutSeconds) {
  if (!pending_.empty()) {
    auto m = std::move(pending_.front());
    pending_.pop_front();
    return m;
  }
  return impl_->next(Clock::now() + seconds(timeoutSeconds));
}

nlohmann::json Client::command(nlohmann::json command, double timeoutSeconds) {
  const int64_t id = nextId_++;
  command["type"] = "command";
  command["id"] = id;
  send(command);
  const auto deadline = Clock::now() + seconds(timeoutSeconds);
  while (true) {
    auto m = impl_->next(deadline);
    if (!m)
      throw std::runtime_error("no answer to command " + command.value("command", std::string()) +
                               " within the timeout");
    const auto& type = (*m)["type"];
    if ((type == "ack" || type == "error") && m->contains("id") && (*m)["id"] == id)
      return *m;
    pending_.push_back(std::move(*m));
  }
}

void Client::send(const nlohmann::json& message) {
  sendBytes(encodeFrame(message));
}

void Client::sendBytes(const std::string& bytes) {
  if (!impl_->open)
    throw Disconnected("not connected");
  asio::error_code ec;
  asio::write(impl_->socket, asio::buffer(bytes), ec);
  if (ec) {
    impl_->open = false;
    throw Disconnected("cannot send: " + ec.message());
  }
}

void Client::close() {
  if (impl_ && impl_->socket.is_open()) {
    asio::error_code ignored;
    impl_->socket.shutdown(asio::socket_base::shutdown_both, ignored);
    impl_->socket.close(ignored);
  }
  if (impl_)
    impl_->open = false;
}

void Client::setInterrupt(std::function<bool()> interrupted) {
  interrupted_ = std::move(interrupted);
}

bool Client::connected() const {
  return impl_ && impl_->open;
}

}  // namespace symtune::attach
