// StoreAnswer: the words an error quotes a store's answer in.
#include "remote/store_answer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>
#include <vector>

#include "remote/uri.h"

namespace gpufeed::remote {
namespace {

// The reason phrases of RFC 9110 for the statuses a store answers with.
std::string_view StandardReason(long status) {
  static constexpr std::pair<long, std::string_view> kReasons[] = {
      {200, "OK"},
      {206, "Partial Content"},
      {301, "Moved Permanently"},
      {307, "Temporary Redirect"},
      {400, "Bad Request"},
      {401, "Unauthorized"},
      {403, "Forbidden"},
      {404, "Not Found"},
      {405, "Method Not Allowed"},
      {409, "Conflict"},
      {410, "Gone"},
      {412, "Precondition Failed"},
      {416, "Range Not Satisfiable"},
      {429, "Too Many Requests"},
      {500, "Internal Server Error"},
      {501, "Not Implemented"},
      {502, "Bad Gateway"},
      {503, "Service Unavailable"},
      {504, "Gateway Timeout"},
  };
  for (const auto& [code, reason] : kReasons) {
    if (code == status) return reason;
  }
  return {};
}

}  // namespace

StoreAnswer AnswerOf(bool s3, std::string_view s3_operation, const HttpResult& result,
                     std::string_view url) {
  StoreAnswer a;
  a.s3 = s3;
  if (s3) {
    a.operation = s3_operation;
  } else {
    a.operation = s3_operation == "HeadObject" ? "HEAD" : "GET";
  }
  a.status = result.status;
  a.reason = result.reason;
  a.request_id = result.request_id;
  a.host_id = result.host_id;
  a.endpoint = UrlHost(url);
  return a;
}

std::string StatusLine(long status, std::string_view reason) {
  if (reason.empty()) reason = StandardReason(status);
  return reason.empty() ? fmt::format("HTTP {}", status)
                        : fmt::format("HTTP {} {}", status, reason);
}

std::string AnswerIds(const StoreAnswer& a) {
  std::vector<std::string> parts;
  if (!a.request_id.empty()) parts.push_back("request id " + a.request_id);
  if (!a.host_id.empty()) parts.push_back("host id " + a.host_id);
  if (!a.endpoint.empty()) parts.push_back("endpoint " + a.endpoint);
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string AnswerHeadline(const StoreAnswer& a, std::string_view code) {
  const std::string status = StatusLine(a.status, a.reason);
  if (!a.s3) return fmt::format("{} answered {}", a.operation, status);
  const std::string label = code.empty() ? std::to_string(a.status) : std::string(code);
  const char* which = code.empty() && a.status == 404 ? " (NoSuchKey or NoSuchBucket)" : "";
  return fmt::format("An error occurred ({}) when calling the {} operation: {}{}", label,
                     a.operation, status, which);
}

std::string EmptyListingEvidence(const StoreAnswer& listing, std::string_view prefix,
                                 std::string_view key) {
  const std::string of =
      prefix.empty() ? std::string("the bucket") : fmt::format("prefix '{}'", prefix);
  std::string target;  // what was looked for, where the listing was wider
  if (key.empty() || key.ends_with('/')) {
    if (key != prefix) target = fmt::format(" under '{}'", key);
  } else if (prefix.size() != key.size() + 1 || !prefix.starts_with(key)) {
    target = fmt::format(" at '{}' or under '{}/'", key, key);
  }
  if (listing.status == 0) {
    return fmt::format("the manifest given to the program for {} holds no objects{}", of, target);
  }
  const std::string ids = AnswerIds(listing);
  return fmt::format("{} of {} found no objects{} ({}{}{})", listing.operation, of, target,
                     StatusLine(listing.status, listing.reason), ids.empty() ? "" : ", ", ids);
}

}  // namespace gpufeed::remote
