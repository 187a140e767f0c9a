// The short names of the protocol's enums, from the proto's descriptors: one rule for
// every enum instead of a table each. A value's name without the prefix all of its enum's
// values share, in lower case: MODE_SYNC -> "sync", WORKER_STATE_DROPPED -> "dropped",
// DEVICE_CUDA -> "cuda", WIRE_DTYPE_BF16 -> "bf16".
#ifndef OMNILEARN_COMMON_ENUM_NAMES_H_
#define OMNILEARN_COMMON_ENUM_NAMES_H_

#include <google/protobuf/descriptor.h>
#include <google/protobuf/generated_enum_reflection.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace omnilearn {

// The short name of `number` in `type`; "?" for a number the enum does not have.
std::string ShortEnumName(const google::protobuf::EnumDescriptor& type, int number);
// The number named `name` (a short name, as above), if any.
std::optional<int> ParseShortEnumName(const google::protobuf::EnumDescriptor& type, absl::string_view name);
// Every short name of `type` but its zero value's (UNSPECIFIED), in declaration order:
// for "want sync, async or ssp" messages.
std::vector<std::string> ShortEnumNames(const google::protobuf::EnumDescriptor& type, bool skip_zero);

template <typename E>
std::string EnumName(E value) {
  return ShortEnumName(*google::protobuf::GetEnumDescriptor<E>(), static_cast<int>(value));
}

template <typename E>
std::optional<E> ParseEnumName(absl::string_view name) {
  std::optional<int> n = ParseShortEnumName(*google::protobuf::GetEnumDescriptor<E>(), name);
  if (!n) return std::nullopt;
  return static_cast<E>(*n);
}

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_ENUM_NAMES_H_
