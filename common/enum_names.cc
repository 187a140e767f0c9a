#include "common/enum_names.h"

#include "absl/strings/ascii.h"

namespace omnilearn {
namespace {

// The prefix, up to and with an underscore, that every value's name of `type` starts with.
std::string SharedPrefix(const google::protobuf::EnumDescriptor& type) {
  std::string prefix = type.value(0)->name();
  for (int i = 1; i < type.value_count(); ++i) {
    const std::string& name = type.value(i)->name();
    size_t n = 0;
    while (n < prefix.size() && n < name.size() && prefix[n] == name[n]) ++n;
    prefix.resize(n);
  }
  const size_t underscore = prefix.rfind('_');
  return underscore == std::string::npos ? "" : prefix.substr(0, underscore + 1);
}

}  // namespace

std::string ShortEnumName(const google::protobuf::EnumDescriptor& type, int number) {
  const google::protobuf::EnumValueDescriptor* v = type.FindValueByNumber(number);
  if (v == nullptr) return "?";
  return absl::AsciiStrToLower(v->name().substr(SharedPrefix(type).size()));
}

std::optional<int> ParseShortEnumName(const google::protobuf::EnumDescriptor& type, absl::string_view name) {
  const google::protobuf::EnumValueDescriptor* v =
      type.FindValueByName(SharedPrefix(type) + absl::AsciiStrToUpper(name));
  // Exactly the short name, as ShortEnumName writes it ("bf16", not "BF16").
  if (v == nullptr || ShortEnumName(type, v->number()) != name) return std::nullopt;
  return v->number();
}

std::vector<std::string> ShortEnumNames(const google::protobuf::EnumDescriptor& type, bool skip_zero) {
  std::vector<std::string> names;
  for (int i = 0; i < type.value_count(); ++i) {
    if (skip_zero && type.value(i)->number() == 0) continue;
    names.push_back(ShortEnumName(type, type.value(i)->number()));
  }
  return names;
}

}  // namespace omnilearn
