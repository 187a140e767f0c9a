// The C++ worker's flat model, alone: its layout (parameters, then buffers, with their
// types), values out and in (integer buffers rounded), gradients and backward's notices.
#include "worker/trainer/flat_model.h"

#include <set>

#include "catch2/catch.hpp"
#include "common/tensor_dtype.h"

namespace omnilearn {
namespace worker {
namespace {

TEST_CASE("the layout lists the parameters, then the buffers, each with the model's type", "[flat_model]") {
  std::unique_ptr<Model> model = *MakeModel("cnn_bn", 1);
  FlatModel flat(model.get());
  absl::StatusOr<ModelLayout> layout = flat.Layout();
  REQUIRE(layout.ok());
  const auto& t = layout->tensors();
  REQUIRE(t.front().name == "conv1.weight");
  REQUIRE_FALSE(t.front().buffer);
  REQUIRE(t.front().dtype == "F32");
  const int counter = layout->Find("bn1.num_batches_tracked");
  REQUIRE(counter > 0);
  REQUIRE(t[counter].buffer);
  REQUIRE(t[counter].dtype == "I64");
  bool buffers = false;
  for (const TensorSpec& s : t) {
    REQUIRE((s.buffer || !buffers));  // no parameter after a buffer
    buffers = buffers || s.buffer;
  }
  REQUIRE(DtypeName(torch::kBool) == "BOOL");
  REQUIRE(DtypeName(torch::kComplexFloat) != "F32");  // a name the layout refuses
}

TEST_CASE("every layout type has one torch type, both ways; other names none", "[flat_model]") {
  for (const TensorDtype& t : kTensorDtypes) {
    const std::optional<torch::ScalarType> type = ScalarTypeOf(t.name);
    REQUIRE(type.has_value());
    REQUIRE(DtypeName(*type) == std::string(t.name));
    REQUIRE(c10::elementSize(*type) == static_cast<size_t>(t.bytes));
  }
  REQUIRE_FALSE(ScalarTypeOf("C64").has_value());
  REQUIRE_FALSE(ScalarTypeOf("f32").has_value());
}

TEST_CASE("values go out in layout order and come back; an average of counts is rounded", "[flat_model]") {
  std::unique_ptr<Model> model = *MakeModel("cnn_bn", 1);
  FlatModel flat(model.get());
  const ModelLayout layout = *flat.Layout();
  std::vector<float> values = flat.Values();
  REQUIRE(static_cast<int64_t>(values.size()) == layout.total_elements());
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 7) * 0.5f;
  const int counter = layout.Find("bn1.num_batches_tracked");
  values[layout.offset(counter)] = 6.6f;
  flat.Load(values);
  std::vector<float> back = flat.Values();
  values[layout.offset(counter)] = 7.0f;  // rounded, not truncated
  REQUIRE(back == values);
}

TEST_CASE("a parameter without a gradient sends zeros; backward notices each parameter once", "[flat_model]") {
  std::unique_ptr<Model> model = *MakeModel("mlp", 1);
  FlatModel flat(model.get());
  const ModelLayout layout = *flat.Layout();
  std::vector<float> out(layout.total_elements(), 9.0f);
  flat.CopyOne(0, &out);
  REQUIRE(out[0] == 0.0f);
  REQUIRE(out[layout.size(0) - 1] == 0.0f);
  std::multiset<int> ready;
  flat.OnGradientReady([&ready](int i) { ready.insert(i); });
  flat.WatchGradients();
  model->Forward(torch::randn({4, 1, 28, 28})).sum().backward();
  REQUIRE(static_cast<int>(ready.size()) == static_cast<int>(flat.size()));  // the MLP has no buffers
  for (int i = 0; i < static_cast<int>(flat.size()); ++i) REQUIRE(ready.count(i) == 1);
  flat.CopyOne(0, &out);
  REQUIRE(out[0] != 0.0f);
  flat.ZeroGrad();
  flat.CopyOne(0, &out);
  REQUIRE(out[0] == 0.0f);
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
