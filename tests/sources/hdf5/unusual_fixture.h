// The files make_unusual_hdf5.py writes (once per build tree), for the suites that read them:
// a test class derives from UnusualHdf5Files and names a file with Path("case").
// Thread-safety: set up on the main test thread; read-only afterwards.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "sources/hdf5/fixture.h"

namespace gpufeed::testing {

class UnusualHdf5Files : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = SharedScriptOutput("hdf5_unusual", GPUFEED_UNUSUAL_HDF5_SCRIPT, &error_);
    have_h5py_ = !dir_.empty() || HaveH5py();
  }
  void SetUp() override {
    if (!have_h5py_) GTEST_SKIP() << "Debian's h5py (/usr/bin/python3) is unavailable";
    ASSERT_FALSE(dir_.empty()) << error_;
  }
  static std::string Path(const std::string& name) { return dir_ + "/" + name + ".h5"; }

  static inline std::string dir_;
  static inline std::string error_;
  static inline bool have_h5py_ = false;
};

}  // namespace gpufeed::testing
