// The PostgreSQL source against a private server (database_pg_server.h).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "gpufeed/database.h"
#include "gpufeed/error.h"
#include "gpufeed/loader.h"
#include "sources/db/pg_server.h"
#include "sources/every_row_once.h"
#include "sources/numpy/npy_test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::PgServer;

constexpr int kRows = 1000;

// Runs SQL on the test server; fails the test on error.
void Sql(const std::string& sql) {
  PGconn* conn = PQconnectdb(PgServer().conninfo.c_str());
  ASSERT_EQ(PQstatus(conn), CONNECTION_OK) << PQerrorMessage(conn);
  PGresult* r = PQexec(conn, sql.c_str());
  const auto status = PQresultStatus(r);
  EXPECT_TRUE(status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) << PQerrorMessage(conn);
  PQclear(r);
  PQfinish(conn);
}

float Feature(int64_t id, int i, int j) { return static_cast<float>(id) * 0.5f + i * 10 + j; }

class PostgresSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GPUFEED_REQUIRE_PG_SERVER();
    static bool created = false;
    if (!created) {
      // Ids in a shuffled order on disk, so "in key order" is something COPY must be told.
      Sql(fmt::format(R"(
        SET client_min_messages = warning;
        DROP TABLE IF EXISTS samples;
        CREATE TABLE samples AS
        SELECT g::int8 AS id,
               ARRAY(SELECT ARRAY(SELECT (g * 0.5 + i * 10 + j)::real
                                  FROM generate_series(0, 4) j)
                     FROM generate_series(0, 6) i) AS features,
               (g % 10)::int4 AS label, (g * 0.25)::float8 AS weight, (g % 2 = 0) AS even,
               (g % 300)::int2 AS small
        FROM generate_series(0, {}) g ORDER BY md5(g::text);
        ALTER TABLE samples ADD PRIMARY KEY (id);)",
                      kRows - 1));
      created = true;
    }
  }
  const std::string& conninfo() const { return PgServer().conninfo; }
};

// Every field of row `r` of `source` read back, checked against the table's formula.
void ExpectRowsMatch(const Source& source, const std::vector<int64_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<int64_t> got_ids(n);
  std::vector<float> features(n * 35);
  std::vector<int32_t> labels(n);
  std::vector<int64_t> rows(n);
  for (int64_t i = 0; i < n; ++i) rows[i] = i;
  const Schema& schema = source.schema();
  BatchView view{.fields = std::vector<std::byte*>(schema.fields.size()), .rows = n};
  std::vector<std::vector<std::byte>> other(schema.fields.size());
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    const std::string& name = schema.fields[f].name;
    if (name == "id")
      view.fields[f] = reinterpret_cast<std::byte*>(got_ids.data());
    else if (name == "features")
      view.fields[f] = reinterpret_cast<std::byte*>(features.data());
    else if (name == "label")
      view.fields[f] = reinterpret_cast<std::byte*>(labels.data());
    else {
      other[f].resize(n * schema.fields[f].SampleBytes());
      view.fields[f] = other[f].data();
    }
  }
  source.Read(rows, view, nullptr);
  // A source without the key as a field is checked by the rest, a function of the id.
  const bool has_id = schema.IndexOf("id") >= 0;
  for (int64_t i = 0; i < n; ++i) {
    if (has_id) {
      ASSERT_EQ(got_ids[i], ids[i]) << "row " << i;
    }
    ASSERT_EQ(labels[i], ids[i] % 10) << "row " << i;
    for (int k = 0; k < 35; ++k) {
      ASSERT_EQ(features[i * 35 + k], Feature(ids[i], k / 5, k % 5)) << "row " << i;
    }
  }
}

TEST_F(PostgresSourceTest, MapsColumnTypesToFields) {
  const auto source = OpenPostgres(conninfo(), {.table = "samples"});
  EXPECT_EQ(source->size(), kRows);
  EXPECT_EQ(source->schema().ToString(), (Schema{{{"id", DType::kInt64, {}},
                                                  {"features", DType::kFloat32, {7, 5}},
                                                  {"label", DType::kInt32, {}},
                                                  {"weight", DType::kFloat64, {}},
                                                  {"even", DType::kBool, {}},
                                                  {"small", DType::kInt16, {}}}})
                                             .ToString());
  EXPECT_THAT(source->Describe(), AllOf(HasSubstr("postgresql"), HasSubstr("1000 samples")));
  // Scalars of every width come back in host byte order.
  int64_t id;
  float features[35];
  int32_t label;
  double weight;
  bool even;
  int16_t small;
  source->Read(
      std::vector<int64_t>{0},
      {.fields = {reinterpret_cast<std::byte*>(&id), reinterpret_cast<std::byte*>(features),
                  reinterpret_cast<std::byte*>(&label), reinterpret_cast<std::byte*>(&weight),
                  reinterpret_cast<std::byte*>(&even), reinterpret_cast<std::byte*>(&small)},
       .rows = 1},
      nullptr);
  EXPECT_EQ(label, id % 10);
  EXPECT_EQ(weight, id * 0.25);
  EXPECT_EQ(even, id % 2 == 0);
  EXPECT_EQ(small, id % 300);
  EXPECT_EQ(features[34], Feature(id, 6, 4));
}

