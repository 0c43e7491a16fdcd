// Monitor: samples GPU, VRAM, CPU and RAM while training runs.
//
// A sampler thread reads, at a fixed interval, every GPU through NVML (libnvidia-ml.so.1,
// loaded with dlopen; never linked) and the host through /proc and cgroup v2: machine CPU
// and RAM, and the CPU, RSS, PSS and reads of a watched process tree (a pid and all its
// descendants). Each sample becomes a MonitorSnapshot kept in a bounded history; the monitor
// can write them as JSON lines, serve them as Prometheus text over HTTP, print a live status
// line, warn when GPU utilization stays low, and summarize a run (mean, p5, p95 per metric).
//
// A reading the driver or the OS does not give is an empty optional: shown as "n/a", written
// as JSON null and left out of the Prometheus text; never as 0. Without an NVML library every
// GPU field is n/a and the rest works; nvml_status() says why, once.
//
// Thread-safety: Monitor is thread-safe: Start, Stop, Latest, History, Warnings, Summary and
// SampleNow may be called from any thread. Callbacks in MonitorOptions run on the sampler
// thread (or the thread that calls SampleNow), one at a time.
//
// The snapshot, summary and options types, and the status line's text forms, are in
// gpufeed/monitor_types.h, included here.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/monitor_types.h"

namespace gpufeed {

class Monitor {
 public:
  // Loads NVML (a missing library is not an error: see nvml_status()) and, when asked, binds
  // the Prometheus address: Error(kInvalidArgument) for a malformed address, Error(kIo)
  // naming the address when it cannot be bound (for instance, the port is in use).
  explicit Monitor(MonitorOptions options);
  ~Monitor();  // Stops.

  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Takes a first sample at once, then one per interval on the sampler thread. Throws
  // Error(kIo) when the JSON lines file cannot be opened. A no-op when already started.
  void Start();
  // Stops and joins the sampler; History and Summary stay readable. Idempotent.
  void Stop();

  // Takes one sample on the calling thread (with or without the sampler running).
  MonitorSnapshot SampleNow();

  std::optional<MonitorSnapshot> Latest() const;
  std::vector<MonitorSnapshot> History() const;
  std::vector<std::string> Warnings() const;
  MonitorSummary Summary() const;

  // "NVML: 1 GPU (libnvidia-ml.so.1)" or why GPU fields are n/a.
  std::string nvml_status() const;
  // The bound Prometheus port; 0 without a server.
  int prometheus_port() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufeed
