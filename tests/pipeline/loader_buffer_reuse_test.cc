// A later loader of the process takes the batch buffers an earlier one gave back, already
// faulted in (core/host_memory_pool.h), and fills them with its own rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "core/host_memory_pool.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

// 1 KiB rows, value[i][e] = i * 1000 + e + offset: a batch of 4096 fills a 4 MiB buffer,
// large enough to come from the pool.
struct Rows {
  std::vector<float> v;
  Rows(int64_t n, float offset) : v(static_cast<size_t>(n) * 256) {
    for (int64_t i = 0; i < n; ++i) {
      for (int e = 0; e < 256; ++e) v[size_t(i) * 256 + e] = float(i * 1000 + e) + offset;
    }
  }
  std::shared_ptr<Source> Open() {
    return OpenMemory(
        {{ParseSchema("v:float32[256]").fields[0], v.data(), int64_t(v.size() / 256)}});
  }
};

LoaderOptions Options() {
  LoaderOptions o;
  o.batch_size = 4096;
  o.workers = 1;
  o.prefetch = 1;
  o.shuffle = false;
  o.rank = 0;
  o.world_size = 1;
  return o;
}

TEST(LoaderBufferReuse, ASecondLoaderGetsTheFirstOnesBuffersWithoutFaultingNewOnes) {
  HostMemoryPool& pool = HostMemoryPool::Instance();
  pool.Trim();
  pool.SetRetainBytes(uint64_t{256} << 20);
  Rows first(8192, 0.0f);
  std::set<const void*> buffers;
  size_t block_bytes = 0;
  {
    Loader loader(first.Open(), Options());
    while (auto batch = loader.Next()) buffers.insert(batch->field("v").data);
    block_bytes = HostMemoryPool::Rounded(static_cast<size_t>(loader.stats().buffer_bytes));
  }
  ASSERT_FALSE(buffers.empty());
  ASSERT_GT(block_bytes, 0u);
  // Every block the first loader gave back, seen in a batch or not (a worker may have
  // started the next epoch's batch in a further buffer before the loader was destroyed):
  // taken from the pool and given back in reverse, which leaves its LIFO order as it was.
  // The pool was trimmed first, so all it keeps are the first loader's blocks.
  const int64_t kept_count = pool.counters().kept_bytes / static_cast<int64_t>(block_bytes);
  ASSERT_GE(kept_count, 1);
  std::vector<void*> taken;
  const int64_t kept_taken = pool.counters().taken_kept;
  for (int64_t i = 0; i < kept_count; ++i) taken.push_back(pool.Take(block_bytes));
  ASSERT_EQ(pool.counters().taken_kept - kept_taken, kept_count) << "only batch blocks kept";
  const std::set<const void*> kept(taken.begin(), taken.end());
  for (auto it = taken.rbegin(); it != taken.rend(); ++it) pool.Give(*it);
  for (const void* seen : buffers) EXPECT_EQ(kept.count(seen), 1u) << "a batch buffer was kept";
  const auto before = pool.counters();
  EXPECT_GT(before.kept_bytes, 0);

  // Other values, so a row left over from the first loader would show.
  Rows second(8192, 0.5f);
  Loader loader(second.Open(), Options());
  auto batch = loader.Next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(kept.count(batch->field("v").data), 1u) << "the first batch reuses a kept buffer";
  const auto after = pool.counters();
  // Fresh buffers only beyond the ones the first loader gave back (it makes its buffers as
  // its workers need them, so how many it kept depends on the machine's timing).
  const int64_t buffer_bytes = loader.stats().buffer_bytes;
  ASSERT_GT(buffer_bytes, 0);
  const int64_t kept_buffers = static_cast<int64_t>(before.kept_bytes) / buffer_bytes;
  EXPECT_GE(kept_buffers, 1);
  const int64_t allocated = loader.stats().buffers_allocated;  // read after the counters
  EXPECT_LE(static_cast<int64_t>(after.taken_fresh - before.taken_fresh),
            std::max<int64_t>(0, allocated - kept_buffers))
      << "a fresh buffer was faulted in while a kept one was free";
  EXPECT_GT(after.taken_kept, before.taken_kept);
  const float* v = batch->field("v").as<float>();
  for (int64_t i = 0; i < 4096; ++i) {
    ASSERT_EQ(v[i * 256 + 255], float(i * 1000 + 255) + 0.5f) << "row " << i;
  }
  batch.reset();
  pool.Trim();
}

}  // namespace
}  // namespace gpufeed
