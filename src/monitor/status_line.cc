// FormatStatusLine (gpufeed/monitor_types.h) and StatusLinePrinter (status_line.h).
#include "monitor/status_line.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "gpufeed/monitor_types.h"

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

std::vector<std::string> FormatProcessLines(const MonitorSnapshot& snapshot) {
  std::vector<std::string> lines;
  for (const ProcessSample& p : snapshot.host.processes) {
    std::string line = fmt::format("  pid {:<7} {:<15} CPU {:>4} RSS {:>8} |", p.pid, p.name,
                                   p.cpu_cores ? fmt::format("{:.0f}%", *p.cpu_cores * 100) : "n/a",
                                   Size(p.rss_bytes));
    if (snapshot.gpus.empty()) {
      line += " GPU n/a";
    } else {
      bool listed = false;
      for (const GpuSample& gpu : snapshot.gpus) {
        for (const GpuProcessSample& g : gpu.processes) {
          if (g.pid != p.pid) continue;
          listed = true;
          line += fmt::format(" GPU{} SM {} VRAM {}", gpu.index, Percent(g.sm_utilization_ratio),
                              g.memory_bytes ? Size(*g.memory_bytes) : "n/a");
        }
      }
      if (!listed) line += " GPU -";
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

StatusLinePrinter::StatusLinePrinter(FILE* out)
    : out_(out), tty_(out != nullptr && isatty(fileno(out)) == 1) {}

StatusLinePrinter::~StatusLinePrinter() { Finish(); }

void StatusLinePrinter::Update(const std::string& line) {
  if (out_ == nullptr) return;
  last_line_ = line;
  if (tty_) {
    // Back to the start of the block drawn last (\r, then up a line per extra line), each
    // line cleared to its end (\x1b[K), and what a longer previous block left below cleared
    // (\x1b[J).
    const int lines = LineCount(line);
    std::string up = open_lines_ > 1 ? fmt::format("\x1b[{}A", open_lines_ - 1) : "";
    std::fprintf(out_, "\r%s%s%s", up.c_str(), Terminal(line).c_str(),
                 open_lines_ > lines ? "\x1b[J" : "");
    line_open_ = true;
    open_lines_ = lines;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void StatusLinePrinter::Message(const std::string& message) {
  if (out_ == nullptr) return;
  if (tty_ && line_open_) {
    // Clear the block (one line: to its end; several: everything below its first line).
    std::string clear = open_lines_ > 1 ? fmt::format("\x1b[{}A\x1b[J", open_lines_ - 1) : "\x1b[K";
    std::fprintf(out_, "\r%s%s\n%s", clear.c_str(), message.c_str(), Terminal(last_line_).c_str());
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
  open_lines_ = 0;
}

int StatusLinePrinter::LineCount(const std::string& text) {
  return 1 + static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

std::string StatusLinePrinter::Terminal(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') out += "\x1b[K";
    out += c;
  }
  return out + "\x1b[K";
}

}  // namespace gpufeed