TEST_F(PostgresSourceTest, LoaderDeliversEveryRowOncePerEpochEqualToTheTable) {
  const auto source =
      OpenPostgres(conninfo(), {.table = "samples", .columns = {"id", "features", "label"}});
  Loader loader(source, {.batch_size = 64, .shuffle = true, .seed = 7, .workers = 3});
  ExpectEveryRowOncePerEpoch(loader, kRows, 2, [](const Batch& batch, int64_t r, int64_t id) {
    ASSERT_EQ(batch.field("label").as<int32_t>()[r], id % 10);
    const auto features = batch.field("features").as<float>();
    for (int k = 0; k < 35; ++k) ASSERT_EQ(features[r * 35 + k], Feature(id, k / 5, k % 5));
  });
}

TEST_F(PostgresSourceTest, SplitsByKeyRangesOverConnectionsInKeyOrder) {
  const auto source = OpenPostgres(
      conninfo(), {.query = "SELECT id, features, label FROM samples WHERE id % 3 <> 0;",
                   .key = "id",
                   .connections = 3});
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < kRows; ++id) {
    if (id % 3 != 0) ids.push_back(id);
  }
  ASSERT_EQ(source->size(), static_cast<int64_t>(ids.size()));
  EXPECT_EQ(source->schema().IndexOf("id"), -1);  // the key orders the rows; no field
  ExpectRowsMatch(*source, ids);
}

TEST_F(PostgresSourceTest, ACursorLoadsWhatCopyLoads) {
  const std::string query = "SELECT id, features, label FROM samples ORDER BY id";
  const auto copied = OpenPostgres(conninfo(), {.query = query});
  const auto fetched = OpenPostgres(conninfo(), {.query = query, .cursor = true});
  EXPECT_EQ(fetched->schema(), copied->schema());
  EXPECT_EQ(fetched->Identity(), copied->Identity());  // the same bytes
  std::vector<int64_t> ids(kRows);
  for (int64_t i = 0; i < kRows; ++i) ids[i] = i;
  ExpectRowsMatch(*fetched, ids);
  // Key ranges over several connections, each its own cursor in the shared snapshot.
  ExpectRowsMatch(*OpenDatabase(fmt::format("postgresql:///postgres?host={}&port={}&user=postgres"
                                            "&query={}&key=id&connections=3&cursor=1",
                                            PgServer().socket_dir, PgServer().port, query)),
                  ids);
  // The same errors, named the same way.
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenPostgres(conninfo(),
                               {.query = "SELECT g::int8 AS id, (100 / (g - 9000))::int4 "
                                         "AS x FROM generate_series(1, 10000) g",
                                .cursor = true});
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("division by zero"), HasSubstr("after 8192 rows")));
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenPostgres(conninfo(), {.query = "SELECT CASE WHEN g = 3 THEN NULL ELSE g END"
                                                     "::int4 AS x FROM generate_series(0, 9) g",
                                            .cursor = true});
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 3"), HasSubstr("column 'x'"), HasSubstr("NULL")));
}

TEST_F(PostgresSourceTest, OpensAUriWithGpufeedParameters) {
  const auto source = OpenDatabase(fmt::format(
      "postgresql:///postgres?host={}&port={}&user=postgres&table=samples&columns=id,features,"
      "label&key=id&connections=2&fields=features:float32[35]",
      PgServer().socket_dir, PgServer().port));
  EXPECT_EQ(source->schema().Field("features").shape, std::vector<int64_t>{35});
  std::vector<int64_t> ids(kRows);
  for (int64_t i = 0; i < kRows; ++i) ids[i] = i;
  ExpectRowsMatch(*source, ids);
}

TEST_F(PostgresSourceTest, IdentityNamesTheDataButNotThePassword) {
  const auto a = OpenPostgres(conninfo() + " password=not-needed-secret",
                              {.query = "SELECT id, label FROM samples ORDER BY id"});
  const auto b = OpenPostgres(conninfo(), {.query = "SELECT id, label FROM samples ORDER BY id"});
  EXPECT_THAT(a->Identity(), Not(HasSubstr("not-needed-secret")));
  EXPECT_THAT(a->Describe(), Not(HasSubstr("not-needed-secret")));
  EXPECT_EQ(a->Identity(), b->Identity());
  const auto c = OpenPostgres(conninfo(), {.query = "SELECT id, label + 1 AS label FROM samples "
                                                    "ORDER BY id"});
  EXPECT_NE(a->Identity(), c->Identity());
}

