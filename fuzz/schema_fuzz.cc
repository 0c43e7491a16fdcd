// libFuzzer target: ParseSchema, the schema spelling of the CLI, the synthetic source and the
// database URIs' `fields=`. What it accepts must have sizes that fit (a fixed-size field's
// SampleBytes, a variable-length field's ItemBytes never throw afterwards; SampleBytes of a
// variable-length field is always kUnsupported) and must survive a round trip through
// ToString.
#include <cstddef>
#include <cstdint>
#include <string>

#include "gpufeed/error.h"
#include "gpufeed/schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string spec(reinterpret_cast<const char*>(data), size);
  gpufeed::Schema schema;
  try {
    schema = gpufeed::ParseSchema(spec);
  } catch (const gpufeed::Error& e) {
    if (e.code() != gpufeed::ErrorCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  for (const auto& f : schema.fields) {
    if (!f.variable()) {
      (void)f.ElementsPerSample();  // must not throw: ParseSchema checked it
      (void)f.SampleBytes();
      continue;
    }
    (void)f.ItemBytes();
    try {
      (void)f.SampleBytes();
      __builtin_trap();  // a variable-length field has no size per sample
    } catch (const gpufeed::Error& e) {
      if (e.code() != gpufeed::ErrorCode::kUnsupported) __builtin_trap();
    }
  }
  if (!schema.HasVariable()) (void)schema.SampleBytes();
  // Names may hold characters the spelling uses (ToString does not quote), so a round trip
  // is only required to parse when the names are plain.
  bool plain = true;
  for (const auto& f : schema.fields) {
    plain = plain && f.name.find_first_of(",:[] \t\n\r\f\v") == std::string::npos;
  }
  if (plain && !(gpufeed::ParseSchema(schema.ToString()) == schema)) __builtin_trap();
  return 0;
}
