#pragma once
// What the app suites share: the `symtune` executable run as a user runs it (its exit status and
// what it printed), and the sessions, rules and packs they give it.

#include <QByteArray>
#include <QFile>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QTemporaryDir>

namespace symtune::test::cli {

inline const QString kSymtune = QStringLiteral(SYMTUNE_BIN_DIR "/symtune");

struct Result {
  int exitCode = -1;
  QString out, err;
};

inline Result run(const QStringList& args, int timeoutMs = 300000) {
  QProcess p;
  p.start(kSymtune, args);
  if (!p.waitForFinished(timeoutMs)) {
    p.kill();
    p.waitForFinished();
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1,
          QString::fromUtf8(p.readAllStandardOutput()),
          QString::fromUtf8(p.readAllStandardError())};
}

// docs/rules.md's example pack: the built-in nan_guard under another pack's name.
inline const QByteArray kGuardsPack = R"({
  "format": "symtune-rulepack", "version": 1, "name": "guards", "pack_version": "1.0.0",
  "description": "Steps that go wrong, skipped",
  "rules": [
    {"name": "nan_guard", "description": "Skips a step whose gradients hold a NaN or an infinity.",
     "source": "rule nan_guard {\n  when grad_nan_count + grad_inf_count > 0\n  skip step\n}"}
  ],
  "checksum": "fnv1a64:186950ab51cbea6e"
})";

inline QString writeFile(const QTemporaryDir& dir, const QString& name, const QByteArray& text) {
  QFile f(dir.filePath(name));
  if (!f.open(QIODevice::WriteOnly))
    qFatal("cannot write %s", qPrintable(f.fileName()));
  f.write(text);
  return f.fileName();
}

// The tagger's `ci` preset for three steps, bound (a session that says nothing of binding), as
// tagger.json in `dir`.
inline QString boundTagger(const QTemporaryDir& dir) {
  return writeFile(dir, "tagger.json", R"({
    "format": "symtune-session", "version": 1, "name": "tagger",
    "model": {"zoo": "dynamic_tagger", "preset": "ci"}, "run": {"steps": 3, "threads": 2}})");
}

inline const QByteArray kSession = R"({
  "format": "symtune-session", "version": 1, "name": "batch test",
  "model": {"zoo": "dynamic_resnet", "preset": "ci"},
  "data": {"seed": 2}, "optimizer": {"lr": 0.003}, "run": {"steps": 30, "threads": 2}
})";

// A rewrite whose sides take different inputs.
inline const QByteArray kBadRewrite =
    "rule bad {\n"
    "  rewrite \"\"\"graph(%x):\n"
    "  %y = aten::relu(%x)\n"
    "  return (%y)\"\"\" => \"\"\"graph(%x, %z):\n"
    "  return (%x)\"\"\"\n"
    "}\n";

// The built-in pack's GELU rewrite, its NaN guard, the example plugin's C++ rule and a rule of
// the session's own.
// (Not a raw string: moc, which reads the suites including this, misreads a raw string holding
// \".)
inline const QByteArray kRulesSession =
    "{\"format\": \"symtune-session\", \"version\": 1, \"name\": \"rules\",\n"
    " \"model\": {\"zoo\": \"transformer_xl\", \"preset\": \"ci\"}, \"run\": {\"steps\": 5},\n"
    " \"rules\": {\"enable\": [\"tanh_gelu\", \"nan_guard\", \"gradient_centralization\"],\n"
    "           \"source\": \"rule every_step { select params \\\"*\\\"  set grad = grad * 1 "
    "}\"}}\n";

}  // namespace symtune::test::cli
