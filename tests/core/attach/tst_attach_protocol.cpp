// The attach protocol's frames, commands and endpoints as data: frames reassembled from any
// split, every way a frame can be bad (with its message), commands checked field by field, and
// TCP endpoints limited to loopback.

#include "error_of.h"
#include "symtune/core/attach_protocol.h"
#include "test_main.h"

namespace {

using namespace symtune::attach;
using Json = nlohmann::json;

using symtune::test::errorOf;

}  // namespace

class TestAttachProtocol : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void framesSurviveAnySplit() {
    const std::string stream = encodeFrame({{"type", "a"}, {"n", 1}}) +
                               encodeFrame({{"type", "b"}, {"text", "ünïcode"}}) +
                               encodeFrame({{"type", "c"}});
    for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, stream.size()}) {
      FrameDecoder decoder(kMaxClientFrameBytes);
      std::vector<std::string> types;
      for (size_t at = 0; at < stream.size(); at += piece) {
        decoder.feed(stream.data() + at, std::min(piece, stream.size() - at));
        while (auto m = decoder.next())
          types.push_back((*m)["type"]);
      }
      QCOMPARE(types, (std::vector<std::string>{"a", "b", "c"}));
      QCOMPARE(decoder.buffered(), size_t{0});
    }
    QCOMPARE(encodeFrame({{"type", "x"}}).substr(0, 4), std::string("\0\0\0\x0c", 4));
  }

  void badFrames_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("message");
    QTest::addRow("oversized") << QByteArray("\0\x10\0\x01", 4)
                               << "frame of 1048577 bytes is over the limit of 1048576";
    QTest::addRow("not JSON") << QByteArray("\0\0\0\x03{x}", 7) << "frame is not JSON";
    QTest::addRow("not UTF-8") << QByteArray("\0\0\0\x0d{\"type\":\"\xff\"}", 17)
                               << "frame is not JSON";
    QTest::addRow("an array") << QByteArray("\0\0\0\x02[]", 6) << "frame is not a JSON object";
    QTest::addRow("no type") << QByteArray("\0\0\0\x02{}", 6) << "message has no string \"type\"";
    QTest::addRow("type not a string")
        << QByteArray("\0\0\0\x0a{\"type\":1}", 14) << "message has no string \"type\"";
  }

  void badFrames() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, message);
    FrameDecoder decoder(kMaxClientFrameBytes);
    decoder.feed(bytes.constData(), static_cast<size_t>(bytes.size()));
    QCOMPARE(QString::fromStdString(errorOf([&] { decoder.next(); })), message);
    // The stream has lost its framing: the decoder stays broken.
    const std::string good = encodeFrame({{"type", "ok"}});
    decoder.feed(good.data(), good.size());
    QCOMPARE(errorOf([&] { decoder.next(); }),
             std::string("the stream lost its framing after an earlier error"));
  }

  void commands_data() {
    QTest::addColumn<QString>("json");
    QTest::addColumn<QString>("error");
    QTest::addRow("toggle")
        << R"({"id": 1, "command": "toggle_rule", "rule": "a", "enabled": true})"
        << "";
    QTest::addRow("no id") << R"({"command": "pause"})"
                           << "\"id\" must be an integer";
    QTest::addRow("id a string") << R"({"id": "1", "command": "pause"})"
                                 << "\"id\" must be an integer";
    QTest::addRow("unknown command")
        << R"({"id": 1, "command": "explode"})"
        << "unknown command \"explode\" (toggle_rule, add_rule, remove_rule, set_sampling, pause, "
           "resume, snapshot, stop)";
    QTest::addRow("toggle without enabled") << R"({"id": 1, "command": "toggle_rule", "rule": "a"})"
                                            << "\"enabled\" must be true or false";
    QTest::addRow("add without source") << R"({"id": 1, "command": "add_rule"})"
                                        << "\"source\" must be a string";
    QTest::addRow("negative sampling") << R"({"id": 1, "command": "set_sampling", "every": -1})"
                                       << "\"every\" must be 0 (off) or a positive number of steps";
    QTest::addRow("huge id") << R"({"id": 18446744073709551615, "command": "stop"})"
                             << "\"id\" is out of range";
  }

  void commands() {
    QFETCH(QString, json);
    QFETCH(QString, error);
    const Json message = Json::parse(json.toStdString());
    QCOMPARE(QString::fromStdString(errorOf([&] { parseCommand(message); })),
             error.isEmpty() ? QString("(no error)") : error);
  }

  void endpoints() {
    QCOMPARE(parseEndpoint("unix:/run/x.sock").path, std::string("/run/x.sock"));
    const Endpoint tcp = parseEndpoint("tcp:127.0.0.1:4567");
    QCOMPARE(tcp.port, uint16_t{4567});
    QCOMPARE(tcp.text(), std::string("tcp:127.0.0.1:4567"));
    QCOMPARE(parseEndpoint("tcp:[::1]:0").host, std::string("::1"));
    QCOMPARE(parseEndpoint("tcp:localhost:1").host, std::string("127.0.0.1"));
    QCOMPARE(errorOf([] { parseEndpoint("tcp:0.0.0.0:80"); }),
             std::string("TCP is for loopback only (127.0.0.1 or ::1), got \"0.0.0.0\": use a Unix "
                         "socket, or a tunnel, to reach another machine"));
    QCOMPARE(errorOf([] { parseEndpoint("unix:relative.sock"); }),
             std::string("a Unix endpoint needs an absolute path: unix:/path/to.sock"));
    QCOMPARE(errorOf([] { parseEndpoint("tcp:127.0.0.1:99999"); }),
             std::string("bad TCP port \"99999\" (0 picks a free one)"));
    QCOMPARE(errorOf([] { parseEndpoint("http://x"); }),
             std::string("an endpoint is unix:/path or tcp:127.0.0.1:PORT, got \"http://x\""));
  }
};

SYMTUNE_TEST_MAIN_CORE(TestAttachProtocol)
#include "tst_attach_protocol.moc"
