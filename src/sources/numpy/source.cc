// The NumPy source: a folder with one memory-mapped `.npy` file per field (a variable-length
// field with its offsets beside it: sources/numpy/offsets.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>

#include "core/io/mapped_read_guard.h"
#include "core/io/missing_path.h"
#include "core/io/warmed_mapping.h"
#include "core/path_names.h"
#include "core/row_gather.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "sources/numpy/npy_header.h"
#include "sources/numpy/offsets.h"

namespace gpufeed {
namespace {

// A coalesced pread moves at most this much, so the per-worker scratch buffer stays small
// while sequential runs still get large reads.
constexpr size_t kMaxRunBytes = size_t{4} << 20;
// Runs read into scratch (consecutive samples bound for scattered batch positions) are read
// together up to this many bytes.
constexpr size_t kMaxScratchBytes = size_t{64} << 20;

// One run of consecutive samples: order[k, k + rows), read into the batch (direct) or into
// scratch at `scratch_at`.
struct Run {
  size_t k = 0;
  size_t rows = 0;
  bool direct = true;
  size_t scratch_at = 0;
};

// The runs of a batch's rows waiting for one ReadMany, and the repeated samples to copy
// after it: (batch position read, batch position that repeats it).
struct RunPlan {
  std::vector<Run> runs;
  std::vector<ReadRange> ranges;
  std::vector<std::pair<size_t, size_t>> repeats;
  size_t scratch_bytes = 0;
};

// A fixed field, or a variable-length one (spec.variable(): `file` holds the items, rows of
// row_bytes, and `offsets` where each sample's start).
struct NumpyField {
  FieldSpec spec;
  std::unique_ptr<File> file;
  uint64_t data_offset = 0;
  size_t row_bytes = 0;
  std::unique_ptr<File> offsets_file;  // variable-length only
  std::vector<int64_t> offsets;        // samples + 1, checked at open
  // The first data byte in the file's mapping, or null: read through ReadAt.
  const std::byte* data = nullptr;
  // With a mapping: how far it is warm. Rows below come from the mapping, the rest by pread.
  std::shared_ptr<WarmedMapping> warm;
  int64_t samples = 0;  // axis 0
};

class NumpyWorkerState final : public SourceWorkerState {
 public:
  std::vector<size_t> order;       // batch positions sorted by sample index
  std::vector<std::byte> scratch;  // one coalesced run whose rows go to scattered positions
};

class NumpySource final : public Source {
 public:
  NumpySource(std::string dir, std::vector<NumpyField> fields, int64_t samples)
      : dir_(std::move(dir)), fields_(std::move(fields)), samples_(samples) {
    // A cache key must not depend on the working directory the folder was named from.
    identity_dir_ = IdentityPath(dir_);
    for (const auto& f : fields_) schema_.fields.push_back(f.spec);
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return samples_; }

  std::string Describe() const override {
    return fmt::format("numpy:{} ({} fields, {} samples)", dir_, fields_.size(), samples_);
  }

  std::string Identity() const override {
    std::string id = fmt::format("numpy:{}", identity_dir_);
    for (const auto& f : fields_) {
      id += fmt::format("|{}={}/{}.npy:{}:{}:{}", f.spec.ToString(), identity_dir_, f.spec.name,
                        f.file->Size(), f.file->ModificationTimeNs(), f.data_offset);
      // A rewrite that keeps the size and restores the mtime still changes these.
      if (const std::string stamp = f.file->VersionStamp(); !stamp.empty()) {
        id += fmt::format("|stamp:{}/{}.npy={}", identity_dir_, f.spec.name, stamp);
      }
      if (f.offsets_file != nullptr) {
        id += fmt::format("|offsets:{}:{}", f.offsets_file->Size(),
                          f.offsets_file->ModificationTimeNs());
        if (const std::string stamp = f.offsets_file->VersionStamp(); !stamp.empty()) {
          id += fmt::format(":{}", stamp);
        }
      }
    }
    return id;
  }

