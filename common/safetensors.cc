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

// The elements of a tensor to write: InvalidArgument for a bad shape or an unknown dtype.
absl::StatusOr<int64_t> CheckedElements(const std::string& name, const std::vector<int64_t>& shape,
                                        absl::string_view dtype) {
  const int64_t n = Elements(shape);
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has a bad shape"));
  if (!IsTensorDtype(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has an unknown dtype '", dtype, "'"));
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
// section of `data_bytes` bytes.
absl::StatusOr<std::pair<SafetensorsEntry, Span>> ParseEntry(const std::string& name, const nlohmann::json& v,
                                                             uint64_t data_bytes) {
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
  const int width = TensorDtypeBytes(e.dtype);
  if (width == 0) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", name, "' is ", e.dtype,
                                                   "; only F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL are read"));
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
    e.byte_offset = static_cast<int64_t>(s.begin);
    ordered.push_back(std::move(e));
  }
  if (at != data_bytes) return Corrupt(absl::StrCat("the data holds ", data_bytes, " bytes, the tensors ", at));
  return ordered;
}

// Validates the JSON header against a data section of `data_bytes` bytes.
absl::StatusOr<Header> ParseHeader(absl::string_view text, uint64_t data_bytes) {
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
    absl::StatusOr<std::pair<SafetensorsEntry, Span>> entry = ParseEntry(it.key(), it.value(), data_bytes);
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

bool AllF32(const std::vector<SafetensorsEntry>& tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [](const SafetensorsEntry& e) { return e.dtype == "F32"; });
}

// A file of F32 tensors read straight into floats: each entry's offset in floats.
void SetFloatOffsets(SafetensorsFile* f) {
  for (SafetensorsEntry& e : f->tensors) e.offset = e.byte_offset / static_cast<int64_t>(sizeof(float));
}

// Every tensor of `raw` converted to float32, in data order.
SafetensorsFile AsFloats(RawSafetensorsFile raw) {
  SafetensorsFile f;
  f.metadata = std::move(raw.metadata);
  int64_t total = 0;
  for (const SafetensorsEntry& e : raw.tensors) total += e.elements;
  f.data.resize(static_cast<size_t>(total));
  int64_t at = 0;
  for (SafetensorsEntry& e : raw.tensors) {
    DecodeTensorValues(e.dtype, raw.data.data() + e.byte_offset, e.elements, f.data.data() + at);
    e.offset = at;
    at += e.elements;
  }
  f.tensors = std::move(raw.tensors);
  return f;
}

}  // namespace

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
    if (!skip) specs.push_back({e.name, e.shape, /*buffer=*/false, e.dtype});
  }
  return ModelLayout::Create(std::move(specs));
}

namespace {

// The tensors as bytes: F32 from the caller's floats, any other type encoded once into
// `encoded` (which must outlive the views).
absl::StatusOr<std::vector<RawTensorView>> AsRaw(const std::vector<TensorView>& tensors,
                                                 std::vector<std::string>* encoded) {
  encoded->assign(tensors.size(), "");
  std::vector<RawTensorView> raw;
  raw.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& t = tensors[i];
    absl::StatusOr<int64_t> n = CheckedElements(t.name, t.shape, t.dtype);
    if (!n.ok()) return n.status();
    absl::string_view bytes(reinterpret_cast<const char*>(t.values), static_cast<size_t>(*n) * sizeof(float));
    if (t.dtype != "F32") bytes = (*encoded)[i] = EncodeTensorValues(t.dtype, t.values, *n);
    raw.push_back({t.name, t.shape, t.dtype, bytes});
  }
  return raw;
}

// The file's first bytes: the header's length and the header (names, shapes, offsets, the
// metadata and the data's checksum), padded so that the data starts 8-aligned.
absl::StatusOr<std::string> RawHeader(const std::vector<RawTensorView>& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  if (metadata.count(kChecksumKey)) return absl::InvalidArgumentError("metadata key omnilearn.crc32 is reserved");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (const RawTensorView& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("bad or repeated tensor name '", t.name, "'"));
    }
    absl::StatusOr<int64_t> n = CheckedElements(t.name, t.shape, t.dtype);
    if (!n.ok()) return n.status();
    const uint64_t bytes = static_cast<uint64_t>(*n) * TensorDtypeBytes(t.dtype);
    if (bytes != t.bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has ", t.bytes.size(), " bytes, not the ",
                                                     bytes, " of its shape in ", t.dtype));
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(t.bytes.data()), bytes);
  }
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  meta[kChecksumKey] = Hex32(static_cast<uint32_t>(crc));
  header[kMetadataKey] = meta;
  std::string text = header.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-aligned, as safetensors writes it
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  return out + text;
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorView>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> encoded;
  absl::StatusOr<std::vector<RawTensorView>> raw = AsRaw(tensors, &encoded);
  if (!raw.ok()) return raw.status();
  return WriteRawSafetensors(path, *raw, metadata);
}

absl::StatusOr<std::string> EncodeSafetensors(const std::vector<TensorView>& tensors,
                                              const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> encoded;
  absl::StatusOr<std::vector<RawTensorView>> raw = AsRaw(tensors, &encoded);
  if (!raw.ok()) return raw.status();
  absl::StatusOr<std::string> out = RawHeader(*raw, metadata);
  if (!out.ok()) return out.status();
  size_t size = out->size();
  for (const RawTensorView& t : *raw) size += t.bytes.size();
  out->reserve(size);
  for (const RawTensorView& t : *raw) out->append(t.bytes.data(), t.bytes.size());
  return out;
}