TEST_F(PostgresSourceTest, ServerDownIsAnIoError) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenPostgres("host=/nonexistent-gpufeed-dir port=5 user=x",
                               {.query = "SELECT 1"});
                },
                &message),
            ErrorCode::kIo);
  EXPECT_THAT(message, HasSubstr("cannot connect"));
  // A TCP port with nothing listening.
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenPostgres(fmt::format("host=127.0.0.1 port=1 connect_timeout=5 user=x "
                                           "password=tcp-secret"),
                               {.query = "SELECT 1"});
                },
                &message),
            ErrorCode::kIo);
  EXPECT_THAT(message, Not(HasSubstr("tcp-secret")));
}

TEST_F(PostgresSourceTest, WrongPasswordIsRefusedAndNeverPrinted) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenPostgres(fmt::format("host=127.0.0.1 port={} user=gpufeed dbname=postgres "
                                           "password=wrong-hunter2",
                                           PgServer().port),
                               {.query = "SELECT 1::int8 AS x"});
                },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message,
              AllOf(HasSubstr("password authentication failed"), Not(HasSubstr("wrong-hunter2"))));
  // The right password from the URI works, and PGPASSWORD is scrubbed like the string.
  const auto source = OpenDatabase(fmt::format(
      "postgresql://gpufeed:gpufeed-test@127.0.0.1:{}/postgres?query=SELECT%201::int8%20AS%20x",
      PgServer().port));
  EXPECT_EQ(source->size(), 1);
  EXPECT_THAT(source->Describe() + source->Identity(), Not(HasSubstr("gpufeed-test")));
  // A connection string libpq cannot parse is not quoted back.
  EXPECT_EQ(
      ErrorCodeOf([&] { OpenPostgres("host=x password=hunter2 junk", {.query = "SELECT 1"}); },
                  &message),
      ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, Not(HasSubstr("hunter2")));
}

TEST_F(PostgresSourceTest, CredentialsFromPgpasswordAndPgpassAreNeverPrinted) {
  const std::string tcp =
      fmt::format("host=127.0.0.1 port={} user=gpufeed dbname=postgres", PgServer().port);
  const DatabaseOptions query{.query = "SELECT 1::int8 AS x"};
  std::string message;
  setenv("PGPASSWORD", "gpufeed-test", 1);
  EXPECT_EQ(OpenPostgres(tcp, query)->size(), 1);
  setenv("PGPASSWORD", "env-wrong-secret", 1);
  EXPECT_EQ(ErrorCodeOf([&] { OpenPostgres(tcp, query); }, &message), ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, Not(HasSubstr("env-wrong-secret")));
  unsetenv("PGPASSWORD");
  // ~/.pgpass, here through PGPASSFILE: libpq reads it itself.
  testing::ScratchDir scratch;
  const std::string pgpass = scratch.Write(
      "pgpass", fmt::format("127.0.0.1:{}:postgres:gpufeed:gpufeed-test\n", PgServer().port));
  chmod(pgpass.c_str(), 0600);  // libpq ignores a password file others can read
  setenv("PGPASSFILE", pgpass.c_str(), 1);
  const auto source = OpenPostgres(tcp, query);
  unsetenv("PGPASSFILE");
  EXPECT_EQ(source->size(), 1);
  EXPECT_THAT(source->Describe() + source->Identity(), Not(HasSubstr("gpufeed-test")));
}

TEST_F(PostgresSourceTest, QueryErrorsNameTheQuery) {
  std::string message;
  EXPECT_EQ(
      ErrorCodeOf([&] { OpenPostgres(conninfo(), {.query = "SELEC id FROM samples"}); }, &message),
      ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, AllOf(HasSubstr("syntax error"), HasSubstr("SELEC id FROM samples")));
  EXPECT_EQ(ErrorCodeOf([&] { OpenPostgres(conninfo(), {.table = "no_such_table"}); }, &message),
            ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("no_such_table"));
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenPostgres(conninfo(), {.table = "samples", .columns = {"id", "nope"}});
                },
                &message),
            ErrorCode::kNotFound);
  EXPECT_EQ(ErrorCodeOf(
                [&] { OpenPostgres(conninfo(), {.query = "SELECT id FROM samples WHERE false"}); },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("no rows"));
}

TEST_F(PostgresSourceTest, ErrorInALaterRowServesNothing) {
  // Rows 1..4999 stream first; row 5000 divides by zero.
  for (const std::string& key : {std::string(), std::string("id")}) {
    std::string message;
    EXPECT_EQ(ErrorCodeOf(
                  [&] {
                    OpenPostgres(conninfo(),
                                 {.query = "SELECT g::int8 AS id, (100 / (g - 5000))::int4 AS x "
                                           "FROM generate_series(1, 10000) g",
                                  .key = key});
                  },
                  &message),
              ErrorCode::kCorruptData);
    EXPECT_THAT(message, HasSubstr("division by zero"));
  }
}

