// libFuzzer target: PostgreSQL binary COPY output parsed by PgCopyParser. The first input byte
// picks the columns (scalars, arrays, a declared array shape) and how the stream is split into
// messages; the rest is the stream.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpufeed/error.h"
#include "sources/db/postgres_copy.h"

namespace {

gpufeed::PgColumn Column(const char* name, uint32_t oid,
                         std::optional<std::vector<int64_t>> declared = std::nullopt) {
  gpufeed::PgColumn c;
  c.name = name;
  c.type_oid = oid;
  c.type_name = "fuzz";
  c.dtype = *gpufeed::PgTypeToDType(oid, &c.is_array, &c.element_oid);
  c.declared_shape = std::move(declared);
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t choice = data[0];
  std::vector<gpufeed::PgColumn> columns;
  switch (choice % 4) {
    case 0:
      columns = {Column("x", 23), Column("y", 701)};  // int4, float8
      break;
    case 1:
      columns = {Column("a", 1021), Column("label", 20)};  // real[], int8
      break;
    case 2:
      columns = {Column("a", 1021, std::vector<int64_t>{2, 3})};  // real[] reshaped to [2,3]
      break;
    default:
      columns = {Column("b", 1000), Column("c", 1016), Column("d", 1005)};  // bool, int8[], int2[]
      break;
  }
  const size_t split = 1 + (choice >> 2) * 3;  // 1..190 bytes per Feed
  const char* p = reinterpret_cast<const char*>(data + 1);
  size_t left = size - 1;
  try {
    gpufeed::PgCopyParser parser(columns, "fuzz", "");
    while (left > 0) {
      const size_t n = std::min(split, left);
      parser.Feed(p, n);
      p += n;
      left -= n;
    }
    parser.Finish();
    gpufeed::ColumnTable table = parser.Take();
    // What the parser hands on must be consistent: rows x the field's bytes per column.
    for (size_t f = 0; f < table.fields.size(); ++f) {
      if (table.data[f].size() != static_cast<size_t>(table.rows) * table.fields[f].SampleBytes()) {
        __builtin_trap();
      }
    }
  } catch (const gpufeed::Error&) {
  }
  return 0;
}
