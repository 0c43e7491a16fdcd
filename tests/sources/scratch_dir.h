// A temporary folder for one test, removed with everything in it when the test ends.
// Thread-safety: one test thread.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace gpufeed::testing {

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gpufeed-test-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  // `name` inside the folder; makes the sub-folders it names.
  std::string Path(std::string_view name) const {
    auto p = std::filesystem::path(path_) / name;
    std::filesystem::create_directories(p.parent_path());
    return p.string();
  }
  // Writes `bytes` to `name` and returns its path.
  std::string Write(std::string_view name, std::string_view bytes) const {
    const std::string p = Path(name);
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

 private:
  std::string path_;
};

}  // namespace gpufeed::testing
