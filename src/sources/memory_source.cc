// The memory source: rows copied straight from arrays the caller already holds (NumPy arrays,
// torch tensors), with no copy at open time.
#include <fmt/format.h>

#include <cstring>
#include <set>

#include "gpufeed/error.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

class MemorySource final : public Source {
 public:
  MemorySource(std::vector<MemoryField> fields, std::shared_ptr<const void> owner)
      : fields_(std::move(fields)), owner_(std::move(owner)) {
    for (const auto& f : fields_) {
      schema_.fields.push_back(f.spec);
      row_bytes_.push_back(f.spec.SampleBytes());
    }
    samples_ = fields_.front().samples;
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return samples_; }
  std::string Describe() const override {
    return fmt::format("memory ({} fields, {} samples)", fields_.size(), samples_);
  }
  // The addresses identify the arrays for as long as `owner` keeps them alive; a cache keyed
  // on them must not outlive this source.
  std::string Identity() const override {
    std::string id = "memory";
    for (const auto& f : fields_) {
      id += fmt::format("|{}@{}:{}", f.spec.ToString(), f.data, f.samples);
    }
    return id;
  }

  // Memory has no locality to win by sorting, so rows are copied in the order asked.
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState*) const override {
    CheckReadRequest(*this, indices, out);
    for (size_t f = 0; f < fields_.size(); ++f) {
      const size_t rb = row_bytes_[f];
      const auto* src = static_cast<const std::byte*>(fields_[f].data);
      std::byte* dst = out.fields[f];
      for (size_t i = 0; i < indices.size(); ++i) {
        std::memcpy(dst + i * rb, src + static_cast<size_t>(indices[i]) * rb, rb);
      }
    }
  }

 private:
  const std::vector<MemoryField> fields_;
  const std::shared_ptr<const void> owner_;
  Schema schema_;
  std::vector<size_t> row_bytes_;
  int64_t samples_ = 0;
};

}  // namespace

std::shared_ptr<Source> OpenMemory(std::vector<MemoryField> fields,
                                   std::shared_ptr<const void> owner) {
  if (fields.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "memory source: no fields given");
  }
  std::set<std::string> names;
  for (const auto& f : fields) {
    if (!names.insert(f.spec.name).second) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("memory source: field '{}' appears twice", f.spec.name));
    }
    for (int64_t d : f.spec.shape) {
      if (d < 0) {
        throw Error(
            ErrorCode::kInvalidArgument,
            fmt::format("memory source: field {} has a negative dimension", f.spec.ToString()));
      }
    }
    if (f.samples < 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("memory source: field '{}' has {} samples", f.spec.name, f.samples));
    }
    if (f.data == nullptr && f.samples > 0 && f.spec.SampleBytes() > 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("memory source: field '{}' has {} samples but no data (null)",
                              f.spec.name, f.samples));
    }
    if (f.samples != fields.front().samples) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("memory source: fields have different sample counts: '{}' has {}, "
                      "'{}' has {}",
                      fields.front().spec.name, fields.front().samples, f.spec.name, f.samples));
    }
  }
  return std::make_shared<MemorySource>(std::move(fields), std::move(owner));
}

}  // namespace gpufeed
