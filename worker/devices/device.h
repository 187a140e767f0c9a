// Where a worker computes, written once for CPU and CUDA hosts: device choice, waiting
// for a device, and telling an out-of-memory failure from any other. Device-generic: the
// CUDA paths are the same calls with a CUDA device (never run on this project's CI, which
// has no GPU; the choices and the classification are unit-tested on CPU).
#ifndef OMNILEARN_WORKER_DEVICES_DEVICE_H_
#define OMNILEARN_WORKER_DEVICES_DEVICE_H_

#include <torch/torch.h>

#include <exception>
#include <string>

#include "absl/status/statusor.h"

namespace omnilearn {
namespace worker {

// What LibTorch in this process can use.
struct CudaInfo {
  bool built_with_cuda = false;  // libtorch_cuda is loaded (a CUDA LibTorch)
  int devices = 0;               // CUDA devices visible (CUDA_VISIBLE_DEVICES applies)
};
CudaInfo ProbeCuda();

// --device: "cpu", "cuda" (= cuda:0), "cuda:N", or "auto" (cuda:0 when a device is
// visible, else the CPU; `*note` then says why). InvalidArgument naming the cause: a
// CPU-only LibTorch, no device visible, N out of range, an unknown name.
absl::StatusOr<torch::Device> PickDevice(const std::string& name, const CudaInfo& cuda, std::string* note);

// Waits until `device` finished its queued work (its own CUDA device, not the current
// one); nothing on the CPU.
void Synchronize(const torch::Device& device);

// Whether a failure of a training step is the device running out of memory: the
// allocator's c10::OutOfMemoryError, and the same rethrown by the TorchScript interpreter
// as a plain std::runtime_error, and cuBLAS/cuDNN allocation failures.
bool IsOutOfMemory(const std::exception& e);

// A LibTorch failure in one line: a native error's message without its backtrace, or
// the cause a TorchScript error ends with (the lines before are the interpreter's stack).
std::string ErrorCause(const std::exception& e);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_DEVICES_DEVICE_H_
