#pragma once
// Files the studio writes: whole or not at all.

#include <QByteArray>
#include <QObject>
#include <QSaveFile>
#include <QString>

namespace symtune::ui::detail {

// Writes `bytes` to `path` through a temporary file renamed over it (QSaveFile); false, with why
// in `error`, when it cannot.
inline bool writeFile(const QString& path, const QByteArray& bytes, QString* error) {
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit()) {
    *error = QObject::tr("cannot write %1: %2").arg(path, file.errorString());
    return false;
  }
  return true;
}

}  // namespace symtune::ui::detail
