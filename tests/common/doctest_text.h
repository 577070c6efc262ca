#pragma once
// doctest, with a C string in INFO, CAPTURE and CHECK messages written as its text. Include it
// instead of <doctest/doctest.h> (lint.doctest_include checks that every test does).
//
// doctest 2.4 writes every pointer as its address, a `const char*` too: a failing row said
// "logged: cpu 0x55… 0x55…" where its optimizer's and dtype's names were meant. Its own switch for
// this, DOCTEST_CONFIG_TREAT_CHAR_STAR_AS_STRING, does not compile in 2.4.9 (Debian 12's). The
// specializations below must be seen by every unit that writes a C string, or two units would
// hold two definitions of one function: hence the one header.

#include <doctest/doctest.h>

#include <ostream>

namespace doctest::detail {

template <>
struct filldata<const char*> {
  static void fill(std::ostream* stream, const char* in) {
    *stream << (in != nullptr ? in : "(null)");
  }
};

template <>
struct filldata<char*> {
  static void fill(std::ostream* stream, const char* in) {
    filldata<const char*>::fill(stream, in);
  }
};

}  // namespace doctest::detail
