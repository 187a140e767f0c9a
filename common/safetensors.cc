#include "common/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "nlohmann/json.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

namespace omnilearn {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100 << 20;
constexpr char kMetadataKey[] = "__metadata__";

uint32_t Crc32(const void* data, size_t bytes) {
  return static_cast<uint32_t>(crc32_z(crc32_z(0L, Z_NULL, 0), static_cast<const Bytef*>(data), bytes));
}

std::string Hex32(uint32_t v) { return absl::StrFormat("%08x", v); }

absl::Status Corrupt(absl::string_view what) { return absl::DataLossError(absl::StrCat("safetensors: ", what)); }

// Product of dimensions, or -1 on a negative dimension or overflow past 2^62.
int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > (int64_t{1} << 62) / d) return -1;
    n *= d;
  }
  return n;
}

struct Header {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> tensors;
};

// The header's __metadata__: string values only.
absl::Status ParseMetadata(const nlohmann::json& v, std::map<std::string, std::string>* out) {
  if (!v.is_object()) return Corrupt("__metadata__ is not an object");
  for (auto m = v.begin(); m != v.end(); ++m) {
    if (!m.value().is_string()) return Corrupt(absl::StrCat("metadata '", m.key(), "' is not a string"));
    (*out)[m.key()] = m.value().get<std::string>();
  }
  return absl::OkStatus();
}

// A tensor's place in the data section: bytes [begin, end), and its entry's index.
struct Span {
  uint64_t begin, end;
  size_t index;
};

// One tensor's entry (dtype, shape, elements) and its byte range, checked against a data
// section of `data_bytes` bytes. F32 only unless `any_dtype`.
absl::StatusOr<std::pair<SafetensorsEntry, Span>> ParseEntry(const std::string& name, const nlohmann::json& v,
                                                             uint64_t data_bytes, bool any_dtype) {
  if (!v.is_object()) return Corrupt(absl::StrCat("tensor '", name, "' is not an object"));
  auto dtype = v.find("dtype");
  auto shape = v.find("shape");
  auto offsets = v.find("data_offsets");
  if (dtype == v.end() || !dtype->is_string() || shape == v.end() || !shape->is_array() || offsets == v.end() ||
      !offsets->is_array() || offsets->size() != 2) {
    return Corrupt(absl::StrCat("tensor '", name, "' lacks dtype, shape or data_offsets"));
  }
  SafetensorsEntry e;
  e.name = name;
  for (const nlohmann::json& d : *shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Corrupt(absl::StrCat("tensor '", name, "' has a bad dimension"));
    }
    e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  if (!(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return Corrupt(absl::StrCat("tensor '", name, "' has bad data_offsets"));
  }
  const uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
  const int64_t elements = Elements(e.shape);
  if (elements < 0 || begin > end || end > data_bytes) {
    return Corrupt(absl::StrCat("tensor '", name, "' lies outside the data"));
  }
  e.dtype = dtype->get<std::string>();
  const int width = SafetensorsDtypeBytes(e.dtype);
  if ((!any_dtype && e.dtype != "F32") || width == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: tensor '", name, "' is ", e.dtype, "; only ",
                     any_dtype ? "F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL are" : "F32 is", " supported"));
  }
  if (end - begin != static_cast<uint64_t>(elements) * width) {
    return Corrupt(
        absl::StrCat("tensor '", name, "' has ", end - begin, " bytes for ", elements, " ", e.dtype, " values"));
  }
  e.elements = elements;
  return std::make_pair(std::move(e), Span{begin, end, 0});
}

// The entries in data order, their offsets set; the spans must tile [0, data_bytes).
absl::StatusOr<std::vector<SafetensorsEntry>> InDataOrder(std::vector<SafetensorsEntry> entries,
                                                          std::vector<Span> spans, uint64_t data_bytes) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t at = 0;
  std::vector<SafetensorsEntry> ordered;
  for (const Span& s : spans) {
    if (s.begin != at) return Corrupt("tensors overlap or leave a hole in the data");
    at = s.end;
    SafetensorsEntry e = std::move(entries[s.index]);
    e.offset = static_cast<int64_t>(s.begin / sizeof(float));  // meaningful for F32 files
    e.byte_offset = static_cast<int64_t>(s.begin);
    ordered.push_back(std::move(e));
  }
  if (at != data_bytes) return Corrupt(absl::StrCat("the data holds ", data_bytes, " bytes, the tensors ", at));
  return ordered;
}

