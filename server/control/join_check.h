// The rules a join must pass before anything of the job changes, apart from who else is
// there (the core checks a name's live session): a valid name and host, a model this
// server takes, the job's data set, a model the job can train. Pure functions of the
// join and the job's facts; the core calls them under its lock (the service calls
// CheckJoinHeader before it allocates anything for the join's parameters).
#ifndef OMNILEARN_SERVER_CONTROL_JOIN_CHECK_H_
#define OMNILEARN_SERVER_CONTROL_JOIN_CHECK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/model_layout.h"

namespace omnilearn {
namespace server {

// Whether `word` is at most `max_bytes` printable characters without spaces (a host name
// or a host:port: it becomes a log word).
bool IsPrintableWord(absl::string_view word, size_t max_bytes);

// InvalidArgument unless the name is 1-128 characters of [A-Za-z0-9._:@-] (names become
// Prometheus label values and log words), the host at most 255 printable characters
// without spaces and the layout not empty; ResourceExhausted when the layout is larger
// than `max_model_bytes` of float32 values.
absl::Status CheckJoinHeader(const std::string& name, const std::string& host, const ModelLayout& layout,
                             int64_t max_model_bytes);

// The worker's training set against the job's (`job_dataset_size`: none while the job
// assigns no samples): at most 2^32 samples, and once the job assigns samples, the same
// size from every worker. InvalidArgument naming both otherwise.
absl::Status CheckJoinDataset(uint64_t dataset_size, std::optional<uint64_t> job_dataset_size);

// The samples the worker trains in all (its epochs; 0: it stops by itself) against the
// job's (0 while no worker said): a count needs a data set size, at most 2^48 samples,
// and once the job has one, the same from every worker that gives one. InvalidArgument
// naming both otherwise.
absl::Status CheckJoinJobSamples(uint64_t job_samples, uint64_t dataset_size, uint64_t jobs_count);

// A refusal that asks the worker for its model (JoinResponse.send_model): FailedPrecondition
// with `message` and a payload under kSendModelPayload, which AsksForModel reads. Not
// what "the job is finished" or "another model" is.
inline constexpr char kSendModelPayload[] = "omnilearn.send_model";
absl::Status AskForModel(absl::string_view message);
bool AsksForModel(const absl::Status& status);

// The worker's model against the job's (`job_layout`: null while the job has none):
// the first worker must bring its parameters (AskForModel); later ones the same tensors
// (InvalidArgument naming the difference), unless the job's model is `replaceable`
// (untrained, unused) and the worker brings parameters to replace it (AskForModel when
// it brought none).
absl::Status CheckJoinModel(const ModelLayout& layout, bool brings_parameters, const ModelLayout* job_layout,
                            bool replaceable);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_JOIN_CHECK_H_