  std::unique_ptr<SourceWorkerState> NewWorkerState() const override {
    return std::make_unique<NumpyWorkerState>();
  }

  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    CheckReadRequest(*this, indices, out);
    NumpyWorkerState local;
    auto* ws = dynamic_cast<NumpyWorkerState*>(state);
    if (ws == nullptr) ws = &local;
    SortByIndex(indices, ws->order);
    for (size_t f = 0; f < fields_.size(); ++f) {
      const NumpyField& field = fields_[f];
      if (field.spec.variable()) continue;  // ReadItems serves it
      std::span<const size_t> order(ws->order);
      if (field.data != nullptr) {
        // Which way wins, measured (bench/stream_gather.cc, README): from a warm mapping a
        // shuffled gather runs 2-5x faster than pread of the same rows (a system call per
        // 8 KB row), but each page of a new mapping traps on first access on a VM, which made
        // a new process's first batches 5-10x slower than pread. With the warmer on
        // (GPUFEED_MAPPING_WARMER=1) the mapping serves the rows where it is warm (the sorted
        // prefix below WarmEnd) and pread the rest; off (the default: it costs more CPU than
        // it saves over a few epochs), WarmEnd is the end and every row is a mapping copy.
        field.warm->StartWarming();
        const uint64_t warm = field.warm->WarmEnd();
        size_t cut = 0;
        while (cut < order.size() &&
               field.data_offset +
                       (static_cast<uint64_t>(indices[order[cut]]) + 1) * field.row_bytes <=
                   warm) {
          ++cut;
        }
        CopyMapped(field, indices, order.first(cut), out.fields[f]);
        order = order.subspan(cut);
      }
      if (!order.empty()) ReadRuns(field, indices, order, ws->scratch, out.fields[f]);
    }
  }

  void ReadLengths(int field, std::span<const int64_t> indices, std::span<int64_t> lengths,
                   SourceWorkerState* /*state*/) const override {
    const NumpyField& f = Variable(field);
    GPUFEED_ASSERT(lengths.size() == indices.size(), "ReadLengths: one length per index");
    for (size_t i = 0; i < indices.size(); ++i) {
      const auto at = static_cast<size_t>(CheckSampleIndex(*this, indices[i]));
      lengths[i] = f.offsets[at + 1] - f.offsets[at];
    }
  }

  void ReadItems(int field, int64_t index, int64_t first, std::span<std::byte> out,
                 SourceWorkerState* /*state*/) const override {
    const NumpyField& f = Variable(field);
    const auto at = static_cast<size_t>(CheckSampleIndex(*this, index));
    const int64_t start = f.offsets[at];
    const int64_t count =
        CheckItemsRequest(*this, field, index, first, out, f.offsets[at + 1] - start);
    if (count == 0) return;
    // Within the file: the offsets were checked against the values' rows at open.
    const uint64_t row = static_cast<uint64_t>(start + first);
    if (f.data != nullptr) {
      GuardMappedRead(f.file->path(),
                      [&] { std::memcpy(out.data(), f.data + row * f.row_bytes, out.size()); });
      return;
    }
    try {
      ReadFully(*f.file, f.data_offset + row * f.row_bytes, out.data(), out.size(),
                fmt::format("sample {}", index));
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("numpy field '{}' ({}): cannot read sample {}: {}",
                                        f.spec.name, f.file->path(), index, e.what()));
    }
  }

