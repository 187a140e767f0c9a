// The safetensors reader (checkpoints, exports, --init_from, tensor data sets) on hostile
// bytes: the model reader (F32) and the data-set reader (any dtype). No crash, no leak, no
// undefined behaviour, and whatever parses gives offsets inside its data.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<omnilearn::SafetensorsFile> f = omnilearn::ParseSafetensors(bytes);
  if (f.ok()) {
    for (const omnilearn::SafetensorsEntry& e : f->tensors) {
      if (e.offset < 0 || e.offset + e.elements > static_cast<int64_t>(f->data.size())) __builtin_trap();
    }
    absl::StatusOr<omnilearn::ModelLayout> layout = f->Layout();
    if (layout.ok() && layout->total_elements() <= (1 << 22)) (void)f->Gather(*layout);
  }
  // The raw reader reads files: one per process, reused.
  static const std::string path = "/tmp/omnilearn-safetensors-fuzz-" + std::to_string(getpid());
  if (FILE* out = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, out);
    std::fclose(out);
    absl::StatusOr<omnilearn::RawSafetensorsFile> raw = omnilearn::ReadRawSafetensors(path);
    if (raw.ok()) {
      for (const omnilearn::SafetensorsEntry& e : raw->tensors) {
        const int64_t width = omnilearn::TensorDtypeBytes(e.dtype);
        if (width == 0 || e.byte_offset < 0 ||
            e.byte_offset + e.elements * width > static_cast<int64_t>(raw->data.size())) {
          __builtin_trap();
        }
      }
    }
  }
  return 0;
}
