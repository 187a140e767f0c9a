#include "worker/trainer/dataset.h"

#include <zlib.h>

#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/safetensors.h"
#include "worker/trainer/torch_dtype.h"

namespace omnilearn {
namespace worker {
namespace {

// Fashion-MNIST's mean and standard deviation over the training images.
constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;

absl::StatusOr<std::vector<uint8_t>> ReadGz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  const bool error = n < 0;
  gzclose(f);
  if (error) return absl::DataLossError(absl::StrCat("corrupt gzip file ", path));
  return out;
}

// The tensor `name` of `file` as a torch tensor of its own dtype (copied: the file's
// bytes may sit at any alignment).
absl::StatusOr<torch::Tensor> TensorOf(const RawSafetensorsFile& file, const std::string& path,
                                       const std::string& name) {
  const SafetensorsEntry* e = file.Find(name);
  if (e == nullptr) return absl::NotFoundError(absl::StrCat(path, " has no tensor '", name, "'"));
  const std::optional<torch::ScalarType> type = ScalarTypeOf(e->dtype);
  if (!type) return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' has dtype ", e->dtype));
  torch::Tensor t = torch::empty(e->shape, *type);
  if (t.nbytes() > 0) memcpy(t.data_ptr(), file.data.data() + e->byte_offset, t.nbytes());
  return t;
}

// Checks and converts one split: x [N, ...] -> float32, y [N] integers >= 0 -> int64.
absl::StatusOr<Dataset> SplitOf(const RawSafetensorsFile& file, const std::string& path, const std::string& x_name,
                                const std::string& y_name) {
  absl::StatusOr<torch::Tensor> x = TensorOf(file, path, x_name);
  if (!x.ok()) return x.status();
  absl::StatusOr<torch::Tensor> y = TensorOf(file, path, y_name);
  if (!y.ok()) return y.status();
  const std::string where = absl::StrCat(path, ": ");
  if (y->dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, y_name, " must be 1-D [N] class indices, it has shape [",
                                                   absl::StrJoin(y->sizes(), ","), "]"));
  }
  if (!torch::isIntegralType(y->scalar_type(), /*includeBool=*/false)) {
    return absl::InvalidArgumentError(absl::StrCat(where, y_name,
                                                   " must hold integer class indices (I64, I32, I16, "
                                                   "I8 or U8), it is ",
                                                   file.Find(y_name)->dtype));
  }
  if (x->dim() < 1 || x->size(0) != y->size(0) || y->size(0) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, x_name, " has shape [", absl::StrJoin(x->sizes(), ","),
                                                   "] and ", y_name, " [", y->size(0),
                                                   "]: want [N, ...] and [N] with the same N > 0"));
  }
  Dataset d;
  d.labels = y->to(torch::kLong);
  if (d.labels.min().item<int64_t>() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, y_name, " has a negative class index"));
  }
  if (file.Find(x_name)->dtype == "BOOL") {
    return absl::InvalidArgumentError(absl::StrCat(where, x_name, " is BOOL; want a numeric dtype"));
  }
  d.images = x->to(torch::kFloat);
  return d;
}

uint32_t BigEndian32(const uint8_t* p) { return (uint32_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3]; }

}  // namespace

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  const std::string image_path = prefix + "-images-idx3-ubyte.gz";
  const std::string label_path = prefix + "-labels-idx1-ubyte.gz";
  auto images = ReadGz(image_path);
  if (!images.ok()) return images.status();
  auto labels = ReadGz(label_path);
  if (!labels.ok()) return labels.status();
  if (images->size() < 16 || BigEndian32(images->data()) != 0x803) {
    return absl::DataLossError(absl::StrCat(image_path, " is not an IDX3 image file"));
  }
  if (labels->size() < 8 || BigEndian32(labels->data()) != 0x801) {
    return absl::DataLossError(absl::StrCat(label_path, " is not an IDX1 label file"));
  }
  const int64_t n = BigEndian32(images->data() + 4);
  const int64_t rows = BigEndian32(images->data() + 8), cols = BigEndian32(images->data() + 12);
  if (rows != 28 || cols != 28 || static_cast<int64_t>(images->size()) != 16 + n * rows * cols ||
      BigEndian32(labels->data() + 4) != n || static_cast<int64_t>(labels->size()) != 8 + n) {
    return absl::DataLossError(absl::StrCat("inconsistent sizes in ", prefix, "-*.gz"));
  }
  Dataset d;
  d.images = torch::from_blob(images->data() + 16, {n, 1, rows, cols}, torch::kUInt8)
                 .to(torch::kFloat32)
                 .div_(255.0f)
                 .sub_(kMean)
                 .div_(kStd);
  d.labels = torch::from_blob(labels->data() + 8, {n}, torch::kUInt8).to(torch::kInt64);
  if (d.labels.max().item<int64_t>() > 9) return absl::DataLossError(absl::StrCat(label_path, ": label > 9"));
  return d;
}

absl::Status LoadTensorFile(const std::string& path, Dataset* train, Dataset* test) {
  absl::StatusOr<RawSafetensorsFile> file = ReadRawSafetensors(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<Dataset> tr = SplitOf(*file, path, "train_x", "train_y");
  if (!tr.ok()) return tr.status();
  *train = std::move(*tr);
  const bool has_x = file->Find("test_x") != nullptr, has_y = file->Find("test_y") != nullptr;
  if (has_x != has_y) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": test_x and test_y go together (only ", has_x ? "test_x" : "test_y", " is there)"));
  }
  *test = Dataset();
  if (!has_x) return absl::OkStatus();
  absl::StatusOr<Dataset> te = SplitOf(*file, path, "test_x", "test_y");
  if (!te.ok()) return te.status();
  if (te->images.sizes().slice(1) != train->images.sizes().slice(1)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": test_x's samples have shape [",
                                                   absl::StrJoin(te->images.sizes().slice(1), ","), "], train_x's [",
                                                   absl::StrJoin(train->images.sizes().slice(1), ","), "]"));
  }
  *test = std::move(*te);
  return absl::OkStatus();
}

Dataset MakeSynthetic(int64_t n, uint64_t seed) {
  // The class templates are the problem's, the same for every split; `seed` draws the
  // labels and the noise (a training and a test split differ in those only).
  torch::Generator problem = torch::make_generator<torch::CPUGeneratorImpl>(20240917);
  torch::Tensor templates = torch::randn({10, 1, 28, 28}, problem);
  torch::Generator gen = torch::make_generator<torch::CPUGeneratorImpl>(seed);
  Dataset d;
  d.labels = torch::randint(0, 10, {n}, gen, torch::kInt64);
  d.images = templates.index_select(0, d.labels) + 1.5 * torch::randn({n, 1, 28, 28}, gen);
  return d;
}

}  // namespace worker
}  // namespace omnilearn
