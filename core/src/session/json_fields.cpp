#include "json_fields.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace symtune::detail {

namespace {

// The first key an object holds twice, by its path (`bindings[0].winner`), found while parsing.
class DuplicateKeys {
 public:
  bool operator()(int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        countElement();
        frames_.push_back({event == Event::object_start, {}, {}, -1});
        break;
      case Event::object_end:
      case Event::array_end:
        if (!frames_.empty())
          frames_.pop_back();
        break;
      case Event::key:
        if (!frames_.empty() && frames_.back().object) {
          Frame& f = frames_.back();
          f.key = parsed.get<std::string>();
          if (!f.keys.insert(f.key).second && found_.empty())
            found_ = path();
        }
        break;
      case Event::value:  // a number, string, boolean or null
        countElement();
        break;
    }
    return true;
  }
  const std::string& found() const { return found_; }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;  // in an object: the member being read
    int64_t index;    // in an array: the element being read
  };
  void countElement() {
    if (!frames_.empty() && !frames_.back().object)
      ++frames_.back().index;
  }
  std::string path() const {
    std::string out;
    for (const Frame& f : frames_) {
      if (f.object)
        out += (out.empty() ? "" : ".") + f.key;
      else
        out += "[" + std::to_string(f.index) + "]";
    }
    return out;
  }
  std::vector<Frame> frames_;
  std::string found_;
};

}  // namespace

nlohmann::json parseJson(const std::string& text, std::string& duplicate) {
  DuplicateKeys duplicates;
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text, std::ref(duplicates));
  } catch (const nlohmann::json::out_of_range& e) {
    // nlohmann says "number overflow parsing '1e400'" (out_of_range 406) without a place; the
    // place is the number's first occurrence as a token.
    const std::string what = e.what();
    const size_t open = what.find('\''), close = what.rfind('\'');
    const std::string number =
        open != std::string::npos && close > open ? what.substr(open + 1, close - open - 1) : "";
    size_t at = number.empty() ? std::string::npos : text.find(number);
    while (at != std::string::npos && at > 0 &&
           (std::isalnum(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '.' ||
            text[at - 1] == '-' || text[at - 1] == '+'))
      at = text.find(number, at + 1);
    throw nlohmann::json::parse_error::create(
        kNumberOutOfRange, at == std::string::npos ? text.size() + 1 : at + 1,
        "the number " + (number.empty() ? std::string("given") : number) +
            " is out of a double's range",
        nullptr);
  }
  duplicate = duplicates.found();
  return root;
}

std::string describeJsonType(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:  // its length: "expected 3 numbers, found an array" hid it
      if (value.empty())
        return "an empty array";
      return "an array of " + std::to_string(value.size()) +
             (value.size() == 1 ? " value" : " values");
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

JsonFields::JsonFields(const nlohmann::json& object, std::string path, FieldErrorFn fail)
    : object_(object), path_(std::move(path)), fail_(std::move(fail)) {
}

bool JsonFields::has(const std::string& key) const {
  return object_.contains(key);
}

std::string JsonFields::fieldPath(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void JsonFields::fail(const std::string& key, const std::string& problem) const {
  fail_(key.empty() ? path_ : fieldPath(key), problem);
  std::abort();  // fail_ throws; reaching here is a bug in the caller's FieldErrorFn
}

const nlohmann::json& JsonFields::require(const std::string& key) const {
  auto it = object_.find(key);
  if (it == object_.end()) {
    fail(key, "missing (required)");
  }
  return *it;
}

JsonFields JsonFields::object(const std::string& key) const {
  const auto& value = require(key);
  if (!value.is_object()) {
    fail(key, "expected an object, found " + describeJsonType(value));
  }
  return JsonFields(value, fieldPath(key), fail_);
}

std::string JsonFields::string(const std::string& key) const {
  const auto& value = require(key);
  if (!value.is_string()) {
    fail(key, "expected a string, found " + describeJsonType(value));
  }
  return value.get<std::string>();
}

std::string JsonFields::string(const std::string& key, const std::string& fallback) const {
  return has(key) ? string(key) : fallback;
}

int64_t JsonFields::asInteger(const nlohmann::json& value, const std::string& field,
                              const FieldErrorFn& fail) {
  if (value.is_number_unsigned()) {  // before is_number_integer, which is true for these too
    const auto u = value.get<uint64_t>();
    if (u <= static_cast<uint64_t>(INT64_MAX)) {
      return static_cast<int64_t>(u);
    }
    fail(field, "integer out of range");
  }
  if (value.is_number_integer()) {
    return value.get<int64_t>();
  }
  fail(field, "expected an integer, found " + describeJsonType(value));
  std::abort();
}

int64_t JsonFields::integer(const std::string& key) const {
  return asInteger(require(key), fieldPath(key), fail_);
}

int64_t JsonFields::integer(const std::string& key, int64_t fallback) const {
  return has(key) ? integer(key) : fallback;
}

bool JsonFields::boolean(const std::string& key, bool fallback) const {
  if (!has(key))
    return fallback;
  const auto& value = require(key);
  if (!value.is_boolean())
    fail(key, "expected true or false, found " + describeJsonType(value));
  return value.get<bool>();
}

double JsonFields::number(const std::string& key, double fallback) const {
  if (!has(key)) {
    return fallback;
  }
  const auto& value = require(key);
  if (!value.is_number()) {
    fail(key, "expected a number, found " + describeJsonType(value));
  }
  const double d = value.get<double>();
  if (!std::isfinite(d)) {
    fail(key, "expected a finite number");
  }
  return d;
}

void JsonFields::rejectUnknown(std::initializer_list<const char*> known) const {
  for (const auto& item : object_.items()) {
    bool ok = false;
    for (const char* k : known) {
      ok = ok || item.key() == k;
    }
    if (!ok) {
      std::string list;
      for (const char* k : known) {
        list += list.empty() ? k : std::string(", ") + k;
      }
      fail(item.key(), "unknown field (known here: " + list + ")");
    }
  }
}

}  // namespace symtune::detail
