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
    attach::Client client;
    try {
      Q_EMIT attached(toQt(client.connect(endpoint, token)));
      while (!stop_) {
        if (auto message = client.next(0.2))
          Q_EMIT messageReceived(toQt(*message));
      }
    } catch (const std::exception& e) {
      if (!stop_)
        Q_EMIT disconnected(QString::fromStdString(e.what()));
    }
  });
}

void AttachConnection::close() {
  stop_ = true;
  if (worker_.joinable())
    worker_.join();
}

}  // namespace symtune::ui
