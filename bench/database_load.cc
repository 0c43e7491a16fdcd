// database_load: load a database table or query with gpufeed (OpenDatabase), then run epochs
// from memory through the loader, as training would. Prints one JSON line with the load time
// and samples/s per epoch; bench/database_vs_psycopg2.py runs it beside a psycopg2 loop.
//
//   bench_database_load URI [--batch 256] [--epochs 3] [--workers 0] [--cache none|ram|shm]
//
//   bench_database_load 'postgresql:///bench?host=/tmp/pg&table=samples&key=id'

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/database.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Load a database with gpufeed and time epochs from memory"};
  std::string uri;
  int64_t batch = 256;
  int epochs = 3;
  int workers = 0;
  std::string cache = "none";
  app.add_option("uri", uri, "sqlite:PATH?query=... or postgresql://...")->required();
  app.add_option("--batch", batch, "batch size");
  app.add_option("--epochs", epochs, "epochs after the load");
  app.add_option("--workers", workers, "loader workers (0 = default)");
  app.add_option("--cache", cache, "cache tier in front of the loaded table");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto load_start = Clock::now();
    std::shared_ptr<gpufeed::Source> source = gpufeed::OpenDatabase(uri);
    const double load_s = Seconds(load_start);
    if (cache != "none") {
      source = gpufeed::OpenCached(source, {.tier = gpufeed::ParseCacheTier(cache), .verbose = false});
    }
    gpufeed::Loader loader(source, {.batch_size = batch, .shuffle = true, .workers = workers});
    std::vector<double> rates;
    int64_t checksum = 0;
    for (int e = 0; e < epochs; ++e) {
      const auto start = Clock::now();
      int64_t samples = 0;
      while (auto b = loader.Next()) {
        samples += b->size();
        checksum += static_cast<int64_t>(*static_cast<const unsigned char*>(b->field(0).data));
      }
      rates.push_back(static_cast<double>(samples) / Seconds(start));
    }
    const nlohmann::json out = {{"rows", source->size()},
                                {"load_s", load_s},
                                {"samples_per_s", rates},
                                {"source", source->Describe()},
                                {"checksum", checksum}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const gpufeed::Error& e) {
    std::fprintf(stderr, "bench_database_load: %s\n", e.what());
    return 1;
  }
}
