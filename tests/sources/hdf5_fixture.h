// The HDF5 test files (hdf5_test_files.h), written once per test binary.
// Thread-safety: set up on the main test thread; read-only afterwards.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "sources/hdf5_test_files.h"
#include "sources/scratch_dir.h"

namespace gpufeed::testing {

class Hdf5Files {
 public:
  // The files, or null when h5py is unavailable (tests then GTEST_SKIP).
  static const Hdf5Files* Get() {
    static std::unique_ptr<Hdf5Files> files = Make();
    return files.get();
  }

  const std::string& dir() const { return dir_.path(); }
  std::string File(const std::string& name) const { return dir_.path() + "/" + name + ".h5"; }
  // What h5py reads from `dataset` of case `name`.
  std::string Expected(const std::string& name, std::string dataset) const {
    if (dataset.starts_with('/')) dataset.erase(0, 1);
    for (auto& c : dataset) c = c == '/' ? '_' : c;
    return ReadWholeFile(dir_.path() + "/" + name + "." + dataset + ".bin");
  }
  const nlohmann::json& manifest() const { return manifest_; }

 private:
  static std::unique_ptr<Hdf5Files> Make() {
    if (!HaveH5py()) return nullptr;
    auto files = std::make_unique<Hdf5Files>();
    if (!RunPython(files->dir(), "make_cases.py", kMakeHdf5Cases, files->dir())) {
      ADD_FAILURE() << "h5py could not write the test files: "
                    << ReadWholeFile(files->dir() + "/make_cases.py.log");
      return nullptr;
    }
    files->manifest_ = nlohmann::json::parse(ReadWholeFile(files->dir() + "/manifest.json"));
    return files;
  }

  ScratchDir dir_;
  nlohmann::json manifest_;
};

#define GPUFEED_REQUIRE_HDF5_FILES(files)                                            \
  const ::gpufeed::testing::Hdf5Files* files = ::gpufeed::testing::Hdf5Files::Get(); \
  if (files == nullptr) GTEST_SKIP() << "Debian's h5py (/usr/bin/python3) is unavailable"

}  // namespace gpufeed::testing