 private:
  const NumpyField& Variable(int field) const {
    if (field < 0 || static_cast<size_t>(field) >= fields_.size() ||
        !fields_[static_cast<size_t>(field)].spec.variable()) {
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("{}: field number {} is not a variable-length field", Describe(), field));
    }
    return fields_[static_cast<size_t>(field)];
  }

  // Batch positions in ascending sample order, so reads walk each file forwards.
  static void SortByIndex(std::span<const int64_t> indices, std::vector<size_t>& order) {
    order.resize(indices.size());
    std::iota(order.begin(), order.end(), size_t{0});
    if (std::is_sorted(indices.begin(), indices.end())) return;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return indices[a] != indices[b] ? indices[a] < indices[b] : a < b;
    });
  }

  static void CopyMapped(const NumpyField& f, std::span<const int64_t> indices,
                         std::span<const size_t> order, std::byte* dst) {
    if (order.empty()) return;
    const size_t rb = f.row_bytes;
    // The file may be truncated under the mapping (np.save over it): a SIGBUS here becomes
    // Error(kIo) naming the file.
    GuardMappedRead(f.file->path(), [&] {
      CopyRows(
          order.size(), rb,
          [&](size_t i) { return f.data + static_cast<size_t>(indices[order[i]]) * rb; },
          [&](size_t i) { return dst + order[i] * rb; });
    });
  }

  // Sorted rows by pread: a run of consecutive samples is one range, straight into the batch
  // when its batch positions are consecutive too (else through `scratch`), and the runs of a
  // batch are one ReadMany (a remote file has them all in flight at once).
  void ReadRuns(const NumpyField& f, std::span<const int64_t> indices,
                std::span<const size_t> order, std::vector<std::byte>& scratch,
                std::byte* dst) const {
    const size_t rb = f.row_bytes;
    if (rb == 0) return;
    const size_t n = order.size();
    const size_t max_rows = std::max<size_t>(1, kMaxRunBytes / rb);
    RunPlan plan;
    size_t k = 0;
    while (k < n) {
      const size_t first_pos = order[k];
      const int64_t first = indices[first_pos];
      if (k > 0 && indices[order[k - 1]] == first) {  // a repeated sample: read once
        plan.repeats.emplace_back(order[k - 1], first_pos);
        ++k;
        continue;
      }
      // Extend over consecutive sample numbers; when their batch positions are consecutive
      // too (a sequential plan), the run is read straight into the batch.
      size_t end = k + 1;
      bool direct = true;
      while (end < n && end - k < max_rows &&
             indices[order[end]] == first + static_cast<int64_t>(end - k)) {
        direct = direct && order[end] == order[end - 1] + 1;
        ++end;
      }
      const size_t rows = end - k;
      if (!direct && plan.scratch_bytes + rows * rb > kMaxScratchBytes && !plan.runs.empty()) {
        ReadPlanned(f, indices, order, plan, scratch, dst);
      }
      plan.runs.push_back({k, rows, direct, direct ? 0 : plan.scratch_bytes});
      if (!direct) plan.scratch_bytes += rows * rb;
      k = end;
    }
    ReadPlanned(f, indices, order, plan, scratch, dst);
  }

  // Reads the planned runs with one ReadMany, scatters those read into `scratch`, copies the
  // repeated samples, and empties the plan.
  void ReadPlanned(const NumpyField& f, std::span<const int64_t> indices,
                   std::span<const size_t> order, RunPlan& plan, std::vector<std::byte>& scratch,
                   std::byte* dst) const {
    const size_t rb = f.row_bytes;
    scratch.resize(plan.scratch_bytes);
    plan.ranges.clear();
    for (const Run& run : plan.runs) {
      std::byte* buf = run.direct ? dst + order[run.k] * rb : scratch.data() + run.scratch_at;
      plan.ranges.push_back(
          {f.data_offset + static_cast<uint64_t>(indices[order[run.k]]) * rb, buf, run.rows * rb});
    }
    bool row_by_row = false;
    try {
      f.file->ReadMany(plan.ranges, "row data");
    } catch (const Error&) {
      row_by_row = true;
    }
    for (const Run& run : plan.runs) {
      for (size_t j = 0; j < run.rows; ++j) {
        std::byte* row = dst + order[run.k + j] * rb;
        if (row_by_row) {
          // Read again row by row, so that the error names the exact sample that fails.
          ReadRow(f, indices[order[run.k + j]], row);
        } else if (!run.direct) {
          std::memcpy(row, scratch.data() + run.scratch_at + j * rb, rb);
        }
      }
    }
    for (const auto& [from, to] : plan.repeats) std::memcpy(dst + to * rb, dst + from * rb, rb);
    plan.runs.clear();
    plan.repeats.clear();
    plan.scratch_bytes = 0;
  }

  void ReadRow(const NumpyField& f, int64_t index, std::byte* dst) const {
    const uint64_t offset = f.data_offset + static_cast<uint64_t>(index) * f.row_bytes;
    try {
      ReadFully(*f.file, offset, dst, f.row_bytes, fmt::format("sample {}", index));
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("numpy field '{}' ({}): cannot read sample {}: {}",
                                        f.spec.name, f.file->path(), index, e.what()));
    }
  }

  const std::string dir_;
  std::string identity_dir_;
  const std::vector<NumpyField> fields_;
  const int64_t samples_;
  Schema schema_;
};

// The `.npy` files in `dir` by field name (file name without `.npy`), sorted; best effort,
// for defaults and messages.
std::vector<std::string> ListNpyFields(const FileSystem& fs, const std::string& dir) {
  std::vector<std::string> names;
  std::vector<DirEntry> entries;
  try {
    entries = fs.List(dir);
  } catch (const Error&) {
    return names;
  }
  for (const DirEntry& e : entries) {
    // "x.npy" (not ".npy": a name that starts with its only dot has no extension).
    if (e.type == PathType::kFile && e.name.size() > 4 && e.name.ends_with(".npy")) {
      names.push_back(e.name.substr(0, e.name.size() - 4));
    }
  }
  std::sort(names.begin(), names.end());
  // "tokens.offsets" beside "tokens" is part of that field, not a field of its own.
  std::erase_if(names, [&](const std::string& n) {
    return n.ends_with(kOffsetsSuffix) &&
           std::binary_search(names.begin(), names.end(),
                              n.substr(0, n.size() - kOffsetsSuffix.size()));
  });
  return names;
}

