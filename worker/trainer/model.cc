#include "worker/trainer/model.h"

#include <torch/script.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace omnilearn {
namespace worker {
namespace {

struct MlpImpl : torch::nn::Module {
  MlpImpl() : fc1(784, 256), fc2(256, 128), fc3(128, 10) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1(x.flatten(1)));
    x = torch::relu(fc2(x));
    return fc3(x);
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

// Two conv + pool stages and two linear layers: ~55k parameters, ~89% on Fashion-MNIST.
struct CnnImpl : torch::nn::Module {
  CnnImpl()
      : conv1(torch::nn::Conv2dOptions(1, 8, 5).padding(2)),
        conv2(torch::nn::Conv2dOptions(8, 16, 5).padding(2)),
        fc1(16 * 7 * 7, 64),
        fc2(64, 10) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(x);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Cnn);

// The CNN with BatchNorm after each convolution: buffers (running statistics) that must
// travel with the weights for the model to evaluate correctly.
struct CnnBnImpl : torch::nn::Module {
  CnnBnImpl()
      : conv1(torch::nn::Conv2dOptions(1, 8, 5).padding(2).bias(false)),
        bn1(8),
        conv2(torch::nn::Conv2dOptions(8, 16, 5).padding(2).bias(false)),
        bn2(16),
        fc1(16 * 7 * 7, 64),
        fc2(64, 10) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn1(conv1(x))), 2);
    x = torch::max_pool2d(torch::relu(bn2(conv2(x))), 2);
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(x);
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(CnnBn);

template <typename Holder>
class NativeModel : public Model {
 public:
  NativeModel() = default;
  torch::Tensor Forward(const torch::Tensor& x) override { return module_->forward(x); }
  std::vector<std::pair<std::string, torch::Tensor>> Parameters() override {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& item : module_->named_parameters()) out.emplace_back(item.key(), item.value());
    return out;
  }
  std::vector<std::pair<std::string, torch::Tensor>> Buffers() override {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& item : module_->named_buffers()) out.emplace_back(item.key(), item.value());
    return out;
  }
  void SetTraining(bool on) override { module_->train(on); }
  void To(const torch::Device& device) override { module_->to(device); }
  absl::Status Save(const std::string&) override {
    return absl::InvalidArgumentError(
        "save_model needs a TorchScript model (model_file); built-in models "
        "are exported by the server (its --export)");
  }

 private:
  Holder module_;
};

// Beside a TorchScript module (python: omnilearn.save_torchscript), the names of its
// non-persistent buffers, one per line: TorchScript itself forgets which they are.
constexpr char kNonPersistentBuffersFile[] = "omnilearn/non_persistent_buffers";

class ScriptedModel : public Model {
 public:
  // `local`: buffers that are not model state (non-persistent), kept out of Buffers().
  ScriptedModel(torch::jit::Module m, std::set<std::string> local, torch::jit::ExtraFilesMap extra)
      : module_(std::move(m)), local_(std::move(local)), extra_(std::move(extra)) {}
  torch::Tensor Forward(const torch::Tensor& x) override { return module_.forward({x}).toTensor(); }
  std::vector<std::pair<std::string, torch::Tensor>> Parameters() override {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& item : module_.named_parameters(/*recurse=*/true)) {
      if (item.value.requires_grad()) out.emplace_back(item.name, item.value);
    }
    return out;
  }
  std::vector<std::pair<std::string, torch::Tensor>> Buffers() override {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& item : module_.named_buffers(/*recurse=*/true)) {
      if (local_.count(item.name) == 0) out.emplace_back(item.name, item.value);
    }
    return out;
  }
  void SetTraining(bool on) override { on ? module_.train() : module_.eval(); }
  void To(const torch::Device& device) override { module_.to(device); }
  absl::Status Save(const std::string& path) override {
    try {
      module_.save(path, extra_);
      return absl::OkStatus();
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("cannot save ", path, ": ", e.what_without_backtrace()));
    }
  }

 private:
  torch::jit::Module module_;
  const std::set<std::string> local_;
  const torch::jit::ExtraFilesMap extra_;  // written back by Save
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> MakeModel(const std::string& name, uint64_t seed) {
  torch::manual_seed(seed);
  if (name == "mlp") return std::unique_ptr<Model>(new NativeModel<Mlp>());
  if (name == "cnn") return std::unique_ptr<Model>(new NativeModel<Cnn>());
  if (name == "cnn_bn") return std::unique_ptr<Model>(new NativeModel<CnnBn>());
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", name, "' (want ", absl::StrJoin(kModelNames, ", "), ", or model_file)"));
}

absl::StatusOr<std::unique_ptr<Model>> LoadScriptedModel(const std::string& path) {
  try {
    // Loaded onto the CPU whatever device it was saved on (a module saved on a GPU loads
    // on a CPU worker); the trainer then moves it to the worker's device.
    torch::jit::ExtraFilesMap extra{{kNonPersistentBuffersFile, ""}};
    torch::jit::Module m = torch::jit::load(path, torch::Device(torch::kCPU), extra);
    std::set<std::string> local = absl::StrSplit(extra[kNonPersistentBuffersFile], '\n', absl::SkipWhitespace());
    std::set<std::string> buffers;
    for (const auto& item : m.named_buffers(/*recurse=*/true)) buffers.insert(item.name);
    for (const std::string& name : local) {
      if (buffers.count(name) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " names a non-persistent buffer ", name, " the module does not hold"));
      }
    }
    auto model = std::make_unique<ScriptedModel>(std::move(m), std::move(local), std::move(extra));
    if (model->Parameters().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": the module has no trainable parameters"));
    }
    return std::unique_ptr<Model>(std::move(model));
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load TorchScript module ", path, ": ", e.what_without_backtrace()));
  }
}

}  // namespace worker
}  // namespace omnilearn
