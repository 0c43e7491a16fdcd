// The bounded XML reader behind ListObjectsV2 and S3 error bodies.
#include "remote/list_xml.h"

#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <optional>

#include "core/text.h"
#include "gpufeed/error.h"

namespace gpufeed::remote {
namespace {

constexpr size_t kMaxDepth = 8;

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// XML text with its entities decoded, or nullopt for an unknown or bad entity.
std::optional<std::string> DecodeEntities(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 12) return std::nullopt;
    const std::string_view name = s.substr(i + 1, semi - i - 1);
    if (name == "amp")
      out.push_back('&');
    else if (name == "lt")
      out.push_back('<');
    else if (name == "gt")
      out.push_back('>');
    else if (name == "quot")
      out.push_back('"');
    else if (name == "apos")
      out.push_back('\'');
    else if (name.starts_with('#')) {
      const bool hex = name.size() > 1 && (name[1] == 'x' || name[1] == 'X');
      uint32_t cp = 0;
      const std::string_view digits = name.substr(hex ? 2 : 1);
      const char* end = digits.data() + digits.size();
      auto [ptr, ec] = std::from_chars(digits.data(), end, cp, hex ? 16 : 10);
      if (digits.empty() || ec != std::errc() || ptr != end || cp == 0 || cp > 0x10FFFF ||
          (cp >= 0xD800 && cp <= 0xDFFF)) {
        return std::nullopt;
      }
      AppendUtf8(cp, &out);
    } else {
      return std::nullopt;
    }
    i = semi;
  }
  return out;
}

// ListObjectsV2's encoding-type=url form of a key: percent-escapes, '+' for a space.
std::optional<std::string> UrlDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%') {
      unsigned v = 0;
      if (i + 3 > s.size()) return std::nullopt;
      auto [ptr, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
      if (ec != std::errc() || ptr != s.data() + i + 3) return std::nullopt;
      out.push_back(static_cast<char>(v));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// Walks `xml` and calls on_close(path, text) as each element closes; `path` is the stack of
// open element names, the closing one last. Returns an error text, or empty for success.
using CloseFn = std::function<std::string(const std::vector<std::string>&, std::string_view)>;

std::string WalkXml(std::string_view xml, const CloseFn& on_close) {
  std::vector<std::string> path;
  std::string_view text;
  size_t pos = 0;
  while (pos < xml.size()) {
    if (xml[pos] != '<') {
      const size_t next = xml.find('<', pos);
      if (next == std::string_view::npos) break;
      if (next - pos > kMaxXmlText) return "text longer than 64 KiB";
      text = xml.substr(pos, next - pos);
      pos = next;
      continue;
    }
    const std::string_view rest = xml.substr(pos);
    size_t close = 0;
    if (rest.starts_with("<?")) {
      close = rest.find("?>");
      if (close == std::string_view::npos) return "unterminated <?";
      pos += close + 2;
      continue;
    }
    if (rest.starts_with("<!--")) {
      close = rest.find("-->");
      if (close == std::string_view::npos) return "unterminated comment";
      pos += close + 3;
      continue;
    }
    if (rest.starts_with("<!")) return "DOCTYPE or CDATA (refused)";
    close = rest.find('>');
    if (close == std::string_view::npos) return "unterminated tag";
    std::string_view tag = rest.substr(1, close - 1);
    pos += close + 1;
    if (tag.starts_with('/')) {
      const std::string_view name = Trim(tag.substr(1));
      if (path.empty() || path.back() != name) {
        return fmt::format("</{}> does not close <{}>", name, path.empty() ? "" : path.back());
      }
      if (std::string err = on_close(path, text); !err.empty()) return err;
      path.pop_back();
      text = {};
      continue;
    }
    const bool self_closing = tag.ends_with('/');
    if (self_closing) tag.remove_suffix(1);
    const std::string_view name = tag.substr(0, tag.find_first_of(" \t\r\n"));
    if (name.empty()) return "empty tag name";
    if (path.size() >= kMaxDepth) return "elements nested too deep";
    path.emplace_back(name);
    text = {};
    if (self_closing) {
      if (std::string err = on_close(path, {}); !err.empty()) return err;
      path.pop_back();
    }
  }
  if (!path.empty()) return fmt::format("<{}> is never closed", path.back());
  return {};
}

}  // namespace

std::string UnquoteEtag(std::string_view etag) {
  etag = Trim(etag);
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return std::string(etag);
}

ListPage ParseListObjectsV2(std::string_view xml, const std::string& what) {
  ListPage page;
  ListedObject current;
  bool has_key = false, has_size = false, saw_root = false, url_encoded = false;
  const CloseFn on_close = [&](const std::vector<std::string>& path,
                               std::string_view raw) -> std::string {
    if (path.front() != "ListBucketResult") return fmt::format("root <{}>", path.front());
    saw_root = true;
    std::optional<std::string> text = DecodeEntities(raw);
    if (!text) return "bad entity in element text";
    const std::string& leaf = path.back();
    if (path.size() == 3 && path[1] == "Contents") {
      if (leaf == "Key") {
        current.key = std::move(*text);
        has_key = true;
      } else if (leaf == "Size") {
        std::optional<uint64_t> size = ParseNumber<uint64_t>(Trim(*text));
        if (!size) return fmt::format("Size '{}' is not a byte count", *text);
        current.size = *size;
        has_size = true;
      } else if (leaf == "ETag") {
        current.etag = UnquoteEtag(*text);
      }
    } else if (path.size() == 2 && leaf == "Contents") {
      if (!has_key || !has_size) return "a <Contents> without <Key> or <Size>";
      if (page.objects.size() >= kMaxListedPerPage) {
        return fmt::format("more than {} objects in one page", kMaxListedPerPage);
      }
      page.objects.push_back(std::move(current));
      current = {};
      has_key = has_size = false;
    } else if (path.size() == 2 && leaf == "IsTruncated") {
      const std::string_view v = Trim(*text);
      if (v != "true" && v != "false") return fmt::format("IsTruncated '{}'", v);
      page.truncated = v == "true";
    } else if (path.size() == 2 && leaf == "NextContinuationToken") {
      page.next_token = std::move(*text);
    } else if (path.size() == 2 && leaf == "EncodingType") {
      url_encoded = Trim(*text) == "url";
    } else if (path.size() == 2 && leaf == "KeyCount") {
      if (!ParseNumber<uint64_t>(Trim(*text))) return fmt::format("KeyCount '{}'", *text);
    }
    return {};
  };
  std::string err = WalkXml(xml, on_close);
  if (err.empty() && !saw_root) err = "no <ListBucketResult>";
  if (err.empty() && page.truncated && page.next_token.empty()) {
    err = "a truncated page without NextContinuationToken";
  }
  if (err.empty() && url_encoded) {
    for (ListedObject& o : page.objects) {
      std::optional<std::string> key = UrlDecode(o.key);
      if (!key) {
        err = fmt::format("key '{}' is not URL-encoded as EncodingType says", o.key);
        break;
      }
      o.key = std::move(*key);
    }
  }
  if (!err.empty()) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the ListObjectsV2 answer is malformed: {}", what, err));
  }
  return page;
}

std::string XmlElementText(std::string_view xml, std::string_view name) {
  std::string found;
  const CloseFn on_close = [&](const std::vector<std::string>& path,
                               std::string_view raw) -> std::string {
    if (found.empty() && path.back() == name) {
      found = DecodeEntities(raw).value_or("");
      if (found.size() > 256) found.resize(256);
    }
    return {};
  };
  if (!WalkXml(xml, on_close).empty()) return found;
  return found;
}

}  // namespace gpufeed::remote