// The offsets file of field `name`, which makes it variable-length, or "" when there is none.
std::string OffsetsPath(const FileSystem& fs, const std::string& dir, const std::string& name) {
  std::string path = JoinPath(dir, name + std::string(kOffsetsSuffix) + ".npy");
  return fs.Type(path) == PathType::kFile ? path : std::string();
}

NumpyField OpenField(const FileSystem& fs, const std::string& dir, const std::string& name,
                     bool use_mmap) {
  const std::string path = JoinPath(dir, name + ".npy");
  NumpyField field;
  try {
    field.file = fs.Open(path);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotFound) throw;
    const auto present = ListNpyFields(fs, dir);
    throw Error(ErrorCode::kNotFound,
                fmt::format("numpy folder {} has no field '{}' ({} does not exist); the fields "
                            "there are: {}",
                            dir, name, path,
                            present.empty() ? std::string("none")
                                            : fmt::format("{}", fmt::join(present, ", "))));
  }
  const NpyHeader header = ReadNpyHeader(*field.file);
  field.spec.name = name;
  field.spec.dtype = header.dtype;
  field.spec.shape.assign(header.shape.begin() + 1, header.shape.end());
  field.data_offset = header.data_offset;
  field.samples = header.shape[0];
  const std::string offsets_path = OffsetsPath(fs, dir, name);
  if (!offsets_path.empty()) {
    // Axis 0 holds items, the offsets say whose.
    field.spec.shape.insert(field.spec.shape.begin(), kVariableDim);
    field.offsets_file = fs.Open(offsets_path);
    field.offsets = ReadNpyOffsets(*field.offsets_file, header.shape[0], path);
    field.samples = static_cast<int64_t>(field.offsets.size()) - 1;
  }
  field.row_bytes = field.spec.variable() ? field.spec.ItemBytes() : field.spec.SampleBytes();
  const uint64_t end =
      header.data_offset + field.row_bytes * static_cast<uint64_t>(header.shape[0]);
  if (use_mmap) {
    const std::byte* map = field.file->Map();
    if (map != nullptr) {
      field.file->PreferHugePages(header.data_offset, end - header.data_offset);
      field.data = map + header.data_offset;
      field.warm = std::make_shared<WarmedMapping>(map, header.data_offset, end, path);
    }
  }
  return field;
}

// The file that says how many samples `f` has: its offsets for a variable-length field.
const std::string& SamplesPath(const NumpyField& f) {
  return (f.offsets_file != nullptr ? f.offsets_file : f.file)->path();
}

}  // namespace

std::shared_ptr<Source> OpenNumpy(const std::string& dir, NumpyOptions options) {
  std::shared_ptr<const FileSystem> fs =
      options.file_system ? options.file_system : DefaultFileSystem();
  const PathType type = fs->Type(dir);
  if (type == PathType::kMissing) {
    ThrowMissing(*fs, dir, fmt::format("numpy folder {} does not exist", dir));
  }
  if (type != PathType::kDirectory) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} is not a folder; a NumPy data set is a folder with one .npy "
                            "file per field",
                            dir));
  }
  std::vector<std::string> names =
      options.fields.empty() ? ListNpyFields(*fs, dir) : options.fields;
  if (names.empty()) {
    throw Error(ErrorCode::kNotFound, fmt::format("numpy folder {} holds no .npy files", dir));
  }
  if (std::set<std::string>(names.begin(), names.end()).size() != names.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("numpy folder {}: a field is named twice in [{}]", dir,
                            fmt::join(names, ", ")));
  }

  for (const auto& name : names) {
    if (!name.ends_with(kOffsetsSuffix)) continue;
    const std::string owner = name.substr(0, name.size() - kOffsetsSuffix.size());
    if (fs->Type(JoinPath(dir, owner + ".npy")) == PathType::kFile) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("numpy folder {}: {}.npy holds the offsets of the variable-length "
                              "field '{}', not a field of its own",
                              dir, name, owner));
    }
  }

  std::vector<NumpyField> fields;
  for (const auto& name : names) {
    fields.push_back(OpenField(*fs, dir, name, options.use_mmap));
    const NumpyField& first = fields.front();
    const NumpyField& last = fields.back();
    if (last.samples != first.samples) {
      throw Error(
          ErrorCode::kCorruptData,
          fmt::format("numpy folder {}: fields have different sample counts: {} holds "
                      "{} samples, {} holds {}",
                      dir, SamplesPath(first), first.samples, SamplesPath(last), last.samples));
    }
  }
  const int64_t samples = fields.front().samples;
  return std::make_shared<NumpySource>(dir, std::move(fields), samples);
}

}  // namespace gpufeed
