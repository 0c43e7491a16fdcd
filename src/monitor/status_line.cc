// FormatStatusLine (gpufeed/monitor.h) and StatusLinePrinter (status_line.h).
#include <fmt/format.h>
#include <unistd.h>

#include "gpufeed/monitor.h"
#include "monitor/status_line.h"

namespace gpufeed {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string Percent(const std::optional<double>& ratio) {
  return ratio ? fmt::format("{:.0f}%", *ratio * 100) : "n/a";
}

std::string UsedOfTotal(const std::optional<uint64_t>& used, const std::optional<uint64_t>& total) {
  if (!used || !total || *total == 0) {
    return used ? fmt::format("{:.1f}/n/a GiB", *used / kGiB) : "n/a";
  }
  return fmt::format("{:.1f}/{:.1f} GiB ({:.0f}%)", *used / kGiB, *total / kGiB,
                     100.0 * static_cast<double>(*used) / static_cast<double>(*total));
}

// GiB from 1 GiB up, MiB below: a worker's 300 MiB should not read "0.3 GiB".
std::string Size(uint64_t bytes) {
  if (bytes >= kGiB) return fmt::format("{:.1f} GiB", bytes / kGiB);
  return fmt::format("{:.0f} MiB", bytes / (1024.0 * 1024.0));
}

}  // namespace

std::string FormatStatusLine(const MonitorSnapshot& snapshot) {
  std::string line;
  if (snapshot.gpus.empty()) {
    line = "GPU n/a | VRAM n/a";
  } else if (snapshot.gpus.size() == 1) {
    const GpuSample& gpu = snapshot.gpus.front();
    line = fmt::format("GPU {} | VRAM {}", Percent(gpu.utilization_ratio),
                       UsedOfTotal(gpu.memory_used_bytes, gpu.memory_total_bytes));
  } else {
    for (const GpuSample& gpu : snapshot.gpus) {
      if (!line.empty()) line += " | ";
      line += fmt::format("GPU{} {} | VRAM{} {}", gpu.index, Percent(gpu.utilization_ratio),
                          gpu.index, UsedOfTotal(gpu.memory_used_bytes, gpu.memory_total_bytes));
    }
  }
  const HostSample& host = snapshot.host;
  line += fmt::format(" | CPU {} | RAM {}", Percent(host.cpu_utilization_ratio),
                      UsedOfTotal(host.memory_used_bytes, host.memory_total_bytes));
  if (host.tree_processes > 0) {
    line += fmt::format(" | proc {} cores, RSS {}",
                        host.tree_cpu_cores ? fmt::format("{:.1f}", *host.tree_cpu_cores) : "n/a",
                        host.tree_rss_bytes ? Size(*host.tree_rss_bytes) : "n/a");
  } else {
    line += " | proc exited";
  }
  return line;
}

StatusLinePrinter::StatusLinePrinter(FILE* out)
    : out_(out), tty_(out != nullptr && isatty(fileno(out)) == 1) {}

StatusLinePrinter::~StatusLinePrinter() { Finish(); }

void StatusLinePrinter::Update(const std::string& line) {
  if (out_ == nullptr) return;
  last_line_ = line;
  if (tty_) {
    // \r back to the start, \x1b[K clears what a longer previous line left.
    std::fprintf(out_, "\r%s\x1b[K", line.c_str());
    line_open_ = true;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void StatusLinePrinter::Message(const std::string& message) {
  if (out_ == nullptr) return;
  if (tty_ && line_open_) {
    std::fprintf(out_, "\r\x1b[K%s\n%s\x1b[K", message.c_str(), last_line_.c_str());
  } else {
    std::fprintf(out_, "%s\n", message.c_str());
  }
  std::fflush(out_);
}

void StatusLinePrinter::Finish() {
  if (out_ != nullptr && tty_ && line_open_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  line_open_ = false;
}

}  // namespace gpufeed
