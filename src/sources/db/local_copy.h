// LocalCopy: a remote database file (sqlite:s3://bucket/train.db) copied to a private temporary
// file, because SQLite opens files by path; the copy is removed when the LocalCopy goes.
// Thread-safety: one thread.
#pragma once

#include <string>

namespace gpufeed {

class LocalCopy {
 public:
  // Copies `uri` (through DefaultFileSystem(), so the node's disk cache serves it where one is
  // on) into a new 0600 file under $TMPDIR (else /tmp). Throws the read's Error naming the
  // object, or Error(kIo) naming the temporary file when it cannot be written.
  explicit LocalCopy(const std::string& uri);
  ~LocalCopy();
  LocalCopy(const LocalCopy&) = delete;
  LocalCopy& operator=(const LocalCopy&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace gpufeed