TEST_F(PostgresSourceTest, ConnectionDroppedMidLoadServesNothing) {
  // A COPY slowed down by a sleep per row, terminated from another connection once it runs.
  std::atomic<bool> done{false};
  ErrorCode code = ErrorCode::kCancelled;
  std::string message;
  std::thread load([&] {
    code = ErrorCodeOf(
        [&] {
          OpenPostgres(conninfo() + " application_name=gpufeed-victim",
                       {.query = "SELECT g::int8 AS id FROM generate_series(1, 3000) g "
                                 "WHERE pg_sleep(0.002)::text = ''"});
        },
        &message);
    done = true;
  });
  PGconn* admin = PQconnectdb(conninfo().c_str());
  ASSERT_EQ(PQstatus(admin), CONNECTION_OK);
  bool terminated = false;
  for (int i = 0; i < 1000 && !done && !terminated; ++i) {
    PGresult* r = PQexec(admin,
                         "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                         "application_name = 'gpufeed-victim' AND query LIKE 'COPY%' "
                         "AND state = 'active'");
    terminated = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0;
    PQclear(r);
    if (!terminated) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  PQfinish(admin);
  load.join();
  ASSERT_TRUE(terminated) << "the load ended before it could be terminated";
  EXPECT_EQ(code, ErrorCode::kIo) << message;
  // libpq reports the server's FATAL when it reads it before the socket closes, else the
  // closed socket (a loaded machine decides which).
  EXPECT_THAT(message, AnyOf(HasSubstr("terminating connection"),
                             HasSubstr("server closed the connection")));
}

TEST_F(PostgresSourceTest, NullsNameTheRowAndColumn) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenPostgres(conninfo(),
                               {.query = "SELECT g::int8 AS id, CASE WHEN g = 7 THEN NULL "
                                         "ELSE g END::int4 AS x FROM generate_series(0, 9) g"});
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 7"), HasSubstr("column 'x'"), HasSubstr("NULL")));
  EXPECT_EQ(ErrorCodeOf(
                [&] { OpenPostgres(conninfo(), {.query = "SELECT ARRAY[1, NULL]::int4[] AS v"}); },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message,
              AllOf(HasSubstr("row 0"), HasSubstr("column 'v'"), HasSubstr("NULL at element 1")));
}

TEST_F(PostgresSourceTest, RaggedArraysNameTheRowAndColumn) {
  const std::string query =
      "SELECT g::int8 AS id, CASE WHEN g < 5 THEN ARRAY[1, 2]::real[] ELSE ARRAY[1, 2, 3]::real[] "
      "END AS v FROM generate_series(0, 9) g";
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenPostgres(conninfo(), {.query = query}); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("row 5"), HasSubstr("column 'v'"), HasSubstr("ragged"),
                             HasSubstr("[3]"), HasSubstr("[2]")));
  // Split so that each connection sees one shape: the merge finds it.
  EXPECT_EQ(ErrorCodeOf(
                [&] { OpenPostgres(conninfo(), {.query = query, .key = "id", .connections = 2}); },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, AllOf(HasSubstr("column 'v'"), HasSubstr("ragged")));
  // A declared shape checks the element count in every row.
  EXPECT_EQ(
      ErrorCodeOf(
          [&] {
            OpenPostgres(conninfo(), {.query = query, .fields = {{"v", DType::kFloat32, {2, 1}}}});
          },
          &message),
      ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("row 5"));
}

TEST_F(PostgresSourceTest, UnsupportedColumnTypesNameTheColumnAndType) {
  std::string message;
  EXPECT_EQ(
      ErrorCodeOf(
          [&] { OpenPostgres(conninfo(), {.query = "SELECT 1::int8 AS id, 'a'::text AS name"}); },
          &message),
      ErrorCode::kUnsupported);
  EXPECT_THAT(message, AllOf(HasSubstr("column 'name'"), HasSubstr("type text")));
  EXPECT_EQ(
      ErrorCodeOf([&] { OpenPostgres(conninfo(), {.query = "SELECT 1.5::numeric(4,2) AS price"}); },
                  &message),
      ErrorCode::kUnsupported);
  EXPECT_THAT(message, AllOf(HasSubstr("column 'price'"), HasSubstr("numeric")));
  // A declared dtype that is not the column's asks for a cast.
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenPostgres(conninfo(), {.query = "SELECT 1::int4 AS x",
                                            .fields = {{"x", DType::kFloat32, {}}}});
                },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("cast"));
}

}  // namespace
}  // namespace gpufeed
