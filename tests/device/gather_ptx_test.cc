// The checked-in PTX of the gather kernels (src/device/kernels/gather_ptx.cc): ptxas
// assembles it, and it is what gen_gather_ptx.sh makes of gather.cu today. Each test is
// skipped where the CUDA toolkit (ptxas, nvcc) is absent, as on most CI machines.
#include "device/kernels/gather_ptx.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "sources/scratch_dir.h"

namespace gpufeed::cuda {
namespace {

const std::string kToolkit = "/usr/local/cuda/bin/";

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int RunCommand(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(GatherPtx, AssemblesWithPtxas) {
  if (!std::filesystem::exists(kToolkit + "ptxas")) GTEST_SKIP() << "no ptxas";
  testing::ScratchDir dir;
  const std::string ptx = dir.path() + "/gather.ptx";
  std::ofstream(ptx) << kGatherPtx;
  for (const char* arch : {"sm_75", "sm_90"}) {
    EXPECT_EQ(RunCommand(kToolkit + "ptxas -arch=" + arch + " " + ptx + " -o " + dir.path() +
                         "/gather.cubin"),
              0)
        << arch;
  }
  // A driver refuses PTX of a newer ISA than it knows: the file must not claim CUDA 13's 9.0.
  EXPECT_NE(std::string(kGatherPtx).find("\n.version 7.0\n"), std::string::npos);
  for (const char* kernel : {kGatherKernel16, kGatherKernel4, kGatherKernel1}) {
    EXPECT_NE(std::string(kGatherPtx).find(std::string(".entry ") + kernel + "("),
              std::string::npos)
        << kernel;
  }
}

TEST(GatherPtx, MatchesWhatTheScriptGenerates) {
  if (!std::filesystem::exists(kToolkit + "nvcc")) GTEST_SKIP() << "no nvcc";
  testing::ScratchDir dir;
  const std::string source = GPUFEED_SOURCE_DIR "/src/device/kernels/";
  const std::string out = dir.path() + "/gather_ptx.cc";
  ASSERT_EQ(RunCommand(source + "gen_gather_ptx.sh " + out), 0);
  const std::string generated = ReadText(out);
  const std::string checked_in = ReadText(source + "gather_ptx.cc");
  // Another nvcc release writes other PTX: only the release that made the file can judge.
  const auto release = [](const std::string& text) {
    const size_t at = text.find("Cuda compilation tools");
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  if (release(generated) != release(checked_in)) {
    GTEST_SKIP() << "nvcc is '" << release(generated) << "', the PTX was made by '"
                 << release(checked_in) << "'";
  }
  EXPECT_EQ(generated, checked_in)
      << "src/device/kernels/gather_ptx.cc is stale: run src/device/kernels/gen_gather_ptx.sh";
}

}  // namespace
}  // namespace gpufeed::cuda
