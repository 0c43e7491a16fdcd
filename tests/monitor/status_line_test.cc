#include "monitor/status_line.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gpufeed/monitor.h"

namespace gpufeed {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

MonitorSnapshot Example() {
  MonitorSnapshot s;
  GpuSample gpu;
  gpu.utilization_ratio = 0.85;
  gpu.memory_used_bytes = static_cast<uint64_t>(12.3 * kGiB);
  gpu.memory_total_bytes = 24 * kGiB;
  s.gpus.push_back(gpu);
  s.host.cpu_utilization_ratio = 0.45;
  s.host.memory_used_bytes = static_cast<uint64_t>(18.4 * kGiB);
  s.host.memory_total_bytes = 64 * kGiB;
  s.host.tree_processes = 3;
  s.host.tree_cpu_cores = 1.5;
  s.host.tree_rss_bytes = static_cast<uint64_t>(3.2 * kGiB);
  return s;
}

TEST(StatusLine, ReadsAtAGlance) {
  EXPECT_EQ(FormatStatusLine(Example()),
            "GPU 85% | VRAM 12.3/24.0 GiB (51%) | CPU 45% | RAM 18.4/64.0 GiB (29%) | proc 1.5 "
            "cores, RSS 3.2 GiB");
}

TEST(StatusLine, SeveralGpusAreNumberedAndMissingReadingsAreNa) {
  MonitorSnapshot s = Example();
  GpuSample second;
  second.index = 1;
  s.gpus.push_back(second);
  s.host.cpu_utilization_ratio.reset();
  s.host.tree_cpu_cores.reset();
  s.host.tree_rss_bytes = 300u << 20;
  EXPECT_EQ(FormatStatusLine(s),
            "GPU0 85% | VRAM0 12.3/24.0 GiB (51%) | GPU1 n/a | VRAM1 n/a | CPU n/a | RAM "
            "18.4/64.0 GiB (29%) | proc n/a cores, RSS 300 MiB");
}

// One line per process of the tree, with its figures on each GPU that lists it.
TEST(StatusLine, OneLinePerProcessWithItsGpuFigures) {
  MonitorSnapshot s = Example();
  s.host.processes = {
      {.pid = 100, .ppid = 1, .name = "python3", .cpu_cores = 0.25, .rss_bytes = 300u << 20},
      {.pid = 101,
       .ppid = 100,
       .name = "pt_worker",
       .cpu_cores = std::nullopt,
       .rss_bytes = static_cast<uint64_t>(1.5 * kGiB)}};
  s.gpus[0].processes = {{.pid = 101, .memory_bytes = 3 * kGiB, .sm_utilization_ratio = 0.45}};
  GpuSample second;
  second.index = 1;
  second.processes = {{.pid = 101, .memory_bytes = std::nullopt, .sm_utilization_ratio = 0.0}};
  s.gpus.push_back(second);
  const std::vector<std::string> lines = FormatProcessLines(s);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "  pid 100     python3         CPU  25% RSS  300 MiB | GPU -");
  EXPECT_EQ(lines[1],
            "  pid 101     pt_worker       CPU  n/a RSS  1.5 GiB | GPU0 SM 45% VRAM 3.0 GiB "
            "GPU1 SM 0% VRAM n/a");
  s.gpus.clear();
  EXPECT_EQ(FormatProcessLines(s)[0],
            "  pid 100     python3         CPU  25% RSS  300 MiB | GPU n/a");
}

std::string Drain(int fd) {
  std::string out;
  char buffer[1024];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) out.append(buffer, n);
  return out;
}

TEST(StatusLinePrinter, RewritesOneLineOnATerminal) {
  int master = -1, slave = -1;
  ASSERT_EQ(openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  fcntl(master, F_SETFL, O_NONBLOCK);
  FILE* tty = fdopen(slave, "w");
  {
    StatusLinePrinter printer(tty);
    printer.Update("GPU 10%");
    printer.Update("GPU 9%");
    printer.Message("warning: low");
  }  // the destructor ends the line
  std::fclose(tty);
  // The pty turns \n into \r\n on output.
  EXPECT_EQ(Drain(master), "\rGPU 10%\x1b[K\rGPU 9%\x1b[K\r\x1b[Kwarning: low\r\nGPU 9%\x1b[K\r\n");
  close(master);
}

// A block of lines (status line and processes) is redrawn in place: up to its first line, each
// line cleared to its end, and leftover lines of a longer block cleared below.
TEST(StatusLinePrinter, RedrawsABlockOfLinesInPlaceOnATerminal) {
  int master = -1, slave = -1;
  ASSERT_EQ(openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  fcntl(master, F_SETFL, O_NONBLOCK);
  FILE* tty = fdopen(slave, "w");
  {
    StatusLinePrinter printer(tty);
    printer.Update("GPU 10%\n  pid 1\n  pid 2");
    printer.Update("GPU 9%\n  pid 1");
    printer.Message("warning: low");
  }
  std::fclose(tty);
  EXPECT_EQ(Drain(master),
            "\rGPU 10%\x1b[K\r\n  pid 1\x1b[K\r\n  pid 2\x1b[K"
            "\r\x1b[2AGPU 9%\x1b[K\r\n  pid 1\x1b[K\x1b[J"
            "\r\x1b[1A\x1b[Jwarning: low\r\nGPU 9%\x1b[K\r\n  pid 1\x1b[K\r\n");
  close(master);
}

TEST(StatusLinePrinter, WritesOneLinePerUpdateElsewhere) {
  FILE* file = std::tmpfile();
  {
    StatusLinePrinter printer(file);
    printer.Update("GPU 10%");
    printer.Message("warning: low");
    printer.Update("GPU 9%");
  }
  std::fseek(file, 0, SEEK_SET);
  char buffer[256] = {};
  size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, file);
  std::fclose(file);
  EXPECT_EQ(std::string(buffer, n), "GPU 10%\nwarning: low\nGPU 9%\n");
}

}  // namespace
}  // namespace gpufeed
