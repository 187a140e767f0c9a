#include "worker/devices/device.h"

#include <stdexcept>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

TEST_CASE("device choice: names, a CPU-only LibTorch, missing and out-of-range GPUs", "[device]") {
  std::string note;
  const CudaInfo cpu_build{false, 0}, no_gpu{true, 0}, two_gpus{true, 2};
  REQUIRE(PickDevice("cpu", two_gpus, &note)->is_cpu());
  REQUIRE(PickDevice("auto", two_gpus, &note).value() == torch::Device(torch::kCUDA, 0));
  REQUIRE(note.empty());
  REQUIRE(PickDevice("auto", cpu_build, &note)->is_cpu());
  REQUIRE(note.find("no CUDA support") != std::string::npos);  // said, not silent
  REQUIRE(PickDevice("auto", no_gpu, &note)->is_cpu());
  REQUIRE(note.find("no CUDA device visible") != std::string::npos);
  REQUIRE(PickDevice("cuda:1", two_gpus, &note).value() == torch::Device(torch::kCUDA, 1));
  REQUIRE(PickDevice("cuda", two_gpus, &note).value() == torch::Device(torch::kCUDA, 0));
  auto refused = [&](const std::string& name, const CudaInfo& info, const std::string& says) {
    absl::StatusOr<torch::Device> d = PickDevice(name, info, &note);
    REQUIRE(d.status().code() == absl::StatusCode::kInvalidArgument);
    INFO(d.status().message());
    REQUIRE(d.status().message().find(says) != absl::string_view::npos);
  };
  refused("cuda", cpu_build, "no CUDA support");
  refused("cuda:0", no_gpu, "sees 0 CUDA device");
  refused("cuda:2", two_gpus, "sees 2 CUDA device");
  refused("cuda:-1", two_gpus, "unknown device");
  refused("cuda:x", two_gpus, "unknown device");
  refused("gpu", two_gpus, "unknown device");
}

TEST_CASE("this process's LibTorch is probed, and the CPU needs no waiting", "[device]") {
  const CudaInfo info = ProbeCuda();
  REQUIRE(info.devices >= 0);
  if (!info.built_with_cuda) REQUIRE(info.devices == 0);
  Synchronize(torch::Device(torch::kCPU));  // a no-op, and no CUDA call on a CPU build
}

TEST_CASE("out-of-memory failures are told from others, however they are thrown", "[device]") {
  // The allocator's own error type.
  REQUIRE(IsOutOfMemory(c10::OutOfMemoryError({"f", "file.cc", 1}, "CUDA out of memory. Tried to allocate 2.00 GiB")));
  // The same, rethrown by the TorchScript interpreter as a plain runtime_error.
  REQUIRE(IsOutOfMemory(std::runtime_error(
      "The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript code:\n"
      "  File \"<string>\", line 3\nRuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB")));
  // cuBLAS and cuDNN, whose messages do not say "out of memory".
  REQUIRE(IsOutOfMemory(c10::Error({"f", "CUDABlas.cpp", 1},
                                   "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
                                   "`cublasCreate(handle)`")));
  REQUIRE(IsOutOfMemory(std::runtime_error("cuDNN error: CUDNN_STATUS_ALLOC_FAILED")));
  // Anything else is a real error, not a smaller batch.
  REQUIRE_FALSE(IsOutOfMemory(c10::Error({"f", "f.cc", 1}, "mat1 and mat2 shapes cannot be multiplied")));
  REQUIRE_FALSE(IsOutOfMemory(std::runtime_error("CUDA error: an illegal memory access was encountered")));
  // A real CPU shape error from LibTorch, as the training step would see it.
  try {
    torch::mm(torch::ones({2, 3}), torch::ones({2, 3}));
    FAIL("no error");
  } catch (const std::exception& e) {
    REQUIRE_FALSE(IsOutOfMemory(e));
  }
}

TEST_CASE("a LibTorch failure is told in one line", "[device]") {
  REQUIRE(ErrorCause(std::runtime_error("The following operation failed in the TorchScript interpreter.\n"
                                        "Traceback of TorchScript code:\n  File x\nRuntimeError: shapes differ\n")) ==
          "RuntimeError: shapes differ");
  try {
    torch::mm(torch::ones({2, 3}), torch::ones({2, 3}));
  } catch (const std::exception& e) {
    REQUIRE(ErrorCause(e).find("cannot be multiplied") != std::string::npos);
    REQUIRE(ErrorCause(e).find("Exception raised from") == std::string::npos);  // no backtrace
  }
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
