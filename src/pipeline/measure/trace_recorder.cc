#include "pipeline/measure/trace_recorder.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr int kPid = 1;
constexpr int kConsumerTid = 0;

// Microseconds since `origin`, as Chrome's trace format wants them.
double Us(int64_t ns, int64_t origin) { return static_cast<double>(ns - origin) / 1000.0; }

void Span(std::string& out, const char* name, int tid, int64_t begin, int64_t end, int64_t origin,
          const std::string& args) {
  if (begin <= 0 || end < begin) return;
  fmt::format_to(std::back_inserter(out),
                 "{{\"name\":\"{}\",\"cat\":\"gpufeed\",\"ph\":\"X\",\"pid\":{},\"tid\":{},"
                 "\"ts\":{:.3f},\"dur\":{:.3f},\"args\":{{{}}}}},\n",
                 name, kPid, tid, Us(begin, origin), static_cast<double>(end - begin) / 1000.0,
                 args);
}

void Counter(std::string& out, const char* name, int64_t at, int64_t origin, int64_t value) {
  fmt::format_to(
      std::back_inserter(out),
      "{{\"name\":\"{}\",\"ph\":\"C\",\"pid\":{},\"ts\":{:.3f},\"args\":{{\"value\":{}}}}},\n",
      name, kPid, Us(at, origin), value);
}

void ThreadName(std::string& out, int tid, const std::string& name) {
  fmt::format_to(
      std::back_inserter(out),
      "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":"
      "\"{}\"}}}},\n{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":{},\"tid\":{},"
      "\"args\":{{\"sort_index\":{}}}}},\n",
      kPid, tid, name, kPid, tid, tid);
}

}  // namespace

TraceRecorder::TraceRecorder(int64_t max_batches, int64_t window_ns)
    : max_batches_(max_batches > 0 ? std::min(max_batches, kMaxBatches) : kMaxBatches),
      window_ns_(max_batches > 0 ? 0 : window_ns) {}

void TraceRecorder::Record(const BatchTraceRecord& record) {
  MutexLock lock(&mu_);
  records_.push_back(record);
  while (static_cast<int64_t>(records_.size()) > max_batches_) records_.pop_front();
  if (window_ns_ > 0) {
    while (records_.size() > 1 &&
           records_.front().next_return_ns < record.next_return_ns - window_ns_) {
      records_.pop_front();
    }
  }
}

int64_t TraceRecorder::size() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(records_.size());
}

std::string TraceRecorder::ChromeTraceJson() const {
  std::vector<BatchTraceRecord> records;
  {
    MutexLock lock(&mu_);
    records.assign(records_.begin(), records_.end());
  }
  int64_t origin = 0;
  std::set<int> workers;
  for (const auto& r : records) {
    const int64_t first = r.stamps.start_ns > 0 ? r.stamps.start_ns : r.next_call_ns;
    if (origin == 0 || first < origin) origin = first;
    if (r.stamps.worker >= 0) workers.insert(r.stamps.worker);
  }
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  fmt::format_to(std::back_inserter(out),
                 "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":"
                 "\"gpufeed loader\"}}}},\n",
                 kPid);
  ThreadName(out, kConsumerTid, "consumer (Next)");
  for (int w : workers) ThreadName(out, w + 1, fmt::format("worker {}", w));
  const BatchTraceRecord* previous = nullptr;
  for (const auto& r : records) {
    const BatchStamps& s = r.stamps;
    const std::string args =
        fmt::format("\"batch\":{},\"epoch\":{},\"samples\":{}", r.batch, r.epoch, r.rows);
    const int tid = s.worker + 1;
    if (s.worker >= 0) {
      Span(out, "buffer wait", tid, s.start_ns, s.read_start_ns, origin, args);
      Span(out, "read", tid, s.read_start_ns, s.read_end_ns, origin, args);
      if (s.decodes > 0) {
        // The batch's decodes are interleaved with its reads; their summed time is drawn at
        // the start of the read, inside it.
        Span(out, "decode", tid, s.read_start_ns,
             s.read_start_ns + std::min(s.decode_ns, s.read_end_ns - s.read_start_ns), origin,
             fmt::format("{},\"decodes\":{},\"note\":\"summed time of the decodes inside the "
                         "read\"",
                         args, s.decodes));
      }
      if (s.transform_end_ns > s.read_end_ns) {
        Span(out, "transform", tid, s.read_end_ns, s.transform_end_ns, origin, args);
      }
      if (s.copy_start_ns > 0) Span(out, "copy", tid, s.copy_start_ns, s.copy_end_ns, origin, args);
    }
    if (previous != nullptr && previous->next_return_ns <= r.next_call_ns) {
      Span(out, "step", kConsumerTid, previous->next_return_ns, r.next_call_ns, origin,
           fmt::format("\"batch\":{},\"epoch\":{},\"samples\":{}", previous->batch, previous->epoch,
                       previous->rows));
    }
    Span(out, "wait in Next()", kConsumerTid, r.next_call_ns, r.next_return_ns, origin, args);
    Counter(out, "queue depth", r.next_return_ns, origin, r.queue_depth);
    Counter(out, "buffers free", r.next_return_ns, origin, r.buffers_free);
    Counter(out, "workers active", r.next_return_ns, origin, r.workers_active);
    previous = &r;
  }
  // No trailing comma: the last event closes the array.
  if (out.size() >= 2 && out[out.size() - 2] == ',') out.erase(out.size() - 2, 1);
  out += "]}\n";
  return out;
}

void TraceRecorder::WriteChromeTrace(const std::string& path) const {
  const std::string json = ChromeTraceJson();
  const std::string tmp = fmt::format("{}.tmp{}", path, getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    throw Error(ErrorCode::kIo,
                fmt::format("cannot write the trace {}: {}", path, std::strerror(errno)));
  }
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    throw Error(ErrorCode::kIo, fmt::format("cannot write the trace {}: {}", path,
                                            std::strerror(ok ? errno : err)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw Error(ErrorCode::kIo,
                fmt::format("cannot write the trace {}: {}", path, std::strerror(e)));
  }
}

}  // namespace gpufeed
