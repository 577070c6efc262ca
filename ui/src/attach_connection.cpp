#include "symtune/ui/attach_connection.h"

#include <QJsonDocument>

#include "symtune/attach_client.h"

namespace symtune::ui {

namespace {

QJsonObject toQt(const nlohmann::json& message) {
  return QJsonDocument::fromJson(QByteArray::fromStdString(message.dump())).object();
}

}  // namespace

AttachConnection::AttachConnection(QObject* parent) : QObject(parent) {
}

AttachConnection::~AttachConnection() {
  close();
}

void AttachConnection::open(const QString& endpoint, const QString& token) {
  close();
  endpoint_ = endpoint;
  stop_ = false;
  worker_ = std::thread([this, endpoint = endpoint.toStdString(), token = token.toStdString()] {
    // Signals emitted here reach receivers in the GUI thread as queued calls.
    // Note [One thread per client]: attach::Client is not thread-safe, so this thread alone
    // reads and writes it; commands wait in the outbox for at most one short read.
    attach::Client client;
    try {
      const QJsonObject hello = toQt(client.connect(endpoint, token));
      attached_ = true;
      Q_EMIT attached(hello);
      while (!stop_) {
        if (auto message = client.next(0.05)) {
          const QJsonObject m = toQt(*message);
          const QString type = m["type"].toString();
          if ((type == "ack" || type == "error") && m.contains("id"))
            Q_EMIT commandAnswered(m["id"].toInt(), m);
          else
            Q_EMIT messageReceived(m);
        }
        std::vector<QJsonObject> commands;
        {
          std::lock_guard<std::mutex> lock(outboxMutex_);
          commands.swap(outbox_);
        }
        for (const QJsonObject& c : commands) {
          client.send(
              nlohmann::json::parse(QJsonDocument(c).toJson(QJsonDocument::Compact).toStdString()));
        }
      }
    } catch (const std::exception& e) {
      attached_ = false;
      if (!stop_)
        Q_EMIT disconnected(QString::fromStdString(e.what()));
    }
    attached_ = false;
  });
}

int AttachConnection::sendCommand(QJsonObject command) {
  if (!attached_)
    return 0;
  const int id = nextId_++;
  command["type"] = QStringLiteral("command");
  command["id"] = id;
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
