#include "common/model_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace omnilearn {

absl::StatusOr<ModelLayout> ModelLayout::Create(std::vector<TensorSpec> tensors) {
  if (tensors.empty()) return absl::InvalidArgumentError("model layout has no tensors");
  ModelLayout l;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    if (t.name.empty()) return absl::InvalidArgumentError(absl::StrCat("tensor ", i, " has no name"));
    if (!IsTensorDtype(t.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has an unknown dtype '", t.dtype, "'"));
    }
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has a negative dimension"));
      if (d > 0 && n > (int64_t{1} << 40) / d) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is too large"));
      }
      n *= d;
    }
    if (!l.index_.emplace(t.name, static_cast<int>(i)).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' appears twice"));
    }
    if (l.total_ > (int64_t{1} << 40) - n) {
      return absl::InvalidArgumentError("the model has more than 2^40 values in all");
    }
    l.offsets_.push_back(l.total_);
    l.sizes_.push_back(n);
    l.total_ += n;
    l.has_buffers_ = l.has_buffers_ || t.buffer;
  }
  l.tensors_ = std::move(tensors);
  return l;
}

int ModelLayout::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

bool ModelLayout::SameTensors(const ModelLayout& o) const {
  if (tensors_.size() != o.tensors_.size()) return false;
  return std::all_of(o.tensors_.begin(), o.tensors_.end(), [this](const TensorSpec& t) {
    const int i = Find(t.name);
    return i >= 0 && tensors_[i] == t;
  });
}

std::vector<int> ModelLayout::SendOrder() const {
  std::vector<int> order;
  order.reserve(tensors_.size());
  int64_t buffered = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].buffer) buffered += sizes_[i];
  }
  const bool first = buffered > 0 && buffered * 32 <= total_;
  for (int pass = first ? 0 : 1; pass < 2; ++pass) {  // 0: the buffers, 1: the rest (or all)
    for (int i = 0; i < static_cast<int>(tensors_.size()); ++i) {
      if (!first || tensors_[i].buffer == (pass == 0)) order.push_back(i);
    }
  }
  return order;
}

std::string ModelLayout::DebugString() const {
  return absl::StrJoin(tensors_, ", ", [](std::string* out, const TensorSpec& t) {
    absl::StrAppend(out, t.name, "[", absl::StrJoin(t.shape, ","), "]", t.buffer ? "(buffer)" : "");
  });
}

namespace {

std::string Describe(const TensorSpec& t) {
  return absl::StrCat("[", absl::StrJoin(t.shape, ","), "]", t.buffer ? " (buffer)" : "");
}

}  // namespace

std::string ModelLayout::DescribeDifference(const ModelLayout& server, int limit) const {
  std::vector<std::string> out;
  for (const TensorSpec& t : tensors_) {
    const int i = server.Find(t.name);
    if (i < 0) {
      out.push_back(absl::StrCat("'", t.name, "' ", Describe(t), " is not in the server's model"));
    } else if (!(server.tensors_[i] == t)) {
      out.push_back(
          absl::StrCat("'", t.name, "' is ", Describe(t), " here, ", Describe(server.tensors_[i]), " on the server"));
    }
  }
  for (const TensorSpec& t : server.tensors_) {
    if (Find(t.name) < 0) out.push_back(absl::StrCat("'", t.name, "' ", Describe(t), " is missing here"));
  }
  if (out.empty()) return "the same tensors";
  const size_t shown = std::min(out.size(), static_cast<size_t>(limit));
  std::string text = absl::StrJoin(out.begin(), out.begin() + shown, "; ");
  if (out.size() > shown) absl::StrAppend(&text, "; and ", out.size() - shown, " more");
  return absl::StrCat(out.size(), out.size() == 1 ? " tensor differs: " : " tensors differ: ", text);
}

}  // namespace omnilearn
