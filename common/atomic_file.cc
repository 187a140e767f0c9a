#include "common/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace omnilearn {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", strerror(errno)));
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  const int rc = fsync(fd);
  close(fd);
  if (rc != 0) return Errno("cannot fsync directory", dir);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::function<absl::Status(const ByteSink&)>& fill) {
  const std::string tmp = absl::StrCat(path, ".", getpid(), kPartialSuffix);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  int write_errno = 0;
  const ByteSink sink = [fd, &write_errno](const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = write(fd, p, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        write_errno = errno;
        return false;
      }
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  };
  absl::Status status = fill(sink);
  if (status.ok() && write_errno != 0) {
    status = absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", strerror(write_errno)));
  }
  if (status.ok() && fsync(fd) != 0) status = Errno("cannot fsync", tmp);
  if (close(fd) != 0 && status.ok()) status = Errno("cannot close", tmp);
  if (status.ok() && rename(tmp.c_str(), path.c_str()) != 0) status = Errno("cannot rename to", path);
  if (!status.ok()) {
    unlink(tmp.c_str());
    return status;
  }
  return SyncDirectory(DirectoryOf(path));
}

}  // namespace omnilearn
