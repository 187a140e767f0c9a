// Steps the server's optimizer over given gradients, for tests that hold it to a
// framework's own (python/tests/test_optimizer_mirror.py runs torch.optim's on the same).
//
//   optimizer_replay SPEC IN OUT
//
// SPEC: JSON {"optimizer": <OptimizerJson>, "tensors": [{"name", "shape"}], "steps": N,
// "rates": [null | [one rate per group], ...] (per step: a scheduler's change before it),
// "restart_after": K (0: none: else after step K the store goes through a checkpoint file
// and a new store, as a restarted server's)}. IN: float32, the initial weights then N
// gradients, each the model's size. OUT: float32, the weights after each step.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/checkpoint/checkpoint.h"
#include "server/checkpoint/optimizer_json.h"
#include "server/data/parameter_store.h"

namespace omnilearn {
namespace server {
namespace {

absl::StatusOr<std::vector<float>> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// The store after `state`'s round trip through a checkpoint file: a restarted server's.
absl::StatusOr<std::unique_ptr<ParameterStore>> Restarted(const ParameterStore& store, const std::string& base) {
  const std::string path = absl::StrCat(base, ".ckpt");
  if (absl::Status s = WriteCheckpoint(path, CaptureStore(store)); !s.ok()) return s;
  absl::StatusOr<CheckpointState> read = ReadCheckpoint(path);
  std::remove(path.c_str());
  if (!read.ok()) return read.status();
  if (!read->optimizer_options.has_value()) return absl::DataLossError("the checkpoint lost the optimizer");
  auto restarted = std::make_unique<ParameterStore>(*read->optimizer_options);
  if (absl::Status s = RestoreStore(*read, restarted.get()); !s.ok()) return s;
  return restarted;
}

absl::Status Replay(const std::string& spec_path, const std::string& in_path, const std::string& out_path) {
  std::ifstream spec_file(spec_path);
  const nlohmann::json spec = nlohmann::json::parse(spec_file, nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded()) return absl::InvalidArgumentError("the spec is not JSON");
  absl::StatusOr<OptimizerOptions> optimizer = ParseOptimizerJson(spec["optimizer"].dump(), OptimizerOptions());
  if (!optimizer.ok()) return optimizer.status();
  std::vector<TensorSpec> tensors;
  for (const nlohmann::json& t : spec["tensors"]) {
    tensors.push_back(TensorSpec{t["name"].get<std::string>(), t["shape"].get<std::vector<int64_t>>()});
  }
  absl::StatusOr<ModelLayout> layout = ModelLayout::Create(tensors);
  if (!layout.ok()) return layout.status();
  absl::StatusOr<std::vector<float>> in = ReadFloats(in_path);
  if (!in.ok()) return in.status();
  const int64_t n = layout->total_elements();
  const int steps = spec["steps"].get<int>();
  if (static_cast<int64_t>(in->size()) != n * (steps + 1)) return absl::InvalidArgumentError("IN has the wrong size");
  auto store = std::make_unique<ParameterStore>(*optimizer);
  if (absl::Status s = store->Initialize(*layout, std::vector<float>(in->begin(), in->begin() + n)); !s.ok()) return s;
  std::ofstream out(out_path, std::ios::binary);
  const int restart_after = spec.value("restart_after", 0);
  for (int step = 0; step < steps; ++step) {
    if (const nlohmann::json& rates = spec["rates"][step]; !rates.is_null()) {
      if (absl::Status s = store->SetGroupRates(rates.get<std::vector<double>>()); !s.ok()) return s;
    }
    store->Apply(std::vector<float>(in->begin() + n * (step + 1), in->begin() + n * (step + 2)));
    out.write(reinterpret_cast<const char*>(store->weights()->data()), n * sizeof(float));
    if (step + 1 == restart_after) {
      absl::StatusOr<std::unique_ptr<ParameterStore>> restarted = Restarted(*store, out_path);
      if (!restarted.ok()) return restarted.status();
      store = *std::move(restarted);
    }
  }
  return out.good() ? absl::OkStatus() : absl::DataLossError(absl::StrCat("cannot write ", out_path));
}

}  // namespace
}  // namespace server
}  // namespace omnilearn

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: optimizer_replay SPEC IN OUT\n";
    return 2;
  }
  const absl::Status s = omnilearn::server::Replay(argv[1], argv[2], argv[3]);
  if (!s.ok()) std::cerr << "optimizer_replay: " << s << "\n";
  return s.ok() ? 0 : 1;
}