// Validates the JSON header against a data section of `data_bytes` bytes. F32 only
// unless `any_dtype` (then every dtype SafetensorsDtypeBytes knows).
absl::StatusOr<Header> ParseHeader(absl::string_view text, uint64_t data_bytes, bool any_dtype) {
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt("the header is not a JSON object");
  Header h;
  std::vector<SafetensorsEntry> entries;
  std::vector<Span> spans;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == kMetadataKey) {
      if (absl::Status s = ParseMetadata(it.value(), &h.metadata); !s.ok()) return s;
      continue;
    }
    absl::StatusOr<std::pair<SafetensorsEntry, Span>> entry = ParseEntry(it.key(), it.value(), data_bytes, any_dtype);
    if (!entry.ok()) return entry.status();
    entry->second.index = entries.size();
    spans.push_back(entry->second);
    entries.push_back(std::move(entry->first));
  }
  absl::StatusOr<std::vector<SafetensorsEntry>> ordered = InDataOrder(std::move(entries), std::move(spans), data_bytes);
  if (!ordered.ok()) return ordered.status();
  h.tensors = *std::move(ordered);
  return h;
}

template <typename File>
absl::Status VerifyChecksum(const File& f) {
  auto it = f.metadata.find(kChecksumKey);
  if (it == f.metadata.end()) return absl::OkStatus();
  const std::string actual = Hex32(Crc32(f.data.data(), f.data.size() * sizeof(f.data[0])));
  if (actual != it->second) {
    return Corrupt(absl::StrCat("checksum mismatch (header says ", it->second, ", data has ", actual, ")"));
  }
  return absl::OkStatus();
}

uint64_t ReadLe64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

