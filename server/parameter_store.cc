#include "server/parameter_store.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/tensor_codec.h"

namespace omnilearn {
namespace server {

absl::Status ParameterStore::Initialize(ModelLayout layout, std::vector<float> values, uint64_t version) {
  if (initialized()) return absl::FailedPreconditionError("the model is already initialized");
  if (static_cast<int64_t>(values.size()) != layout.total_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("initial parameters have ", values.size(),
                                                   " values, the layout needs ", layout.total_elements()));
  }
  if (!AllFinite(values)) return absl::InvalidArgumentError("initial parameters contain NaN or Inf");
  layout_ = std::move(layout);
  velocity_.assign(values.size(), 0.0f);
  weights_ = std::make_shared<const std::vector<float>>(std::move(values));
  version_ = version;
  return absl::OkStatus();
}

double ParameterStore::LearningRate() const {
  if (options_.lr_decay_steps == 0) return options_.learning_rate;
  return options_.learning_rate * std::pow(options_.lr_decay, static_cast<double>(version_ / options_.lr_decay_steps));
}

void ParameterStore::Apply(const std::vector<float>& gradient, double lr_scale, double momentum) {
  const float lr = static_cast<float>(LearningRate() * lr_scale);
  const float mu = static_cast<float>(momentum >= 0 ? momentum : options_.momentum);
  const float wd = static_cast<float>(options_.weight_decay);
  auto next = std::make_shared<std::vector<float>>(*weights_);
  float* w = next->data();
  float* v = velocity_.data();
  const float* g = gradient.data();
  const size_t n = next->size();
  for (size_t i = 0; i < n; ++i) {
    v[i] = mu * v[i] + g[i] + wd * w[i];
    w[i] -= lr * v[i];
  }
  weights_ = std::move(next);
  ++version_;
}

std::vector<std::pair<std::string, std::vector<float>>> ParameterStore::OptimizerState() const {
  return {{"momentum", velocity_}};
}

absl::Status ParameterStore::Restore(ModelLayout layout, std::vector<float> weights,
                                     std::vector<std::pair<std::string, std::vector<float>>> state,
                                     uint64_t version) {
  if (initialized()) return absl::FailedPreconditionError("the model is already initialized");
  if (state.size() != 1 || state[0].first != "momentum") {
    return absl::InvalidArgumentError("the SGD optimizer's state is one buffer, 'momentum'");
  }
  std::vector<float>& velocity = state[0].second;
  if (velocity.size() != weights.size()) return absl::InvalidArgumentError("momentum buffer size mismatch");
  if (!AllFinite(velocity)) return absl::InvalidArgumentError("momentum buffer contains NaN or Inf");
  if (absl::Status s = Initialize(std::move(layout), std::move(weights), version); !s.ok()) return s;
  velocity_ = std::move(velocity);
  return absl::OkStatus();
}

}  // namespace server
}  // namespace omnilearn
