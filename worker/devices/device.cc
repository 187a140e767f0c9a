#include "worker/devices/device.h"

#include <dlfcn.h>

#include <array>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace omnilearn {
namespace worker {

CudaInfo ProbeCuda() {
  CudaInfo info;
  // A CUDA LibTorch links libtorch_cuda into the process; a CPU one has none.
  void* lib = dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD);
  info.built_with_cuda = lib != nullptr;
  if (lib != nullptr) dlclose(lib);
  info.devices = info.built_with_cuda ? static_cast<int>(torch::cuda::device_count()) : 0;
  return info;
}

absl::StatusOr<torch::Device> PickDevice(const std::string& name, const CudaInfo& cuda, std::string* note) {
  note->clear();
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name == "auto") {
    if (cuda.devices > 0) return torch::Device(torch::kCUDA, 0);
    *note = cuda.built_with_cuda ? "device=auto: no CUDA device visible, training on the CPU"
                                 : "device=auto: this worker's LibTorch has no CUDA support, training on the CPU";
    return torch::Device(torch::kCPU);
  }
  int index = 0;
  if (name != "cuda") {
    if (!absl::StartsWith(name, "cuda:") || !absl::SimpleAtoi(name.substr(5), &index) || index < 0) {
      return absl::InvalidArgumentError(absl::StrCat("unknown device '", name, "' (want cpu, cuda, cuda:N or auto)"));
    }
  }
  if (!cuda.built_with_cuda) {
    return absl::InvalidArgumentError(absl::StrCat("device=", name,
                                                   ": this worker's LibTorch has no CUDA support (a CPU build); "
                                                   "build it against a CUDA LibTorch (docs/gpu.md)"));
  }
  if (index >= cuda.devices) {
    return absl::InvalidArgumentError(absl::StrCat("device=", name, ": LibTorch sees ", cuda.devices,
                                                   " CUDA device(s) (CUDA_VISIBLE_DEVICES applies)"));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

bool IsOutOfMemory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  const std::string what = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  static constexpr std::array<const char*, 3> kSigns = {
      "out of memory",               // the caching allocator, also inside TorchScript's rethrow
      "CUBLAS_STATUS_ALLOC_FAILED",  // cuBLAS handle or workspace
      "CUDNN_STATUS_ALLOC_FAILED",   // cuDNN workspace
  };
  for (const char* sign : kSigns) {
    if (absl::StrContains(what, sign)) return true;
  }
  return false;
}

std::string ErrorCause(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::vector<std::string> lines = absl::StrSplit(c10_error != nullptr ? c10_error->what_without_backtrace() : e.what(),
                                                  '\n', absl::SkipWhitespace());
  if (lines.empty()) return "(no message)";
  return absl::StrContains(e.what(), "TorchScript interpreter") ? lines.back() : lines.front();
}

}  // namespace worker
}  // namespace omnilearn
