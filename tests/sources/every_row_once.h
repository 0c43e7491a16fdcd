// A loader check shared by the database source tests: over `epochs` epochs, every row id in
// [0, rows) is delivered exactly once per epoch, and `check_row` validates each delivered
// row's other fields against what its id says they hold. Rows carry their id in an int64
// field named "id".
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "gpufeed/loader.h"

namespace gpufeed {

inline void ExpectEveryRowOncePerEpoch(
    Loader& loader, int64_t rows, int epochs,
    const std::function<void(const Batch& batch, int64_t r, int64_t id)>& check_row) {
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::vector<int> seen(static_cast<size_t>(rows), 0);
    while (auto batch = loader.Next()) {
      const auto ids = batch->field("id");
      for (int64_t r = 0; r < batch->size(); ++r) {
        const int64_t id = ids.as<int64_t>()[r];
        ASSERT_GE(id, 0);
        ASSERT_LT(id, rows);
        ++seen[static_cast<size_t>(id)];
        check_row(*batch, r, id);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    for (int64_t id = 0; id < rows; ++id) {
      ASSERT_EQ(seen[static_cast<size_t>(id)], 1) << "epoch " << epoch << " id " << id;
    }
  }
}

}  // namespace gpufeed