const SafetensorsEntry* FindEntry(const std::vector<SafetensorsEntry>& tensors, const std::string& name) {
  for (const SafetensorsEntry& e : tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace

int SafetensorsDtypeBytes(const std::string& dtype) {
  static const std::map<std::string, int>* const kBytes =
      new std::map<std::string, int>{{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                     {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  auto it = kBytes->find(dtype);
  return it == kBytes->end() ? 0 : it->second;
}

const SafetensorsEntry* SafetensorsFile::Find(const std::string& name) const { return FindEntry(tensors, name); }
const SafetensorsEntry* RawSafetensorsFile::Find(const std::string& name) const { return FindEntry(tensors, name); }

absl::StatusOr<std::vector<float>> SafetensorsFile::Gather(const ModelLayout& layout, const std::string& prefix) const {
  std::vector<float> out(layout.total_elements());
  for (size_t i = 0; i < layout.tensors().size(); ++i) {
    const TensorSpec& spec = layout.tensors()[i];
    const SafetensorsEntry* e = Find(prefix + spec.name);
    if (e == nullptr) return absl::NotFoundError(absl::StrCat("no tensor '", prefix + spec.name, "' in the file"));
    if (e->shape != spec.shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", e->name, "' has shape [", absl::StrJoin(e->shape, ","),
                                                     "], the model needs [", absl::StrJoin(spec.shape, ","), "]"));
    }
    std::copy(data.begin() + e->offset, data.begin() + e->offset + e->elements,
              out.begin() + layout.offset(static_cast<int>(i)));
  }
  return out;
}

absl::StatusOr<ModelLayout> SafetensorsFile::Layout(const std::vector<std::string>& skip_prefixes) const {
  std::vector<TensorSpec> specs;
  for (const SafetensorsEntry& e : tensors) {
    bool skip = false;
    for (const std::string& p : skip_prefixes) skip = skip || absl::StartsWith(e.name, p);
    if (!skip) specs.push_back({e.name, e.shape});
  }
  return ModelLayout::Create(std::move(specs));
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorView>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  if (metadata.count(kChecksumKey)) return absl::InvalidArgumentError("metadata key omnilearn.crc32 is reserved");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (const TensorView& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("bad or repeated tensor name '", t.name, "'"));
    }
    const int64_t n = Elements(t.shape);
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has a bad shape"));
    const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(t.values), bytes);
  }
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  meta[kChecksumKey] = Hex32(static_cast<uint32_t>(crc));
  header[kMetadataKey] = meta;
  std::string text = header.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-aligned, as safetensors writes it
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  return WriteFileAtomically(path, [&](const ByteSink& write) {
    if (!write(length, 8) || !write(text.data(), text.size())) return absl::OkStatus();  // reported by the caller
    for (const TensorView& t : tensors) {
      if (!write(t.values, static_cast<size_t>(Elements(t.shape)) * sizeof(float))) break;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(const std::string& bytes) {
  if (bytes.size() < 8) return Corrupt("shorter than its 8-byte header length");
  const uint64_t n = ReadLe64(reinterpret_cast<const unsigned char*>(bytes.data()));
  if (n > kMaxHeaderBytes || n > bytes.size() - 8) return Corrupt("header length past the end of the file");
  const uint64_t data_bytes = bytes.size() - 8 - n;
  absl::StatusOr<Header> h = ParseHeader(absl::string_view(bytes).substr(8, n), data_bytes, /*any_dtype=*/false);
  if (!h.ok()) return h.status();
  SafetensorsFile f;
  f.metadata = std::move(h->metadata);
  f.tensors = std::move(h->tensors);
  if (data_bytes % sizeof(float) != 0) return Corrupt("data is not whole floats");
  f.data.resize(data_bytes / sizeof(float));
  if (data_bytes > 0) memcpy(f.data.data(), bytes.data() + 8 + n, data_bytes);
  if (absl::Status s = VerifyChecksum(f); !s.ok()) return s;
  return f;
}

namespace {

// Reads and validates a whole file into a SafetensorsFile (F32, as floats) or a
// RawSafetensorsFile (any dtype, as bytes).
template <typename File>
absl::StatusOr<File> ReadFileOf(const std::string& path, int64_t max_bytes, bool any_dtype) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file ", path));
    return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  auto read_all = [fd](void* dst, uint64_t size, uint64_t at) {
    char* p = static_cast<char*>(dst);
    while (size > 0) {
      const ssize_t r = pread(fd, p, size, static_cast<off_t>(at));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      p += r;
      at += static_cast<uint64_t>(r);
      size -= static_cast<uint64_t>(r);
    }
    return true;
  };
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::InternalError(absl::StrCat("cannot stat ", path));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (static_cast<int64_t>(size) > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(path, " holds ", size, " bytes, more than the limit ", max_bytes));
  }
  unsigned char length[8];
  if (size < 8 || !read_all(length, 8, 0)) return Corrupt(absl::StrCat(path, " is shorter than 8 bytes"));
  const uint64_t n = ReadLe64(length);
  if (n > kMaxHeaderBytes || n > size - 8) return Corrupt(absl::StrCat(path, ": header length past the end"));
  std::string text(n, '\0');
  if (!read_all(text.data(), n, 8)) return Corrupt(absl::StrCat(path, ": cannot read the header"));
  const uint64_t data_bytes = size - 8 - n;
  absl::StatusOr<Header> h = ParseHeader(text, data_bytes, any_dtype);
  if (!h.ok()) return absl::Status(h.status().code(), absl::StrCat(path, ": ", h.status().message()));
  File f;
  f.metadata = std::move(h->metadata);
  f.tensors = std::move(h->tensors);
  f.data.resize(data_bytes / sizeof(f.data[0]));  // F32 only: whole floats
  if (data_bytes > 0 && !read_all(f.data.data(), data_bytes, 8 + n)) {
    return Corrupt(absl::StrCat(path, ": cannot read the data"));
  }
  if (absl::Status s = VerifyChecksum(f); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  return f;
}

}  // namespace

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path, int64_t max_bytes) {
  return ReadFileOf<SafetensorsFile>(path, max_bytes, /*any_dtype=*/false);
}

absl::StatusOr<RawSafetensorsFile> ReadRawSafetensors(const std::string& path, int64_t max_bytes) {
  return ReadFileOf<RawSafetensorsFile>(path, max_bytes, /*any_dtype=*/true);
}

}  // namespace omnilearn
