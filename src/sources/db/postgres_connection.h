// One libpq connection for the PostgreSQL source, with its errors mapped to gpufeed::Error and
// scrubbed of passwords.
//
// Thread-safety: a PgConnection is used by one thread at a time (libpq's rule); different
// connections may be used on different threads at once. PgTarget is an immutable value.
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gpufeed {

// Where to connect, and what may be said about it.
struct PgTarget {
  std::string conninfo;              // as the caller gave it; never printed
  std::string description;           // "postgresql host=db port=5432 dbname=train user=me"
  std::vector<std::string> secrets;  // passwords to scrub from every message

  // Throws Error(kInvalidArgument) for a connection string libpq cannot parse, without
  // quoting it (it may hold a password).
  static PgTarget Parse(const std::string& conninfo);
  // `message` with every secret replaced by "***".
  std::string Scrub(std::string message) const;
};

struct PgResultDeleter {
  void operator()(PGresult* result) const { PQclear(result); }
};
using PgResult = std::unique_ptr<PGresult, PgResultDeleter>;

class PgConnection {
 public:
  // Throws Error: kIo when the server cannot be reached, kInvalidArgument when it refuses
  // the credentials; the message names the target, never the password.
  explicit PgConnection(const PgTarget& target);
  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  PGconn* get() const { return conn_; }
  const PgTarget& target() const { return *target_; }

  // Runs `sql` and expects `want`; throws the server's error otherwise, prefixed by
  // `context` (see ThrowResultError).
  PgResult Exec(const std::string& sql, ExecStatusType want, std::string_view context);
  // Throws the error that `result` (may be null: the connection's own message) reports:
  // kNotFound for a missing table or column, kInvalidArgument for other statement errors,
  // kCorruptData for data exceptions (division by zero, overflow), kIo for a lost
  // connection or a terminated backend.
  [[noreturn]] void ThrowResultError(const PGresult* result, std::string_view context) const;

  // PQescapeIdentifier: `name` as a quoted SQL identifier.
  std::string QuoteIdentifier(const std::string& name) const;

 private:
  const PgTarget* target_;
  PGconn* conn_ = nullptr;
};

}  // namespace gpufeed
