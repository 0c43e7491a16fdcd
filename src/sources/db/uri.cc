// OpenDatabase: the URI spelling of the database sources, for the CLI and Python.
#include "sources/db/uri.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <string_view>

#include "core/text.h"
#include "gpufeed/database.h"
#include "gpufeed/error.h"
#include "sources/families.h"

namespace gpufeed {
namespace {

std::string PercentDecode(std::string_view text, std::string_view parameter) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    // Exactly two hex digits: from_chars alone would take "%-1" (a sign) as -1 = byte 0xFF.
    int value = 0;
    if (i + 2 >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(text[i + 2])) ||
        std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16).ptr !=
            text.data() + i + 3) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("database URI: parameter '{}' has a bad %-escape at character {}",
                              parameter, i));
    }
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

// The non-empty parts between commas.
std::vector<std::string> SplitCommas(std::string_view text) {
  std::vector<std::string> parts;
  for (const std::string_view part : Split(text, ',')) {
    if (!part.empty()) parts.emplace_back(part);
  }
  return parts;
}

// "x:float32=f*;y=label": fields separated by ';', each FIELD[:DTYPE]=COLUMNS, where COLUMNS
// is one column (the field as is), or a pattern or a comma-separated list (stacked).
std::vector<StackedField> ParseSelect(std::string_view text) {
  std::vector<StackedField> select;
  for (const std::string_view part : Split(text, ';')) {
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == part.size()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("database URI: select part '{}'; expected FIELD[:DTYPE]=COLUMNS "
                              "(x:float32=f*;y=label)",
                              part));
    }
    StackedField field;
    std::string_view head = part.substr(0, eq);
    const size_t colon = head.find(':');
    if (colon != std::string_view::npos) {
      const auto dtype = ParseDType(head.substr(colon + 1));
      if (!dtype) {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("database URI: select part '{}': unknown dtype '{}'", part,
                                head.substr(colon + 1)));
      }
      field.dtype = *dtype;
      head = head.substr(0, colon);
    }
    field.name = std::string(head);
    const std::string_view columns = part.substr(eq + 1);
    field.columns = SplitCommas(columns);
    field.stack = field.columns.size() > 1 || columns.find_first_of("*?[") != std::string::npos;
    select.push_back(std::move(field));
  }
  return select;
}

// Takes gpufeed's parameters out of `params` ("a=1&b=2") into `options`; returns the rest.
std::string TakeOptions(std::string_view params, DatabaseOptions& options) {
  std::string rest;
  while (!params.empty()) {
    const size_t amp = params.find('&');
    const std::string_view pair = params.substr(0, amp);
    params = amp == std::string_view::npos ? std::string_view() : params.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    const std::string_view name = pair.substr(0, eq);
    const std::string value =
        eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1), name);
    if (name == "query") {
      options.query = value;
    } else if (name == "table") {
      options.table = value;
    } else if (name == "columns") {
      options.columns = SplitCommas(value);
    } else if (name == "key") {
      options.key = value;
    } else if (name == "connections") {
      const std::optional<int> n = ParseNumber<int>(value);
      if (!n) {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("database URI: connections={} is not a number", value));
      }
      options.connections = *n;
    } else if (name == "cursor") {
      if (value != "0" && value != "1") {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("database URI: cursor={}; expected 0 or 1", value));
      }
      options.cursor = value == "1";
    } else if (name == "fields") {
      options.fields = ParseSchema(value).fields;
    } else if (name == "select") {
      options.select = ParseSelect(value);
    } else {
// g++ 12 warns -Wrestrict on `"literal" + std::string` inside libstdc++ (a false positive,
// GCC bug 105329); silenced for this line only.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no -Wrestrict
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
      rest += (rest.empty() ? "" : "&") + std::string(pair);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
    }
  }
  return rest;
}

bool StartsWith(const std::string& text, std::string_view prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

bool IsDatabaseUri(const std::string& uri) {
  return StartsWith(uri, "sqlite:") || StartsWith(uri, "postgresql:") ||
         StartsWith(uri, "postgres:");
}

DatabaseUriParts ParseDatabaseUri(const std::string& uri, DatabaseOptions options) {
  const size_t question = uri.find('?');
  const std::string base = uri.substr(0, question);
  const std::string params =
      question == std::string::npos ? std::string() : uri.substr(question + 1);
  DatabaseUriParts parts;
  if (StartsWith(uri, "sqlite:")) {
    std::string path = base.substr(std::string_view("sqlite:").size());
    if (StartsWith(path, "//")) path = path.substr(2);  // sqlite:///abs/path -> /abs/path
    const std::string rest = TakeOptions(params, options);
    if (!rest.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("database URI sqlite:{}: unknown parameters '{}'; expected query, "
                              "table, columns, key, fields, select",
                              path, rest));
    }
    if (path.empty()) {
      throw Error(ErrorCode::kInvalidArgument, "database URI sqlite: names no file");
    }
    parts.kind = DatabaseUriParts::Kind::kSqlite;
    parts.target = PercentDecode(path, "path");
  } else if (StartsWith(uri, "postgresql:") || StartsWith(uri, "postgres:")) {
    const std::string rest = TakeOptions(params, options);
    parts.kind = DatabaseUriParts::Kind::kPostgres;
    parts.target = rest.empty() ? base : base + "?" + rest;
  } else {
    // Not a URI of ours: say what it is without echoing it (it may hold a password).
    throw Error(ErrorCode::kInvalidArgument,
                "database URI: expected sqlite:PATH, postgresql://... or postgres://...");
  }
  parts.options = std::move(options);
  return parts;
}

std::shared_ptr<Source> OpenDatabase(const std::string& uri, DatabaseOptions options) {
  DatabaseUriParts parts = ParseDatabaseUri(uri, std::move(options));
  if (parts.kind == DatabaseUriParts::Kind::kSqlite) {
    return SourceFamilyOpeners(SourceFamily::kSqlite,
                               "sqlite:" + parts.target + ": a SQLite database")
        .database(parts.target, std::move(parts.options));
  }
  // The conninfo may hold a password: the refusal names only the kind of URI.
  return SourceFamilyOpeners(SourceFamily::kPostgres, "a PostgreSQL URI")
      .database(parts.target, std::move(parts.options));
}

}  // namespace gpufeed
