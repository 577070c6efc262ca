#include "symtune/ui/attach_connection.h"

#include "symtune/core/attach_client.h"
#include "symtune/core/attach_protocol.h"

namespace symtune::ui {

AttachConnection::AttachConnection(QObject* parent) : QObject(parent) {
  // Queued across threads: Qt copies the typed messages, so it must know their types.
  qRegisterMetaType<attach::HelloMessage>();
  qRegisterMetaType<attach::ServerMessage>();
  qRegisterMetaType<attach::ReplyMessage>();
}

AttachConnection::~AttachConnection() {
  close();
}

void AttachConnection::open(const QString& endpoint, const QString& token) {
  close();
  {
    // Commands for the run before, not yet sent (a Stop clicked just before), are not this one's.
    std::lock_guard<std::mutex> lock(outboxMutex_);
    outbox_.clear();
  }
  endpoint_ = endpoint;
  stop_ = false;
  worker_ = std::thread([this, endpoint = endpoint.toStdString(), token = token.toStdString()] {
    // Signals emitted here reach receivers in the GUI thread as queued calls.
    // Note [One thread per client]: attach::Client is not thread-safe, so this thread alone
    // reads and writes it; commands wait in the outbox for at most one short read.
    attach::Client client;
    client.setInterrupt([this] { return stop_.load(); });  // close() never waits out a timeout
    try {
      attach::ServerMessage hello = attach::decodeServerMessage(client.connect(endpoint, token));
      if (!std::holds_alternative<attach::HelloMessage>(hello))
        throw attach::ProtocolError("the server did not begin with a hello");
      attached_ = true;
      Q_EMIT attached(std::get<attach::HelloMessage>(hello));
      while (!stop_) {
        if (auto message = client.next(0.05)) {
          // A message that does not decode breaks the protocol: the connection ends with why.
          attach::ServerMessage m = attach::decodeServerMessage(*message);
          const auto* reply = std::get_if<attach::ReplyMessage>(&m);
          if (reply != nullptr && reply->id)
            Q_EMIT commandAnswered(static_cast<int>(*reply->id), *reply);
          else
            Q_EMIT messageReceived(m);
        }
        std::vector<attach::Command> commands;
        {
          std::lock_guard<std::mutex> lock(outboxMutex_);
          commands.swap(outbox_);
        }
        for (const attach::Command& c : commands)
          client.send(attach::encodeCommand(c));
      }
    } catch (const std::exception& e) {
      attached_ = false;
      if (!stop_)
        Q_EMIT disconnected(QString::fromStdString(e.what()));
    }
    attached_ = false;
  });
}

int AttachConnection::sendCommand(attach::Command command) {
  if (!attached_)
    return 0;
  const int id = nextId_++;
  command.id = id;
  std::lock_guard<std::mutex> lock(outboxMutex_);
  outbox_.push_back(std::move(command));
  return id;
}

void AttachConnection::close() {
  stop_ = true;
  if (worker_.joinable())
    worker_.join();
}

}  // namespace symtune::ui
