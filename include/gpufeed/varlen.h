// Variable-length fields (gpufeed/schema.h: `tokens: int32[*]`): the sources that hold them
// and the adaptors that batch them.
//
//   auto corpus = gpufeed::OpenIndexed("data/corpus");       // corpus.bin + corpus.idx
//   auto rows = gpufeed::PackSequences(corpus, {.length = 4096});
//   auto [loader, source, cache] = gpufeed::OpenLoader({.source = rows, ...});
//   // each batch: tokens [B, 4096], tokens_position_ids, tokens_document_ids [B, 4096],
//   //             tokens_lengths [B]
//
// An adaptor turns a source with a variable-length field into a source of fixed-size rows, so
// that the loader, every cache tier, resume and DDP sharding treat it as any other source:
// - PadSequences: one row per sample, the field padded (or cut) to one length;
// - PackSequences: rows of a given length filled with samples end to end.
// Both name what they add after the field: `f_lengths`, `f_position_ids`, `f_document_ids`,
// so that two variable-length fields never collide.
//
// Thread-safety: the returned sources are thread-safe, as every Source is.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/file.h"
#include "gpufeed/source.h"
#include "gpufeed/sources.h"

namespace gpufeed {

// One variable-length field held in memory as values plus offsets: sample i is items
// [offsets[i], offsets[i+1]) of `values` (each item spec.ItemBytes() bytes). `owner` keeps
// both arrays alive for as long as the source lives. The offsets are checked at open: each
// lies in [0, items] and none runs backwards (the first need not be 0); a bad one is
// Error(kCorruptData) naming the field and the sample.
struct RaggedField {
  FieldSpec spec = {};           // variable(): shape[0] == kVariableDim
  const void* values = nullptr;  // `items` items, C order
  int64_t items = 0;
  const int64_t* offsets = nullptr;  // samples + 1 offsets, in items
  int64_t samples = 0;
};
// A source of ragged fields (and, beside them, fixed-size fields with the same sample count:
// MemoryField, gpufeed/sources.h). Zero-copy.
std::shared_ptr<Source> OpenRagged(std::vector<RaggedField> ragged,
                                   std::vector<MemoryField> fixed = {},
                                   std::shared_ptr<const void> owner = nullptr);

// The Megatron-LM / NeMo indexed data set: `prefix.bin` (the tokens of every document, end to
// end) and `prefix.idx` (the `MMIDIDX` header, the dtype code, the document sizes and byte
// pointers, the document index), as Megatron's builder writes them. One field, `tokens`,
// variable-length, of the dtype the index names; one sample per document (sequence).
// Memory-mapped. Every count, size and pointer of the index is checked against the two files'
// sizes at open; a lie is Error(kCorruptData) naming the file, what was read and what was
// expected.
std::shared_ptr<Source> OpenIndexed(const std::string& prefix,
                                    std::shared_ptr<const FileSystem> fs = nullptr);

// Padded rows: one per sample of `source`. The variable-length field `field` becomes
// `field: dtype[max_length, ...item]`, each sample's items first, then `pad_value`;
// `field_lengths: int64[]` gives each row's items kept. A sample longer than max_length is cut
// (its last items, or with truncate_left its first) and the items cut are counted
// (VarlenStatsOf, SourceStats::varlen_*). Every other field of `source` passes through. Throws
// Error(kInvalidArgument) for an unknown or fixed-size field, a negative max_length, a
// pad_to_multiple_of below 1, or a pad_value the field's dtype cannot hold.
struct PadOptions {
  std::string field = {};  // Default: the source's only variable-length field.
  int64_t max_length = 0;  // Default 0: the longest sample (rounded up to pad_to_multiple_of)
  int64_t pad_to_multiple_of = 1;
  double pad_value = 0;
  bool truncate_left = false;  // cut the first items of a long sample instead of its last
};
std::shared_ptr<Source> PadSequences(std::shared_ptr<Source> source, PadOptions options = {});

// Packed rows: the samples of `source`'s variable-length field, end to end, cut into rows of
// `length` items. Fields: `f: dtype[length, ...item]`, `f_position_ids: int32[length]`
// (each item's position in its piece of a sample, restarting where each piece starts: a
// sample cut at a row's start begins again at 0), `f_document_ids:
// int32[length]` (the samples of a row numbered from 0; -1 on padding) and `f_lengths:
// int64[]` (the items of the row that are not padding). Other fields of `source` are not
// carried (a row holds pieces of several samples).
//
// split (the continuous stream of GPT-style pre-training): samples are cut at row ends, so
// every item of the epoch appears exactly once, in size() = ceil(stream / length) rows, and
// only the last row is padded. With `shuffle`, each epoch puts the samples in its own order,
// drawn from the loader's seed and the epoch (ReadSeeded's seed), so the same seed and epoch
// give the same rows whichever worker reads them, and resuming at any batch reads the same
// rows; without it the stream is the source's order.
//
// !split: whole samples only, packed first-fit-decreasing within windows of `window` samples
// (in the source's order), each row filled to the end with padding; a sample longer than
// `length` keeps its first `length` items (the rest is counted as cut). The rows are fixed
// at open, so the loader's shuffle deals them.
//
// `eos`: a value put after every sample (it takes one item of the row).
struct PackOptions {
  std::string field = {};  // Default: the source's only variable-length field.
  int64_t length = 0;      // items per row; required
  bool split = true;
  bool shuffle = false;  // OpenLoader sets it from the loader's shuffle
  std::optional<double> eos = std::nullopt;
  double pad_value = 0;
  int64_t window = 1024;  // !split: samples packed together
  // Default: true. False: no f_position_ids and f_document_ids (rows of `f` and `f_lengths`
  // only, for a model that attends across the samples of a row, as GPT pre-training with
  // Megatron's defaults does): a third of the bytes to write and copy.
  bool ids = true;
};
std::shared_ptr<Source> PackSequences(std::shared_ptr<Source> source, PackOptions options);

// What a padding or packing source knows of its rows, for stats() and the doctor.
struct VarlenStats {
  int64_t rows = 0;
  int64_t items = 0;      // items of the samples kept
  int64_t pad_items = 0;  // padding items in all rows (one epoch)
  int64_t truncated_items = 0;
  double fill() const { return rows == 0 ? 1.0 : double(items) / double(items + pad_items); }
};
// The stats of a source PadSequences or PackSequences returned; nullopt for any other.
std::optional<VarlenStats> VarlenStatsOf(const Source& source);

// The lengths of every sample of a variable-length field, for `inspect` and `bench`:
// percentiles 0, 50, 90, 99, 100 and the total. Reads the lengths only.
struct LengthSummary {
  int64_t samples = 0;
  int64_t total = 0;
  std::vector<std::pair<int, int64_t>> percentiles;  // (percent, length)
};
LengthSummary SummarizeLengths(const Source& source, int field);

}  // namespace gpufeed
