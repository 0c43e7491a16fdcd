// NVTX ranges of the loader's stages, recorded by the fake NVTX library (fake_nvtx/): per
// worker thread balanced and nested, one "gpufeed.batch E:B" range per batch with its read
// and transform inside, and the consumer's waits as "gpufeed.next". Its own binary: the NVTX
// library is loaded once per process, and this one must load the fake.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/nvtx.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"
#include "gpufeed/transforms.h"

namespace gpufeed {
namespace {

struct Event {
  uint64_t thread;
  bool push;
  std::string name;
};

std::vector<Event> Recorded() {
  void* lib = dlopen(GPUFEED_FAKE_NVTX, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return {};
  auto count = reinterpret_cast<int (*)()>(dlsym(lib, "fake_nvtx_count"));
  auto event =
      reinterpret_cast<const char* (*)(int, uint64_t*, int*)>(dlsym(lib, "fake_nvtx_event"));
  std::vector<Event> out;
  for (int i = 0; i < count(); ++i) {
    uint64_t thread = 0;
    int push = 0;
    const char* name = event(i, &thread, &push);
    out.push_back({thread, push != 0, name});
  }
  dlclose(lib);
  return out;
}

TEST(LoaderNvtxTest, StagesNestInsideOneRangePerBatch) {
  setenv("GPUFEED_NVTX_LIBRARY", GPUFEED_FAKE_NVTX, 1);
  ASSERT_TRUE(NvtxEnabled());
  const size_t earlier = Recorded().size();  // from an earlier run of this test (--gtest_repeat)
  LoaderOptions o;
  o.batch_size = 32;
  o.workers = 2;
  o.transforms = {Normalize("x", 0.0f, 1.0f)};
  {
    Loader loader(OpenSynthetic(ParseSchema("x:float32[8]"), 320), o);
    int n = 0;
    while (auto b = loader.Next()) ++n;
    ASSERT_EQ(n, 10);
  }
  // Per thread: a stack; every pop closes the innermost range.
  std::map<uint64_t, std::vector<std::string>> stacks;
  std::map<std::string, std::vector<std::string>> children;  // batch range -> its children
  std::multiset<std::string> batches;
  int nexts = 0;
  const std::vector<Event> events = Recorded();
  for (size_t i = earlier; i < events.size(); ++i) {
    const Event& e = events[i];
    auto& stack = stacks[e.thread];
    if (e.push) {
      if (!stack.empty()) {
        // A stage inside its batch; nothing else nests.
        EXPECT_THAT(stack.back(), ::testing::StartsWith("gpufeed.batch ")) << e.name;
        children[stack.back()].push_back(e.name);
      } else if (e.name.starts_with("gpufeed.batch ")) {
        // Workers may have started the next epoch's first batches (epoch 1) by the end.
        if (e.name.starts_with("gpufeed.batch 0:")) batches.insert(e.name);
      } else {
        EXPECT_EQ(e.name, "gpufeed.next");
        ++nexts;
      }
      stack.push_back(e.name);
    } else {
      ASSERT_FALSE(stack.empty()) << "a pop without its push";
      stack.pop_back();
    }
  }
  for (const auto& [thread, stack] : stacks) EXPECT_TRUE(stack.empty()) << "unbalanced";
  ASSERT_EQ(batches.size(), 10u);
  for (int b = 0; b < 10; ++b) {
    const std::string name = "gpufeed.batch 0:" + std::to_string(b);
    EXPECT_EQ(batches.count(name), 1u) << name;
    EXPECT_EQ(children[name], (std::vector<std::string>{"gpufeed.read", "gpufeed.transform"}))
        << name;
  }
  EXPECT_EQ(nexts, 10);
}

}  // namespace
}  // namespace gpufeed
