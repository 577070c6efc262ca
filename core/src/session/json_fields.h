#pragma once
// Typed access to the fields of a JSON object with errors that name the field path, what was
// expected and what was found. Private to symtune::core.

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

namespace symtune::detail {

// Throws the caller's error type; `field` is the dotted path, `problem` the sentence after it.
using FieldErrorFn = std::function<void(const std::string& field, const std::string& problem)>;

// The JSON type of a value in words: "a string", "an integer", "null", ...
std::string describeJsonType(const nlohmann::json& value);

// Parses `text` as nlohmann::json::parse does (throwing its parse_error), and sets `duplicate` to
// the dotted path of the first key that an object holds twice, or to "" when none does. JSON keeps
// the last of two equal keys, so a file that says a thing twice (an edit that added a block beside
// an old one) would be read with one of them unseen: callers refuse it, saying kGivenTwice.
// A number out of a double's range (1e400), which nlohmann reports as an out_of_range error
// without a place, is thrown as a parse_error with this id, its byte the number's 1-based offset.
nlohmann::json parseJson(const std::string& text, std::string& duplicate);
inline constexpr int kNumberOutOfRange = 190;
inline constexpr const char* kGivenTwice =
    "given twice in one object (JSON keeps only the last): say it once";

class JsonFields {
 public:
  // `object` must outlive this reader; `path` is its dotted path ("" for the root).
  JsonFields(const nlohmann::json& object, std::string path, FieldErrorFn fail);

  bool has(const std::string& key) const;
  std::string fieldPath(const std::string& key) const;

  const nlohmann::json& require(const std::string& key) const;
  JsonFields object(const std::string& key) const;  // required, must be an object

  std::string string(const std::string& key) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  int64_t integer(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback) const;
  double number(const std::string& key, double fallback) const;
  bool boolean(const std::string& key, bool fallback) const;

  // Fails when the object holds a key that is not in `known` (typos must not pass silently).
  void rejectUnknown(std::initializer_list<const char*> known) const;

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const;
  const nlohmann::json& json() const { return object_; }
  const FieldErrorFn& failFn() const { return fail_; }

  // Checks that `value` (at `field`) is an integer and returns it.
  static int64_t asInteger(const nlohmann::json& value, const std::string& field,
                           const FieldErrorFn& fail);

 private:
  const nlohmann::json& object_;
  std::string path_;
  FieldErrorFn fail_;
};

}  // namespace symtune::detail
