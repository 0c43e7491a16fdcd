// TraceRecorder: the loader's record of its last batches, stage by stage, written as Chrome
// trace-event JSON (opens in Perfetto and chrome://tracing): one track per worker (waiting for
// a buffer, read with the batch's decode time inside it, transform, copy; each span with the
// batch number and sample count), the consumer's track (its waits in Next() and the steps in
// between), and counters sampled at each delivery (batches ready in the queue, batch buffers
// free, workers active).
//
// Bounded: the batches delivered in the last `window_ns`, at most `max_batches` of them.
// Workers only take timestamps (BatchStamps, carried in their BuiltBatch); the consumer
// records a delivered batch once, so recording costs one copy of a small struct per batch.
//
// Thread-safety: thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "core/thread_annotations.h"

namespace gpufeed {

// When a worker did what for one batch, on the steady clock (ns). 0 = did not happen.
struct BatchStamps {
  int worker = -1;
  int64_t start_ns = 0;  // the build began: waiting for a free buffer
  int64_t read_start_ns = 0;
  int64_t read_end_ns = 0;
  int64_t decode_ns = 0;  // the source's decodes inside the read (HDF5 chunks), summed
  int64_t decodes = 0;
  int64_t transform_end_ns = 0;  // == read_end_ns without transforms
  int64_t copy_start_ns = 0;
  int64_t copy_end_ns = 0;
  int64_t handed_ns = 0;  // the worker put the finished batch in the queue
  // The buffer waited for at start_ns was a pinned staging buffer, which only the copies of
  // earlier batches hold: that wait is copy time.
  bool staging = false;
};

// One delivered batch as the trace shows it.
struct BatchTraceRecord {
  int64_t epoch = 0;
  int64_t batch = 0;
  int64_t rows = 0;
  BatchStamps stamps;
  int64_t next_call_ns = 0;    // the consumer's Next() that delivered it began
  int64_t next_return_ns = 0;  // and returned
  int queue_depth = 0;         // built batches waiting, after this one was taken
  int buffers_free = 0;
  int workers_active = 0;
};

class TraceRecorder {
 public:
  // Default window: a minute; at most 65536 batches (about 10 MB).
  static constexpr int64_t kDefaultWindowNs = int64_t{60} * 1000 * 1000 * 1000;
  static constexpr int64_t kMaxBatches = 65536;

  // `max_batches` > 0: keep the last that many batches (at most kMaxBatches), whatever their
  // age; 0: those of the last `window_ns`, at most kMaxBatches.
  explicit TraceRecorder(int64_t max_batches, int64_t window_ns = kDefaultWindowNs);

  void Record(const BatchTraceRecord& record) EXCLUDES(mu_);
  int64_t size() const EXCLUDES(mu_);

  // The kept batches as a Chrome trace-event JSON document.
  std::string ChromeTraceJson() const EXCLUDES(mu_);
  // Writes ChromeTraceJson() to `path` (through a temporary file renamed into place). Throws
  // Error(kIo) naming the path.
  void WriteChromeTrace(const std::string& path) const;

 private:
  const int64_t max_batches_;
  const int64_t window_ns_;  // 0: no age limit
  mutable Mutex mu_;
  std::deque<BatchTraceRecord> records_ GUARDED_BY(mu_);
};

}  // namespace gpufeed
