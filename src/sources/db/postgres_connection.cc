#include "sources/db/postgres_connection.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <regex>

#include "core/text.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// SQLSTATE classes (https://www.postgresql.org/docs/current/errcodes-appendix.html).
ErrorCode CodeForSqlState(std::string_view state, bool connection_ok) {
  if (state == "42P01" || state == "42703" || state == "42883" || state == "3D000" ||
      state == "3F000") {
    return ErrorCode::kNotFound;  // undefined table, column, function, database, schema
  }
  if (state.starts_with("28")) return ErrorCode::kInvalidArgument;  // credentials
  if (state.starts_with("22")) return ErrorCode::kCorruptData;      // data exception
  if (state.starts_with("08") || state.starts_with("57") || !connection_ok) {
    return ErrorCode::kIo;  // connection exception, operator intervention
  }
  return ErrorCode::kInvalidArgument;  // syntax, permissions, bad statement
}

}  // namespace

PgTarget PgTarget::Parse(const std::string& conninfo) {
  PgTarget target;
  target.conninfo = conninfo;
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
  if (options == nullptr) {
    // libpq quotes the part it could not parse, which may be the password: drop quoted text.
    std::string why = error != nullptr ? std::string(Trim(error)) : "out of memory";
    PQfreemem(error);
    why = std::regex_replace(why, std::regex("\"[^\"]*\""), "\"...\"");
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("postgresql: malformed connection string (not shown: it may hold a "
                            "password): {}",
                            why));
  }
  std::string description = "postgresql";
  for (const char* key : {"host", "hostaddr", "port", "dbname", "user"}) {
    for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
      if (std::strcmp(o->keyword, key) == 0 && o->val != nullptr && *o->val != '\0') {
        description += fmt::format(" {}={}", key, o->val);
      }
    }
  }
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (std::strcmp(o->keyword, "password") == 0 && o->val != nullptr && *o->val != '\0') {
      target.secrets.emplace_back(o->val);
    }
  }
  PQconninfoFree(options);
  if (const char* env = std::getenv("PGPASSWORD"); env != nullptr && *env != '\0') {
    target.secrets.emplace_back(env);
  }
  target.description = std::move(description);
  return target;
}

std::string PgTarget::Scrub(std::string message) const {
  for (const std::string& secret : secrets) {
    for (size_t at = message.find(secret); at != std::string::npos;
         at = message.find(secret, at + 3)) {
      message.replace(at, secret.size(), "***");
    }
  }
  return message;
}

PgConnection::PgConnection(const PgTarget& target) : target_(&target) {
  conn_ = PQconnectdb(target.conninfo.c_str());
  if (conn_ == nullptr) {
    throw Error(ErrorCode::kIo, fmt::format("{}: out of memory connecting", target.description));
  }
  if (PQstatus(conn_) != CONNECTION_OK) {
    const std::string why = target.Scrub(std::string(Trim(PQerrorMessage(conn_))));
    PQfinish(conn_);
    conn_ = nullptr;
    // libpq reports refused credentials only in words; everything else is reachability.
    const bool auth = why.find("password") != std::string::npos ||
                      why.find("authentication") != std::string::npos ||
                      why.find("role") != std::string::npos;
    throw Error(auth ? ErrorCode::kInvalidArgument : ErrorCode::kIo,
                fmt::format("{}: cannot connect: {}", target.description, why));
  }
}

PgConnection::~PgConnection() {
  if (conn_ != nullptr) PQfinish(conn_);
}

PgResult PgConnection::Exec(const std::string& sql, ExecStatusType want, std::string_view context) {
  PgResult result(PQexec(conn_, sql.c_str()));
  if (result == nullptr || PQresultStatus(result.get()) != want) {
    ThrowResultError(result.get(), context);
  }
  return result;
}

void PgConnection::ThrowResultError(const PGresult* result, std::string_view context) const {
  const bool connection_ok = PQstatus(conn_) == CONNECTION_OK;
  std::string why;
  std::string state;
  if (result != nullptr) {
    why = Trim(PQresultErrorMessage(result));
    if (const char* s = PQresultErrorField(result, PG_DIAG_SQLSTATE); s != nullptr) state = s;
  }
  if (why.empty()) why = Trim(PQerrorMessage(conn_));
  if (why.empty()) why = "unexpected reply from the server";
  if (!connection_ok) why += " (connection lost)";
  throw Error(CodeForSqlState(state, connection_ok),
              target_->Scrub(fmt::format("{}: {}: {}", target_->description, context, why)));
}

std::string PgConnection::QuoteIdentifier(const std::string& name) const {
  char* quoted = PQescapeIdentifier(conn_, name.c_str(), name.size());
  if (quoted == nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: bad identifier '{}'", target_->description, name));
  }
  std::string out(quoted);
  PQfreemem(quoted);
  return out;
}

}  // namespace gpufeed
