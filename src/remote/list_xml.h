// A small, bounded reader of the XML S3 answers with: ListObjectsV2 pages and error bodies.
// Every byte is untrusted: nesting, text and object counts are bounded, numbers checked,
// DOCTYPE and CDATA refused, and anything malformed is Error(kCorruptData).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpufeed::remote {

struct ListedObject {
  std::string key;
  uint64_t size = 0;
  std::string etag;  // without its quotes
};

struct ListPage {
  std::vector<ListedObject> objects;
  bool truncated = false;
  std::string next_token;  // NextContinuationToken, set when truncated
};

inline constexpr size_t kMaxListedPerPage = 10000;
inline constexpr size_t kMaxXmlText = 64 * 1024;

// One ListObjectsV2 page. Throws Error(kCorruptData) naming `what` (the bucket and prefix)
// for malformed XML, a Contents without Key or Size, a bad number, a truncated page without
// a continuation token, or more than kMaxListedPerPage objects.
ListPage ParseListObjectsV2(std::string_view xml, const std::string& what);

// The text of the first element `name` in `xml` (an S3 <Error>'s Code or Message), entities
// decoded; empty when absent or when the body is not XML. Never throws.
std::string XmlElementText(std::string_view xml, std::string_view name);

// An ETag header or element without its quotes and weak prefix ("W/\"x\"" -> "x").
std::string UnquoteEtag(std::string_view etag);

}  // namespace gpufeed::remote
