// A C++ program that reads folders of .npy files and nothing else: it links the loader
// (gpufeed_pipeline) and the always-built sources, so none of the optional parts' libraries
// (libhdf5, SQLite, libpq, libcurl, libjpeg, libpng) is linked. OpenPath still classifies
// every path: an HDF5 file or an s3:// URI is refused, naming the part this program lacks.
// The tree builds it as examples/numpy_only; run it with a folder holding one .npy per field:
//
//   examples/numpy_only DATA_DIR [BATCH_SIZE]
//
// It reads one epoch, shuffled, and prints the batch count and the rows read.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s DATA_DIR [BATCH_SIZE]\n", argv[0]);
    return 2;
  }
  try {
    gpufeed::LoaderOptions options;
    options.batch_size = argc == 3 ? std::atoi(argv[2]) : 256;
    options.shuffle = true;
    gpufeed::Loader loader(gpufeed::OpenPath(argv[1], {}), options);
    int64_t batches = 0, rows = 0;
    while (auto batch = loader.Next()) {
      ++batches;
      rows += batch->size();
    }
    std::printf("%lld batches, %lld rows\n", static_cast<long long>(batches),
                static_cast<long long>(rows));
    return 0;
  } catch (const gpufeed::Error& e) {
    std::fprintf(stderr, "numpy_only: %s\n", e.what());
    return 1;
  }
}
