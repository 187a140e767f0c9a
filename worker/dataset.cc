#include "worker/dataset.h"

#include <zlib.h>

#include <vector>

#include "absl/strings/str_cat.h"

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
