#pragma once
// Test mains that run headless: the offscreen platform unless QT_QPA_PLATFORM is already set.

#include <QCoreApplication>
#include <QtTest>
#ifdef QT_WIDGETS_LIB
#include <QApplication>
#endif

#define SYMTUNE_OFFSCREEN()                             \
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) { \
    qputenv("QT_QPA_PLATFORM", "offscreen");            \
  }

#ifdef QT_WIDGETS_LIB
// For tests of widgets.
#define SYMTUNE_TEST_MAIN(TestClass)         \
  int main(int argc, char** argv) {          \
    SYMTUNE_OFFSCREEN()                      \
    QApplication app(argc, argv);            \
    app.setAttribute(Qt::AA_Use96Dpi, true); \
    TestClass tc;                            \
    return QTest::qExec(&tc, argc, argv);    \
  }
#endif

// For tests without widgets.
#define SYMTUNE_TEST_MAIN_CORE(TestClass) \
  int main(int argc, char** argv) {       \
    QCoreApplication app(argc, argv);     \
    TestClass tc;                         \
    return QTest::qExec(&tc, argc, argv); \
  }
