#include "sources/numpy/npy_header.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <limits>
#include <optional>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "gpufeed/schema.h"

namespace gpufeed {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kPreamble1 = 10;  // magic, 2 version bytes, uint16 header length
constexpr size_t kPreamble2 = 12;  // magic, 2 version bytes, uint32 header length
// NumPy itself refuses headers over 10 KiB by default; 1 MiB leaves room and keeps a corrupt
// length from allocating gigabytes.
constexpr uint32_t kMaxHeaderBytes = 1 << 20;

struct DescrInfo {
  char kind;  // NumPy's kind character: 'b', 'i', 'u', 'f'
  int size;
  DType dtype;
};

constexpr std::array<DescrInfo, 12> kDescrs = {{
    {'b', 1, DType::kBool},
    {'i', 1, DType::kInt8},
    {'i', 2, DType::kInt16},
    {'i', 4, DType::kInt32},
    {'i', 8, DType::kInt64},
    {'u', 1, DType::kUInt8},
    {'u', 2, DType::kUInt16},
    {'u', 4, DType::kUInt32},
    {'u', 8, DType::kUInt64},
    {'f', 2, DType::kFloat16},
    {'f', 4, DType::kFloat32},
    {'f', 8, DType::kFloat64},
}};

// A strict reader of the one dict literal NumPy writes; anything else is corrupt data.
class DictParser {
 public:
  DictParser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  NpyHeader Parse() {
    std::optional<std::string> descr;
    std::optional<bool> fortran_order;
    std::optional<std::vector<int64_t>> shape;
    Expect('{');
    while (!TryConsume('}')) {
      const std::string key = ParseString();
      Expect(':');
      if (key == "descr") {
        if (descr) Fail("the key 'descr' appears twice");
        SkipSpace();
        if (pos_ < text_.size() && text_[pos_] == '[') {
          throw Error(ErrorCode::kUnsupported,
                      fmt::format("{}: structured dtypes (a list 'descr') are not supported; "
                                  "store one .npy per field",
                                  path_));
        }
        descr = ParseString();
      } else if (key == "fortran_order") {
        if (fortran_order) Fail("the key 'fortran_order' appears twice");
        fortran_order = ParseBool();
      } else if (key == "shape") {
        if (shape) Fail("the key 'shape' appears twice");
        shape = ParseShape();
      } else {
        Fail(fmt::format("unexpected key '{}'", key));
      }
      // Entries are separated by commas; a trailing comma is allowed (NumPy writes one).
      if (!TryConsume(',')) {
        Expect('}');
        break;
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) Fail("text after the closing '}'");
    if (!descr) Fail("the key 'descr' is missing");
    if (!fortran_order) Fail("the key 'fortran_order' is missing");
    if (!shape) Fail("the key 'shape' is missing");
    if (*fortran_order) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: Fortran-order arrays are not supported; save a C-order "
                              "copy (numpy.ascontiguousarray)",
                              path_));
    }
    if (shape->empty()) {
      throw Error(
          ErrorCode::kUnsupported,
          fmt::format("{}: a 0-d array has no sample axis; save it with shape (N, ...)", path_));
    }
    NpyHeader header;
    header.dtype = DTypeFromDescr(*descr);
    header.shape = std::move(*shape);
    return header;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: malformed .npy header ({} at character {}): {}", path_, what, pos_,
                            text_.substr(0, 200)));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool TryConsume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void Expect(char c) {
    if (!TryConsume(c)) Fail(fmt::format("expected '{}'", c));
  }

  // A Python string literal without escapes (NumPy's keys and descrs never need them).
  std::string ParseString() {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      Fail("expected a quoted string");
    }
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) Fail("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    if (value.find('\\') != std::string::npos) Fail("escapes in a string");
    pos_ = end + 1;
    return value;
  }

  bool ParseBool() {
    SkipSpace();
    for (auto [word, value] :
         {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    Fail("expected True or False");
  }

  int64_t ParseDim() {
    SkipSpace();
    int64_t value = 0;
    const char* begin = text_.data() + pos_;
    const char* end = text_.data() + text_.size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec != std::errc() || ptr == begin) Fail("expected a non-negative integer in 'shape'");
    if (value < 0) Fail("a negative dimension in 'shape'");
    pos_ += static_cast<size_t>(ptr - begin);
    // Python 2 wrote long integers as 3L.
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    return value;
  }

  // "()", "(3,)", "(3, 4)", "(3, 4,)".
  std::vector<int64_t> ParseShape() {
    std::vector<int64_t> dims;
    Expect('(');
    if (TryConsume(')')) return dims;
    while (true) {
      dims.push_back(ParseDim());
      if (TryConsume(')')) {
        // A one-element tuple needs its comma in Python: "(3)" is an int, not a shape.
        if (dims.size() == 1) Fail("a one-element shape without its comma");
        return dims;
      }
      Expect(',');
      if (TryConsume(')')) return dims;
    }
  }

  DType DTypeFromDescr(const std::string& descr) const {
    auto unsupported = [&](std::string_view why) {
      return Error(ErrorCode::kUnsupported,
                   fmt::format("{}: dtype '{}' is not supported ({}); supported: bool, "
                               "int8..int64, uint8..uint64, float16/32/64, little-endian",
                               path_, descr, why));
    };
    if (descr.size() < 3) throw unsupported("not a plain numeric dtype");
    const char order = descr[0];
    const char kind = descr[1];
    int size = 0;
    const char* begin = descr.data() + 2;
    const char* end = descr.data() + descr.size();
    auto [ptr, ec] = std::from_chars(begin, end, size);
    if (ec != std::errc() || ptr != end) throw unsupported("not a plain numeric dtype");
    if (order != '<' && order != '|' && order != '>' && order != '=') {
      throw unsupported("unknown byte order");
    }
    for (const auto& info : kDescrs) {
      if (info.kind != kind || info.size != size) continue;
      // One-byte types carry '|' (not applicable); '<' is harmless for them.
      if (size == 1 && (order == '|' || order == '<')) return info.dtype;
      if (size > 1 && order == '<') return info.dtype;
      if (size > 1 && order == '>') {
        throw unsupported("big-endian; convert with arr.astype(arr.dtype.newbyteorder('<'))");
      }
      throw unsupported("byte order not valid for this size");
    }
    switch (kind) {
      case 'U':
      case 'S':
      case 'a':
        throw unsupported("strings");
      case 'O':
        throw unsupported("Python objects");
      case 'c':
        throw unsupported("complex numbers");
      case 'V':
        throw unsupported("void/structured");
      case 'M':
      case 'm':
        throw unsupported("dates and times");
      default:
        throw unsupported("not a plain numeric dtype");
    }
  }

  std::string_view text_;
  const std::string& path_;
  size_t pos_ = 0;
};