absl::Status WriteRawSafetensors(const std::string& path, const std::vector<RawTensorView>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> header = RawHeader(tensors, metadata);
  if (!header.ok()) return header.status();
  return WriteFileAtomically(path, [&](const ByteSink& write) {
    if (!write(header->data(), header->size())) return absl::OkStatus();  // reported by the caller
    for (const RawTensorView& t : tensors) {
      if (!write(t.bytes.data(), t.bytes.size())) break;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(const std::string& bytes) {
  if (bytes.size() < 8) return Corrupt("shorter than its 8-byte header length");
  const uint64_t n = ReadLe64(reinterpret_cast<const unsigned char*>(bytes.data()));
  if (n > kMaxHeaderBytes || n > bytes.size() - 8) return Corrupt("header length past the end of the file");
  absl::StatusOr<Header> h = ParseHeader(absl::string_view(bytes).substr(8, n), bytes.size() - 8 - n);
  if (!h.ok()) return h.status();
  RawSafetensorsFile raw;
  raw.metadata = std::move(h->metadata);
  raw.tensors = std::move(h->tensors);
  raw.data = bytes.substr(8 + n);
  if (absl::Status s = VerifyChecksum(raw); !s.ok()) return s;
  return AsFloats(std::move(raw));
}

namespace {

// A file open for reading, closed with the object.
class OpenFile {
 public:
  explicit OpenFile(const std::string& path) : fd_(open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~OpenFile() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  // `size` bytes at `at` into `dst`; false on an error or the end of the file.
  bool Read(void* dst, uint64_t size, uint64_t at) const {
    char* p = static_cast<char*>(dst);
    while (size > 0) {
      const ssize_t r = pread(fd_, p, size, static_cast<off_t>(at));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      p += r;
      at += static_cast<uint64_t>(r);
      size -= static_cast<uint64_t>(r);
    }
    return true;
  }

 private:
  const int fd_;
};

// A file's validated header, and where its data section lies.
struct FileHeader {
  Header header;
  uint64_t data_at = 0, data_bytes = 0;
};

absl::StatusOr<FileHeader> ReadHeader(const OpenFile& file, const std::string& path, int64_t max_bytes) {
  struct stat st;
  if (fstat(file.fd(), &st) != 0) return absl::InternalError(absl::StrCat("cannot stat ", path));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (static_cast<int64_t>(size) > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(path, " holds ", size, " bytes, more than the limit ", max_bytes));
  }
  unsigned char length[8];
  if (size < 8 || !file.Read(length, 8, 0)) return Corrupt(absl::StrCat(path, " is shorter than 8 bytes"));
  const uint64_t n = ReadLe64(length);
  if (n > kMaxHeaderBytes || n > size - 8) return Corrupt(absl::StrCat(path, ": header length past the end"));
  std::string text(n, '\0');
  if (!file.Read(text.data(), n, 8)) return Corrupt(absl::StrCat(path, ": cannot read the header"));
  FileHeader out;
  out.data_at = 8 + n;
  out.data_bytes = size - 8 - n;
  absl::StatusOr<Header> h = ParseHeader(text, out.data_bytes);
  if (!h.ok()) return absl::Status(h.status().code(), absl::StrCat(path, ": ", h.status().message()));
  out.header = *std::move(h);
  return out;
}

// The data section into a SafetensorsFile (floats: F32 files only) or a
// RawSafetensorsFile (bytes), checksum verified.
template <typename File>
absl::StatusOr<File> ReadData(const OpenFile& file, const std::string& path, FileHeader h) {
  File f;
  f.metadata = std::move(h.header.metadata);
  f.tensors = std::move(h.header.tensors);
  f.data.resize(h.data_bytes / sizeof(f.data[0]));
  if (h.data_bytes > 0 && !file.Read(f.data.data(), h.data_bytes, h.data_at)) {
    return Corrupt(absl::StrCat(path, ": cannot read the data"));
  }
  if (absl::Status s = VerifyChecksum(f); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  return f;
}

// Why `path` did not open (errno of the open that failed).
absl::Status OpenError(const std::string& path) {
  if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file ", path));
  return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
}

}  // namespace

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path, int64_t max_bytes) {
  const OpenFile file(path);
  if (file.fd() < 0) return OpenError(path);
  absl::StatusOr<FileHeader> h = ReadHeader(file, path, max_bytes);
  if (!h.ok()) return h.status();
  if (AllF32(h->header.tensors)) {  // straight into floats: no second copy of a large file
    absl::StatusOr<SafetensorsFile> f = ReadData<SafetensorsFile>(file, path, *std::move(h));
    if (f.ok()) SetFloatOffsets(&*f);
    return f;
  }
  absl::StatusOr<RawSafetensorsFile> raw = ReadData<RawSafetensorsFile>(file, path, *std::move(h));
  if (!raw.ok()) return raw.status();
  return AsFloats(*std::move(raw));
}

absl::StatusOr<RawSafetensorsFile> ReadRawSafetensors(const std::string& path, int64_t max_bytes) {
  const OpenFile file(path);
  if (file.fd() < 0) return OpenError(path);
  absl::StatusOr<FileHeader> h = ReadHeader(file, path, max_bytes);
  if (!h.ok()) return h.status();
  return ReadData<RawSafetensorsFile>(file, path, *std::move(h));
}

}  // namespace omnilearn
