// The memory source: rows copied straight from arrays the caller already holds (NumPy arrays,
// torch tensors), with no copy at open time.
#include "sources/memory_source.h"

#include <fmt/format.h>

#include <set>

#include "core/row_gather.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

class MemorySource final : public Source {
 public:
  MemorySource(std::vector<MemoryField> fields, std::shared_ptr<const void> owner, std::string what,
               std::string identity)
      : fields_(std::move(fields)),
        owner_(std::move(owner)),
        what_(std::move(what)),
        identity_(std::move(identity)) {
    for (const auto& f : fields_) {
      schema_.fields.push_back(f.spec);
      row_bytes_.push_back(f.spec.SampleBytes());
    }
    samples_ = fields_.front().samples;
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return samples_; }
  std::string Describe() const override {
    return fmt::format("{} ({} fields, {} samples)", what_, fields_.size(), samples_);
  }
  // Without an identity of its own, the addresses identify the arrays for as long as
  // `owner` keeps them alive: a cache keyed on them must not outlive this source, and they
  // mean something else in another process.
  bool shareable_across_processes() const override { return !identity_.empty(); }
  // Already in memory: a copy reads no faster.
  bool copy_speeds_reads() const override { return false; }
  std::string Identity() const override {
    if (!identity_.empty()) return identity_;
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
      GatherRows(static_cast<const std::byte*>(fields_[f].data), row_bytes_[f], indices,
                 out.fields[f]);
    }
  }

 private:
  const std::vector<MemoryField> fields_;
  const std::shared_ptr<const void> owner_;
  const std::string what_;
  const std::string identity_;  // empty: the arrays' addresses
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
  return std::make_shared<MemorySource>(std::move(fields), std::move(owner), "memory", "");
}

std::shared_ptr<Source> NewNamedMemorySource(std::vector<MemoryField> fields,
                                             std::shared_ptr<const void> owner, std::string what,
                                             std::string identity) {
  GPUFEED_ASSERT(!fields.empty() && !identity.empty(), "a named memory source needs both");
  return std::make_shared<MemorySource>(std::move(fields), std::move(owner), std::move(what),
                                        std::move(identity));
}

}  // namespace gpufeed
