#include "pipeline/memory_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/checked_math.h"
#include "core/format.h"
#include "core/log.h"
#include "gpufeed/device.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// The consumer's fewest held batches: a Python loop still holds the last batch in its loop
// variable when it asks for the next.
constexpr int kFewestHeld = 2;

struct Counts {
  int workers;
  int prefetch;
  int held;
};

// Buffers of `shape.buffer_bytes` the loader may have at once with `c`, and one more for the
// caller's own copy of a host batch.
uint64_t BuffersFor(const Counts& c, const BufferShape& shape) {
  if (!shape.host_batches) return static_cast<uint64_t>(c.workers) + 2;  // staging buffers
  return static_cast<uint64_t>(c.workers) + static_cast<uint64_t>(c.prefetch) +
         static_cast<uint64_t>(c.held) + 1;
}

// Byte counts saturate: past UINT64_MAX nothing fits anyway.
uint64_t Times(uint64_t a, uint64_t b) { return CheckedMul(a, b).value_or(UINT64_MAX); }

std::string Bytes(uint64_t n) { return FormatBytes(static_cast<double>(n)); }

std::string Breakdown(const Counts& c, const BufferShape& shape) {
  if (!shape.host_batches) return fmt::format("{} workers' staging buffers and 2 spare", c.workers);
  return fmt::format(
      "{} being built, {} ready, {} held by the consumer, 1 for a copy of the "
      "caller's own",
      c.workers, c.prefetch, c.held);
}

// "x: int32[268435456] (1.0 GiB a sample)", the largest fields first, at most three.
std::string LargestFields(const BufferShape& shape) {
  if (shape.schema == nullptr) return "the batch";
  std::vector<const FieldSpec*> fields;
  for (const FieldSpec& f : shape.schema->fields) fields.push_back(&f);
  std::stable_sort(fields.begin(), fields.end(), [](const FieldSpec* a, const FieldSpec* b) {
    return a->SampleBytes() > b->SampleBytes();
  });
  std::string out;
  for (size_t i = 0; i < fields.size() && i < 3; ++i) {
    out += fmt::format("{}{} ({} a sample)", i ? ", " : "", fields[i]->ToString(),
                       Bytes(fields[i]->SampleBytes()));
  }
  if (fields.size() > 3) out += fmt::format(" and {} smaller fields", fields.size() - 3);
  return out;
}

}  // namespace

MemoryRoom MemoryRoom::Now() {
  MemoryRoom room;
  room.available_ram = AvailableRamBytes();
  room.address_space = AddressSpaceLimit();
  room.allocatable = AllocatableBytes(room.available_ram, room.address_space);
  return room;
}

std::string MemoryRoom::Describe() const {
  std::string out;
  if (address_space) {
    out = fmt::format("the address-space limit (RLIMIT_AS, ulimit -v) of {}, {} of it in use; ",
                      Bytes(address_space->limit), Bytes(address_space->used));
  }
  return out + fmt::format("{} of RAM available", Bytes(available_ram));
}

uint64_t MemoryMargin(uint64_t allocatable) { return (uint64_t{256} << 20) + allocatable / 16; }

void FitBuffersInMemory(LoaderOptions& o, const ChosenCounts& chosen, const BufferShape& shape,
                        const MemoryRoom& room) {
  if (room.allocatable == 0 || shape.buffer_bytes == 0) return;
  const uint64_t margin = MemoryMargin(room.allocatable);
  const uint64_t budget = room.allocatable > margin ? room.allocatable - margin : 0;
  // A batch in flight holds its buffer and its samples' indices.
  const uint64_t buffer =
      CheckedAdd(shape.buffer_bytes,
                 Times(static_cast<uint64_t>(std::max<int64_t>(0, shape.rows)), sizeof(int64_t)))
          .value_or(UINT64_MAX);
  auto fits = [&](const Counts& c) { return Times(BuffersFor(c, shape), buffer) <= budget; };
  const Counts asked{o.max_workers, o.max_prefetch, o.max_outstanding};
  if (fits(asked)) return;

  Counts c = asked;
  if (!chosen.prefetch) c.prefetch = 1;
  if (!fits(c) && !chosen.workers) c.workers = 1;
  if (!fits(c)) c.held = std::min(c.held, kFewestHeld);
  if (fits(c)) {
    Log(LogLevel::kWarning,
        fmt::format("warning: batch buffers of {} ({}): {} in flight ({}) would not fit in the "
                    "{} this process may allocate ({}, less {} for the rest of the process), "
                    "so the loader keeps {} ({}): workers={}, prefetch={}, max_outstanding={}",
                    Bytes(buffer), LargestFields(shape), BuffersFor(asked, shape),
                    Breakdown(asked, shape), Bytes(room.allocatable), room.Describe(),
                    Bytes(margin), BuffersFor(c, shape), Breakdown(c, shape), c.workers, c.prefetch,
                    c.held));
    o.workers = std::min(o.workers, c.workers);
    o.max_workers = c.workers;
    o.prefetch = std::min(o.prefetch, c.prefetch);
    o.max_prefetch = c.prefetch;
    o.max_outstanding = c.held;
    return;
  }

  // Refused: say what would fit, fewer buffers at this batch or a smaller batch.
  const Counts fewest{1, 1, std::min(asked.held, kFewestHeld)};
  std::string remedy;
  if (fits(fewest)) {
    remedy = fmt::format("fewer buffers in flight fit: workers=1, prefetch=1, max_outstanding={}",
                         fewest.held);
  } else {
    const uint64_t per_buffer = budget / BuffersFor(fewest, shape);
    const uint64_t rows = per_buffer / (shape.row_bytes + sizeof(int64_t));
    remedy = rows == 0
                 ? fmt::format(
                       "one sample alone does not fit: {} buffers of one sample need {}. "
                       "Read fewer fields (fields=[...]), or run where the limit is "
                       "higher",
                       BuffersFor(fewest, shape),
                       Bytes(Times(BuffersFor(fewest, shape), shape.row_bytes + 8)))
                 : fmt::format(
                       "batch_size={} fits, with workers=1, prefetch=1, "
                       "max_outstanding={}",
                       std::min<uint64_t>(rows, static_cast<uint64_t>(shape.rows)), fewest.held);
  }
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("a batch of {} samples of {} is a {} buffer, and the loader would keep "
                          "{} in flight ({}): {}, more than the {} this process may allocate "
                          "({}, less {} for the rest of the process). {}",
                          shape.rows, LargestFields(shape), Bytes(buffer), BuffersFor(c, shape),
                          Breakdown(c, shape), Bytes(Times(BuffersFor(c, shape), buffer)),
                          Bytes(room.allocatable), room.Describe(), Bytes(margin), remedy));
}

int64_t HeldBudgetBytes(const LoaderOptions& o, size_t buffer_bytes, int planned_buffers,
                        uint64_t allocatable) {
  const auto planned = static_cast<int64_t>(
      Times(buffer_bytes, static_cast<uint64_t>(std::max(0, planned_buffers))));
  if (o.held_budget_bytes > 0) return std::max(planned, o.held_budget_bytes);
  uint64_t budget = 0;
  if (o.device && o.device->needs_copy()) {
    budget = o.device->MemoryInfo().free_bytes / 4;
  } else {
    budget = std::min(PhysicalRamBytes() / 10, allocatable / 2);
  }
  return std::max<int64_t>(planned, static_cast<int64_t>(std::min<uint64_t>(budget, INT64_MAX)));
}

}  // namespace gpufeed
