#pragma once
// What a call throws, as text: what() of the exception, or "(no error)" — for tests that compare
// error messages exactly.

#include <exception>
#include <functional>
#include <string>

namespace symtune::test {

inline std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace symtune::test
