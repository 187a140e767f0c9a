// The model as the server sees it: an ordered list of named float32 tensors (parameters
// and buffers), stored concatenated in one flat vector. No gRPC, no torch.
#ifndef OMNILEARN_COMMON_MODEL_LAYOUT_H_
#define OMNILEARN_COMMON_MODEL_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/tensor_dtype.h"

namespace omnilearn {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  // A non-trainable buffer (BatchNorm running statistics): averaged, never optimized.
  bool buffer = false;
  // The type the model holds it in, as safetensors names it ("F32", "I64", "BOOL", ...):
  // what an export writes. The server computes in float32 whatever it is; not part of
  // the tensor's identity (==, SameTensors).
  std::string dtype = "F32";
  bool operator==(const TensorSpec& o) const { return name == o.name && shape == o.shape && buffer == o.buffer; }
};

// Immutable after Create. Thread-safe (const).
class ModelLayout {
 public:
  ModelLayout() = default;
  // InvalidArgument: no tensors, an empty or repeated name, a negative dimension.
  static absl::StatusOr<ModelLayout> Create(std::vector<TensorSpec> tensors);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  int64_t total_elements() const { return total_; }
  // Index of the tensor called `name`, or -1.
  int Find(const std::string& name) const;
  int64_t offset(int index) const { return offsets_[index]; }
  int64_t size(int index) const { return sizes_[index]; }
  bool is_buffer(int index) const { return tensors_[index].buffer; }
  bool has_buffers() const { return has_buffers_; }
  bool empty() const { return tensors_.empty(); }
  bool operator==(const ModelLayout& o) const { return tensors_ == o.tensors_; }
  bool operator!=(const ModelLayout& o) const { return !(*this == o); }
  // The same tensors (names, shapes, buffer flags), in any order: what workers must
  // share. The wire addresses tensors by name, so a worker whose framework lists them
  // in another order (a Python model next to C++ ones) trains the same model.
  bool SameTensors(const ModelLayout& o) const;
  // The order in which the model's tensors go to a worker (layout indices): its buffers first
  // when they hold at most 1/32 of the values, then the parameters, each in layout order;
  // else layout order. A layout lists the buffers after every parameter, but a forward needs
  // a BatchNorm's statistics where it needs its weights: a model arriving during the next
  // forward kept the first BatchNorm waiting for the end of the stream. Large buffers stay
  // last (they would hold up the first layers' weights).
  std::vector<int> SendOrder() const;
  // "conv1.weight[16,1,5,5], ..." for error messages.
  std::string DebugString() const;
  // What differs between this layout ("here") and `server`'s, tensor by tensor: the ones
  // only here, only there, or of another shape or kind; at most `limit` of them, then
  // how many more. Tensors that match are not named.
  std::string DescribeDifference(const ModelLayout& server, int limit = 8) const;

 private:
  std::vector<TensorSpec> tensors_;
  std::vector<int64_t> offsets_, sizes_;
  absl::flat_hash_map<std::string, int> index_;
  int64_t total_ = 0;
  bool has_buffers_ = false;
};

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_MODEL_LAYOUT_H_