uint32_t LoadLE(const unsigned char* p, size_t n) {
  uint32_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

NpyHeader ParseNpyDict(std::string_view dict, const std::string& path) {
  return DictParser(dict, path).Parse();
}

NpyHeader ReadNpyHeader(const File& file) {
  const std::string& path = file.path();
  const uint64_t file_size = file.Size();
  if (file_size < kPreamble1) {
    throw Error(
        ErrorCode::kCorruptData,
        fmt::format("{}: not a .npy file: {} bytes is shorter than the header", path, file_size));
  }
  unsigned char pre[kPreamble2] = {};
  ReadFully(file, 0, pre, std::min<uint64_t>(file_size, kPreamble2), ".npy preamble");
  if (std::string_view(reinterpret_cast<const char*>(pre), kMagic.size()) != kMagic) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: not a .npy file (the magic \"\\x93NUMPY\" is missing)", path));
  }
  const int major = pre[6];
  const int minor = pre[7];
  if (minor != 0 || major < 1 || major > 3) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: .npy format version {}.{} is not supported (1.0, 2.0, 3.0)", path,
                            major, minor));
  }
  const size_t preamble = major == 1 ? kPreamble1 : kPreamble2;
  if (file_size < preamble) {
    throw Error(ErrorCode::kCorruptData, fmt::format("{}: truncated .npy preamble", path));
  }
  const uint32_t header_len = LoadLE(pre + 8, major == 1 ? 2 : 4);
  if (header_len > kMaxHeaderBytes || preamble + header_len > file_size) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: .npy header length {} does not fit in the file ({} bytes)", path,
                            header_len, file_size));
  }
  std::string dict(header_len, '\0');
  ReadFully(file, preamble, dict.data(), header_len, ".npy header");
  // Versions 1.0 and 2.0 are latin-1, 3.0 UTF-8; the only text that matters is ASCII, and
  // any other byte fails the strict parse below.
  if (dict.empty() || dict.back() != '\n') {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: malformed .npy header (it does not end with a newline)", path));
  }
  NpyHeader header = ParseNpyDict(dict, path);
  header.data_offset = preamble + header_len;

  // The per-sample size through the schema's one checked product (a zero dimension must not
  // hide an overflowing rest: (0, 2^62, 2^62) is refused), then samples * that, checked, so a
  // corrupt shape cannot wrap around to a size that happens to match the file.
  FieldSpec sample{.name = "",
                   .dtype = header.dtype,
                   .shape = std::vector<int64_t>(header.shape.begin() + 1, header.shape.end())};
  uint64_t row_bytes = 0;
  try {
    row_bytes = sample.SampleBytes();
  } catch (const Error& e) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the header's shape ({}) is too large: {}", path,
                            fmt::join(header.shape, ", "), e.what()));
  }
  const auto rows = static_cast<uint64_t>(header.shape[0]);
  if (row_bytes == 0 && rows > 0) {
    // Zero-width rows hold no data, yet would make a loader plan and batch any number of
    // samples (2^61 of them) out of an empty file.
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: shape ({}) has samples of zero bytes; nothing to load", path,
                            fmt::join(header.shape, ", ")));
  }
  const auto bytes = CheckedMul(rows, row_bytes);
  const uint64_t have = file_size - header.data_offset;
  if (!bytes || *bytes != have) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the header says shape ({}) of {} = {} data bytes, but the file "
                            "holds {} bytes after the header ({})",
                            path, fmt::join(header.shape, ", "), DTypeName(header.dtype),
                            bytes ? std::to_string(*bytes) : std::string("more than 2^64"), have,
                            !bytes || have < *bytes ? "truncated" : "extra bytes"));
  }
  return header;
}

std::string NpyDescr(DType dtype) {
  for (const auto& info : kDescrs) {
    if (info.dtype == dtype) {
      return fmt::format("{}{}{}", info.size == 1 ? '|' : '<', info.kind, info.size);
    }
  }
  throw Error(ErrorCode::kUnsupported,
              fmt::format("dtype {} cannot be stored in a .npy file (NumPy has no such dtype)",
                          DTypeName(dtype)));
}

std::string FormatNpyHeader(DType dtype, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += fmt::format("{}, ", d);
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (3, 4), but (3,) for one dimension
  if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                 NpyDescr(dtype), dims);
  // Pad with spaces so magic + version + length + dict + '\n' is a multiple of 64.
  const size_t total = (kPreamble1 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - kPreamble1 - dict.size() - 1, ' ');
  dict.push_back('\n');
  GPUFEED_ASSERT(dict.size() <= 0xffff, "a version 1.0 .npy header is at most 65535 bytes");
  std::string out(kMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  out += dict;
  return out;
}

}  // namespace gpufeed
