// A fuzz input read as a sequence of fields: bytes, little-endian integers and
// length-prefixed byte strings (u16 length). Simple enough that tools/ and tests can
// write seed inputs by hand (fuzz/make_corpus.py); reads past the end yield zeros.
#ifndef OMNILEARN_FUZZ_FUZZ_INPUT_H_
#define OMNILEARN_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace omnilearn {
namespace fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(Byte() | (Byte() << 8)); }
  // A u16 length, then that many bytes (fewer at the end of the input).
  std::string Bytes() {
    const size_t n = std::min<size_t>(U16(), size_ - std::min(pos_, size_));
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace fuzz
}  // namespace omnilearn

#endif  // OMNILEARN_FUZZ_FUZZ_INPUT_H_
