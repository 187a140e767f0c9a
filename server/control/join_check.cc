#include "server/control/join_check.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace omnilearn {
namespace server {

bool IsPrintableWord(absl::string_view word, size_t max_bytes) {
  return word.size() <= max_bytes &&
         std::all_of(word.begin(), word.end(), [](char c) { return absl::ascii_isgraph(c); });
}

absl::Status CheckJoinHeader(const std::string& name, const std::string& host, const ModelLayout& layout,
                             int64_t max_model_bytes) {
  constexpr size_t kMaxName = 128, kMaxHost = 255;
  if (name.empty()) return absl::InvalidArgumentError("a worker needs a name");
  const bool name_ok = name.size() <= kMaxName && std::all_of(name.begin(), name.end(), [](char c) {
                         return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-' || c == ':' || c == '@';
                       });
  if (!name_ok) {
    return absl::InvalidArgumentError(absl::StrCat("worker name '", absl::CEscape(name.substr(0, kMaxName)),
                                                   "' is not 1-128 characters of letters, digits and . _ - : @"));
  }
  if (!IsPrintableWord(host, kMaxHost)) {
    return absl::InvalidArgumentError("the host name must be at most 255 printable characters without spaces");
  }
  if (layout.empty()) return absl::InvalidArgumentError("join without a model layout");
  const int64_t bytes = layout.total_elements() * static_cast<int64_t>(sizeof(float));
  if (layout.total_elements() > max_model_bytes / static_cast<int64_t>(sizeof(float))) {
    return absl::ResourceExhaustedError(absl::StrCat("the model has ", bytes,
                                                     " bytes of float32 values; this server "
                                                     "takes at most --max_model_bytes=",
                                                     max_model_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckJoinDataset(uint64_t dataset_size, std::optional<uint64_t> job_dataset_size) {
  // The epoch's permutation holds one id per sample: bound it before anything is allocated.
  constexpr uint64_t kMaxDatasetSize = uint64_t{1} << 32;
  if (dataset_size > kMaxDatasetSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("a training set of ", dataset_size, " samples is more than this server takes (2^32)"));
  }
  if (!job_dataset_size) return absl::OkStatus();
  if (dataset_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this job assigns the samples of a training set of ", *job_dataset_size,
        " and this worker gave no data set size: give it the same data set (Python: Worker(..., dataset_size=",
        *job_dataset_size, "))"));
  }
  if (dataset_size != *job_dataset_size) {
    return absl::InvalidArgumentError(absl::StrCat("this worker's training set has ", dataset_size,
                                                   " samples, the job's has ", *job_dataset_size,
                                                   ": every worker of a job must train on the same data set"));
  }
  return absl::OkStatus();
}

absl::Status CheckJoinJobSamples(uint64_t job_samples, uint64_t dataset_size, uint64_t jobs_count) {
  if (job_samples == 0) return absl::OkStatus();
  if (dataset_size == 0) {
    return absl::InvalidArgumentError("a worker that says how many samples it trains must give its data set's size");
  }
  if (job_samples > (uint64_t{1} << 48)) {
    return absl::InvalidArgumentError(absl::StrCat("a job of ", job_samples, " samples is more than 2^48"));
  }
  if (jobs_count != 0 && job_samples != jobs_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("this worker would train ", job_samples, " samples in all, the job trains ", jobs_count,
                     ": give every worker of a job the same --epochs (Python: Worker(..., epochs=))"));
  }
  return absl::OkStatus();
}

absl::Status AskForModel(absl::string_view message) {
  absl::Status s = absl::FailedPreconditionError(message);
  s.SetPayload(kSendModelPayload, absl::Cord("1"));
  return s;
}

bool AsksForModel(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) && status.GetPayload(kSendModelPayload).has_value();
}

absl::Status CheckJoinModel(const ModelLayout& layout, bool brings_parameters, const ModelLayout* job_layout,
                            bool replaceable) {
  if (job_layout == nullptr) {
    if (brings_parameters) return absl::OkStatus();
    return AskForModel("the server has no model yet: the first worker must send its parameters");
  }
  if (layout.SameTensors(*job_layout)) return absl::OkStatus();
  if (replaceable && brings_parameters) return absl::OkStatus();
  const std::string what =
      absl::StrCat("model layout differs from the server's: ", layout.DescribeDifference(*job_layout));
  if (replaceable) return AskForModel(absl::StrCat(what, " (untrained: send parameters to replace it)"));
  return absl::InvalidArgumentError(what);
}

}  // namespace server
}  // namespace omnilearn
