// libFuzzer target: the database URI parser (ParseDatabaseUri: %-decoding, parameters, the
// `fields=` schema). Only a gpufeed error may come out, and only kInvalidArgument.
#include <cstddef>
#include <cstdint>
#include <string>

#include "gpufeed/error.h"
#include "sources/db/uri.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string uri(reinterpret_cast<const char*>(data), size);
  try {
    const gpufeed::DatabaseUriParts parts = gpufeed::ParseDatabaseUri(uri, {});
    // A declared field's sizes fit: a fixed field's sample, a variable-length field's item.
    for (const auto& f : parts.options.fields) {
      (void)(f.variable() ? f.ItemBytes() : f.SampleBytes());
    }
  } catch (const gpufeed::Error& e) {
    if (e.code() != gpufeed::ErrorCode::kInvalidArgument) __builtin_trap();
  }
  return 0;
}
