// Files that are either wholly there or not at all: write to a temporary file beside the
// target, fsync it, rename it over the target, fsync the directory.
#ifndef OMNILEARN_COMMON_ATOMIC_FILE_H_
#define OMNILEARN_COMMON_ATOMIC_FILE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace omnilearn {

// Writes `path` atomically: `fill` gets a writer for the temporary file and returns
// OK when all of it was written. On any error (from `fill`, a short write, fsync,
// rename) the temporary file is removed and `path` is left as it was.
// `write(data, size)` returns false on an I/O error (the error is reported by the call).
using ByteSink = std::function<bool(const void* data, size_t size)>;
absl::Status WriteFileAtomically(const std::string& path, const std::function<absl::Status(const ByteSink&)>& fill);

// The suffix of the temporary files WriteFileAtomically leaves behind only when the
// process dies mid-write; readers of a directory skip (and may delete) them.
inline constexpr absl::string_view kPartialSuffix = ".partial";

// fsync of a directory, so a rename or unlink in it is durable.
absl::Status SyncDirectory(const std::string& dir);

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_ATOMIC_FILE_H_
