// The safetensors file format (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON
//   {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "string", ...}}
// then the raw little-endian tensor data, the tensors contiguous and in offset order.
// Tensors are written from float32 values (the server's type) in each tensor's own dtype
// (common/tensor_dtype.h), and read back as float32 from any of them. Loads in Python with
// safetensors.torch.load_file, or with this reader through omnilearn.tensor_files.
#ifndef OMNILEARN_COMMON_SAFETENSORS_H_
#define OMNILEARN_COMMON_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_layout.h"
#include "common/tensor_dtype.h"

namespace omnilearn {

// Metadata key holding the CRC-32 (zlib) of the data section, as 8 hex digits. Written
// by WriteSafetensors and verified by ReadSafetensors when present.
inline constexpr char kChecksumKey[] = "omnilearn.crc32";

// One tensor to write: `values` points at product(shape) floats that stay valid
// during the call; they are written as `dtype` (rounded: EncodeTensorValues).
struct TensorView {
  std::string name;
  std::vector<int64_t> shape;
  const float* values = nullptr;
  std::string dtype = "F32";
};

// Writes the file atomically (common/atomic_file.h). InvalidArgument for a repeated or
// reserved name, an unknown dtype, a negative dimension or metadata under kChecksumKey; Internal on I/O
// errors (the previous file at `path`, if any, is then left as it was).
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorView>& tensors,
                              const std::map<std::string, std::string>& metadata);

// The same file's bytes, in memory (a replica sent to another server). Same errors but I/O's.
absl::StatusOr<std::string> EncodeSafetensors(const std::vector<TensorView>& tensors,
                                              const std::map<std::string, std::string>& metadata);

// One tensor to write as it is: `bytes` are product(shape) little-endian values of `dtype`
// (data sets and arrays written from Python), valid during the call.
struct RawTensorView {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  absl::string_view bytes;
};

// The same file from bytes: what WriteSafetensors does after encoding. Same errors, and
// InvalidArgument when a tensor's bytes are not its shape's size in its dtype.
absl::Status WriteRawSafetensors(const std::string& path, const std::vector<RawTensorView>& tensors,
                                 const std::map<std::string, std::string>& metadata);

struct SafetensorsEntry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in floats, into SafetensorsFile::data
  int64_t elements = 0;
  std::string dtype = "F32";
  int64_t byte_offset = 0;  // into the data section
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::vector<float> data;                // every tensor as float32, whatever its dtype in the file

  const SafetensorsEntry* Find(const std::string& name) const;
  // The tensors named `prefix + spec.name` for each tensor of `layout`, concatenated in
  // layout order. NotFound for a missing tensor, InvalidArgument for a shape mismatch.
  absl::StatusOr<std::vector<float>> Gather(const ModelLayout& layout, const std::string& prefix = "") const;
  // The layout of the tensors whose names do not start with any of `skip_prefixes`,
  // in data order, each with its dtype in the file.
  absl::StatusOr<ModelLayout> Layout(const std::vector<std::string>& skip_prefixes = {}) const;
};

// Reads and validates a whole file: header length within the file and at most 100 MB,
// JSON well formed, every entry of a dtype in kTensorDtypes with a shape whose size
// matches its offsets, the entries contiguous from 0 to the end of the file, the checksum
// (when present) right; the values converted to float32 (DecodeTensorValues).
// NotFound when the file does not exist, DataLoss for anything truncated or corrupt,
// InvalidArgument for a valid file this reader does not support (another dtype),
// ResourceExhausted when the file is larger than `max_bytes`.
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path, int64_t max_bytes = int64_t{1} << 40);

// The same file kept as the data section's raw little-endian bytes: data sets written
// from Python. Same validation and errors as ReadSafetensors.
struct RawSafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> tensors;  // in data order; offsets in bytes (byte_offset)
  std::string data;

  const SafetensorsEntry* Find(const std::string& name) const;
};
absl::StatusOr<RawSafetensorsFile> ReadRawSafetensors(const std::string& path, int64_t max_bytes = int64_t{1} << 40);

// Parses a file's bytes (what ReadSafetensors does after reading them). Same errors.
absl::StatusOr<SafetensorsFile> ParseSafetensors(const std::string& bytes);

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_SAFETENSORS_H_
