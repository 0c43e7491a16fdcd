// The HDF5 test files (hdf5_test_files.h), written once per build tree (SharedFixtureDir).
// Thread-safety: set up on the main test thread; read-only afterwards.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "sources/hdf5/test_files.h"
#include "sources/scratch_dir.h"

namespace gpufeed::testing {

class Hdf5Files {
 public:
  // The files, or null when h5py is unavailable (tests then GTEST_SKIP).
  static const Hdf5Files* Get() {
    static std::unique_ptr<Hdf5Files> files = Make();
    return files.get();
  }

  const std::string& dir() const { return dir_; }
  std::string File(const std::string& name) const { return dir_ + "/" + name + ".h5"; }
  // What h5py reads from `dataset` of case `name`.
  std::string Expected(const std::string& name, std::string dataset) const {
    if (dataset.starts_with('/')) dataset.erase(0, 1);
    for (auto& c : dataset) c = c == '/' ? '_' : c;
    return ReadWholeFile(dir_ + "/" + name + "." + dataset + ".bin");
  }
  const nlohmann::json& manifest() const { return manifest_; }

 private:
  static std::unique_ptr<Hdf5Files> Make() {
    auto files = std::make_unique<Hdf5Files>();
    std::string error;
    // Asking for h5py costs a Python start-up: only when the files could not be written.
    files->dir_ = SharedPythonOutput("hdf5_cases", kMakeHdf5Cases, &error);
    if (files->dir_.empty()) {
      if (!HaveH5py()) return nullptr;
      ADD_FAILURE() << "h5py could not write the test files: " << error;
      return nullptr;
    }
    files->manifest_ = nlohmann::json::parse(ReadWholeFile(files->dir_ + "/manifest.json"));
    return files;
  }

  std::string dir_;
  nlohmann::json manifest_;
};

#define GPUFEED_REQUIRE_HDF5_FILES(files)                                            \
  const ::gpufeed::testing::Hdf5Files* files = ::gpufeed::testing::Hdf5Files::Get(); \
  if (files == nullptr) GTEST_SKIP() << "Debian's h5py (/usr/bin/python3) is unavailable"

}  // namespace gpufeed::testing
