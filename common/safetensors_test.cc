#include "common/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "catch2/catch.hpp"
#include "common/atomic_file.h"

namespace omnilearn {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

const std::vector<float> kW = {1, 2, 3, 4, 5, 6};
const std::vector<float> kB = {-1.5f, 0.25f};

absl::Status WriteSample(const std::string& path) {
  return WriteSafetensors(path, {{"fc.weight", {2, 3}, kW.data()}, {"fc.bias", {2}, kB.data()}},
                          {{"version", "42"}, {"note", "a \"quoted\" value"}});
}

TEST_CASE("safetensors round trip keeps names, shapes, order, values and metadata", "[safetensors]") {
  const std::string path = TempPath("round.safetensors");
  REQUIRE(WriteSample(path).ok());
  absl::StatusOr<SafetensorsFile> f = ReadSafetensors(path);
  REQUIRE(f.ok());
  REQUIRE(f->tensors.size() == 2);
  REQUIRE(f->tensors[0].name == "fc.weight");  // data order = write order
  REQUIRE(f->tensors[0].shape == std::vector<int64_t>{2, 3});
  REQUIRE(f->tensors[1].name == "fc.bias");
  REQUIRE(f->metadata.at("version") == "42");
  REQUIRE(f->metadata.at("note") == "a \"quoted\" value");
  REQUIRE(f->metadata.count(kChecksumKey) == 1);
  auto layout = ModelLayout::Create({{"fc.weight", {2, 3}}, {"fc.bias", {2}}});
  REQUIRE(layout.ok());
  absl::StatusOr<std::vector<float>> flat = f->Gather(*layout);
  REQUIRE(flat.ok());
  REQUIRE(*flat == std::vector<float>{1, 2, 3, 4, 5, 6, -1.5f, 0.25f});
  REQUIRE(*f->Layout() == *layout);
  // The header is 8-aligned, as the reference implementation writes it.
  const std::string bytes = Slurp(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  REQUIRE(n % 8 == 0);
  REQUIRE(ParseSafetensors(bytes).ok());
}

TEST_CASE("Gather refuses missing tensors and wrong shapes", "[safetensors]") {
  const std::string path = TempPath("gather.safetensors");
  REQUIRE(WriteSample(path).ok());
  auto f = *ReadSafetensors(path);
  auto other = ModelLayout::Create({{"fc.weight", {3, 2}}, {"fc.bias", {2}}});
  REQUIRE(f.Gather(*other).status().code() == absl::StatusCode::kInvalidArgument);
  auto missing = ModelLayout::Create({{"conv.weight", {2}}});
  REQUIRE(f.Gather(*missing).status().code() == absl::StatusCode::kNotFound);
  REQUIRE(f.Gather(*missing, "optimizer.").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("corrupt and truncated files are refused with DataLoss", "[safetensors]") {
  const std::string path = TempPath("corrupt.safetensors");
  REQUIRE(WriteSample(path).ok());
  const std::string good = Slurp(path);

  SECTION("a flipped data byte fails the checksum") {
    std::string bad = good;
    bad[bad.size() - 3] ^= 0x40;
    Spit(path, bad);
    absl::Status s = ReadSafetensors(path).status();
    REQUIRE(s.code() == absl::StatusCode::kDataLoss);
    REQUIRE(s.message().find("checksum") != absl::string_view::npos);
  }
  SECTION("truncated data") {
    Spit(path, good.substr(0, good.size() - 4));
    REQUIRE(ReadSafetensors(path).status().code() == absl::StatusCode::kDataLoss);
  }
  SECTION("truncated header") {
    Spit(path, good.substr(0, 20));
    REQUIRE(ReadSafetensors(path).status().code() == absl::StatusCode::kDataLoss);
  }
  SECTION("shorter than the length field") {
    Spit(path, good.substr(0, 5));
    REQUIRE(ReadSafetensors(path).status().code() == absl::StatusCode::kDataLoss);
  }
  SECTION("a header that is not JSON") {
    std::string bad = good;
    bad[8] = '#';
    Spit(path, bad);
    REQUIRE(ReadSafetensors(path).status().code() == absl::StatusCode::kDataLoss);
  }
  SECTION("a huge header length") {
    std::string bad = good;
    for (int i = 0; i < 8; ++i) bad[i] = '\xff';
    REQUIRE(ParseSafetensors(bad).status().code() == absl::StatusCode::kDataLoss);
  }
  SECTION("another dtype is a clear InvalidArgument") {
    const std::string json = R"({"x":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})";
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(json.size());
    bytes += json + "abcdefgh";
    absl::Status s = ParseSafetensors(bytes).status();
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(s.message().find("C64") != absl::string_view::npos);
  }
  SECTION("overlapping tensors") {
    const std::string json =
        R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(json.size());
    bytes += json + "abcd";
    REQUIRE(ParseSafetensors(bytes).status().code() == absl::StatusCode::kDataLoss);
  }
  REQUIRE(ReadSafetensors(TempPath("does-not-exist")).status().code() == absl::StatusCode::kNotFound);
}

// A file of mixed dtypes as Python's omnilearn.save_tensors writes it (the bytes of
// {"y": int64 [7, -1], "x": uint8 [1, 2, 3]}).
std::string MixedDtypeFile(const std::string& x_dtype = "U8") {
  const std::string json = R"({"y":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"x":{"dtype":")" + x_dtype +
                           R"(","shape":[3],"data_offsets":[16,19]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(json.size());
  bytes += json;
  const int64_t y[2] = {7, -1};
  bytes.append(reinterpret_cast<const char*>(y), sizeof(y));
  bytes += std::string("\x01\x02\x03", 3);
  return bytes;
}

TEST_CASE("the raw reader takes every numeric dtype as bytes; the model reader as float32", "[safetensors]") {
  const std::string path = TempPath("mixed.safetensors");
  Spit(path, MixedDtypeFile());
  absl::StatusOr<RawSafetensorsFile> raw = ReadRawSafetensors(path);
  REQUIRE(raw.ok());
  const SafetensorsEntry* y = raw->Find("y");
  const SafetensorsEntry* x = raw->Find("x");
  REQUIRE((y != nullptr && x != nullptr));
  REQUIRE((y->dtype == "I64" && y->byte_offset == 0 && y->elements == 2));
  REQUIRE((x->dtype == "U8" && x->byte_offset == 16 && x->shape == std::vector<int64_t>{3}));
  int64_t y_values[2];
  memcpy(y_values, raw->data.data() + y->byte_offset, sizeof(y_values));
  REQUIRE((y_values[0] == 7 && y_values[1] == -1));
  REQUIRE(raw->data.substr(16) == "\x01\x02\x03");
  absl::StatusOr<SafetensorsFile> floats = ReadSafetensors(path);
  REQUIRE(floats.ok());
  REQUIRE(floats->data == std::vector<float>{7, -1, 1, 2, 3});
  REQUIRE((floats->Find("x")->offset == 2 && floats->Find("x")->dtype == "U8"));
  REQUIRE(floats->Layout()->tensors()[0].dtype == "I64");
  REQUIRE(ParseSafetensors(MixedDtypeFile())->data == floats->data);
  // A dtype nobody reads, and a byte count that does not fit the dtype.
  Spit(path, MixedDtypeFile("C64"));
  absl::Status s = ReadRawSafetensors(path).status();
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(s.message().find("C64") != absl::string_view::npos);
  Spit(path, MixedDtypeFile("I16"));
  REQUIRE(ReadRawSafetensors(path).status().code() == absl::StatusCode::kDataLoss);
  REQUIRE(TensorDtypeBytes("BF16") == 2);
}

TEST_CASE("tensors are written in their own dtype and read back as float32", "[safetensors]") {
  const std::string path = TempPath("typed.safetensors");
  const std::vector<float> w = {0.5f, -2.0f}, steps = {6.6f}, half = {1.5f, 65520.0f};
  REQUIRE(WriteSafetensors(
              path, {{"w", {2}, w.data()}, {"steps", {}, steps.data(), "I64"}, {"h", {2}, half.data(), "F16"}}, {})
              .ok());
  absl::StatusOr<RawSafetensorsFile> raw = ReadRawSafetensors(path);
  REQUIRE(raw.ok());
  REQUIRE(raw->data.size() == 2 * 4 + 8 + 2 * 2);
  REQUIRE(raw->Find("steps")->dtype == "I64");
  absl::StatusOr<SafetensorsFile> f = ReadSafetensors(path);  // checksum over the bytes written
  REQUIRE(f.ok());
  REQUIRE(f->data == std::vector<float>{0.5f, -2.0f, 7, 1.5f, std::numeric_limits<float>::infinity()});
  REQUIRE(absl::IsInvalidArgument(WriteSafetensors(path, {{"w", {2}, w.data(), "C64"}}, {})));
}

TEST_CASE("tensors written as bytes are read back as the same bytes", "[safetensors]") {
  const std::string path = TempPath("raw_written.safetensors");
  const int64_t labels[3] = {4, -2, 9};
  const std::string labels_bytes(reinterpret_cast<const char*>(labels), sizeof(labels));
  REQUIRE(WriteRawSafetensors(path,
                              {{"y", {3}, "I64", labels_bytes}, {"m", {2}, "BOOL", absl::string_view("\x01\x00", 2)}},
                              {{"k", "v"}})
              .ok());
  absl::StatusOr<RawSafetensorsFile> raw = ReadRawSafetensors(path);  // checksum verified
  REQUIRE(raw.ok());
  REQUIRE(raw->data == labels_bytes + std::string("\x01\x00", 2));
  REQUIRE((raw->Find("m")->dtype == "BOOL" && raw->Find("m")->byte_offset == 24));
  REQUIRE(raw->metadata.at("k") == "v");
  // Bytes that are not the shape's size in the dtype, and the checks the float writer has.
  REQUIRE(absl::IsInvalidArgument(WriteRawSafetensors(path, {{"y", {4}, "I64", labels_bytes}}, {})));
  REQUIRE(absl::IsInvalidArgument(WriteRawSafetensors(path, {{"y", {3}, "C64", labels_bytes}}, {})));
  REQUIRE(absl::IsInvalidArgument(WriteRawSafetensors(path, {{"y", {-3}, "I64", labels_bytes}}, {})));
  REQUIRE(ReadRawSafetensors(path)->data == raw->data);  // the refused writes left the file as it was
}

TEST_CASE("a write that fails before the rename leaves the previous file intact", "[safetensors]") {
  const std::string path = TempPath("atomic.safetensors");
  REQUIRE(WriteSample(path).ok());
  const std::string before = Slurp(path);
  absl::Status s = WriteFileAtomically(path, [](const ByteSink& write) {
    write("garbage", 7);
    return absl::InternalError("interrupted");  // as if the process failed mid-write
  });
  REQUIRE(s.code() == absl::StatusCode::kInternal);
  REQUIRE(Slurp(path) == before);
  REQUIRE(ReadSafetensors(path).ok());
  // No temporary file is left behind.
  REQUIRE(access((path + "." + std::to_string(getpid()) + std::string(kPartialSuffix)).c_str(), F_OK) != 0);
}

TEST_CASE("bad tensors are refused before anything is written", "[safetensors]") {
  const std::string path = TempPath("refused.safetensors");
  const float v = 1;
  REQUIRE(WriteSafetensors(path, {{"a", {1}, &v}, {"a", {1}, &v}}, {}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(WriteSafetensors(path, {{"a", {-1}, &v}}, {}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(WriteSafetensors(path, {{"a", {1}, &v}}, {{kChecksumKey, "x"}}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(access(path.c_str(), F_OK) != 0);
}

}  // namespace
}  // namespace omnilearn
