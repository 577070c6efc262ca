#pragma once
// Strongly typed ids: a NodeId cannot be passed where an EdgeId is expected. Each is an index into
// its owner's table; -1 means "none".

#include <cstdint>
#include <functional>

namespace symtune {

template <class Tag>
class Id {
 public:
  constexpr Id() = default;
  constexpr explicit Id(int32_t value) : value_(value) {}

  constexpr int32_t value() const { return value_; }
  constexpr bool valid() const { return value_ >= 0; }
  constexpr explicit operator bool() const { return valid(); }

  friend constexpr bool operator==(Id a, Id b) { return a.value_ == b.value_; }
  friend constexpr bool operator!=(Id a, Id b) { return a.value_ != b.value_; }
  friend constexpr bool operator<(Id a, Id b) { return a.value_ < b.value_; }

 private:
  int32_t value_ = -1;
};

using NodeId = Id<struct NodeTag>;
using EdgeId = Id<struct EdgeTag>;
using RegionId = Id<struct RegionTag>;

}  // namespace symtune

template <class Tag>
struct std::hash<symtune::Id<Tag>> {
  size_t operator()(symtune::Id<Tag> id) const noexcept { return std::hash<int32_t>()(id.value()); }
};
