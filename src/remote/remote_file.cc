// RemoteFile: ranged reads, the page cache, ReadMany.
#include "remote/remote_file.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "remote/read_plan.h"

namespace gpufeed::remote {
namespace {

// ReadMany reads across a gap of up to this many bytes rather than sending another request:
// a round trip to a store costs tens of milliseconds, in which it sends megabytes. (A batch's
// rows drawn from a few chunks, as block shuffle draws them, become one GET per chunk.)
constexpr uint64_t kMaxGap = 256 * 1024;
// A merged read stays within this much, so its staging buffer does.
constexpr uint64_t kMaxMergedRead = 16 << 20;

}  // namespace

bool PageCache::Copy(uint64_t index, uint64_t offset, void* dst, size_t n) {
  std::lock_guard lock(mu_);
  auto it = pages_.find(index);
  if (it == pages_.end()) return false;
  const std::vector<char>& bytes = it->second->bytes;
  if (offset > bytes.size() || n > bytes.size() - offset) return false;
  std::memcpy(dst, bytes.data() + offset, n);
  lru_.splice(lru_.begin(), lru_, it->second);
  return true;
}

void PageCache::Insert(uint64_t index, std::vector<char> bytes) {
  std::lock_guard lock(mu_);
  if (auto it = pages_.find(index); it != pages_.end()) {
    lru_.erase(it->second);
    pages_.erase(it);
  }
  lru_.push_front({index, std::move(bytes)});
  pages_[index] = lru_.begin();
  if (lru_.size() > kMaxPages) {
    pages_.erase(lru_.back().index);
    lru_.pop_back();
  }
}

RemoteFile::RemoteFile(std::shared_ptr<const RemoteStore> store, RemoteUri uri, ObjectInfo info)
    : store_(std::move(store)),
      uri_(std::move(uri)),
      info_(std::move(info)),
      url_(store_->ObjectUrl(uri_)),
      signing_(store_->SigningFor(uri_)) {}

int64_t RemoteFile::ModificationTimeNs() const {
  if (info_.last_modified.empty()) return 0;
  const time_t t = curl_getdate(info_.last_modified.c_str(), nullptr);
  return t < 0 ? 0 : static_cast<int64_t>(t) * 1'000'000'000;
}

std::string RemoteFile::VersionStamp() const {
  return info_.etag.empty() ? info_.last_modified : info_.etag;
}

HttpRequest RemoteFile::RangeRequest(uint64_t offset, uint64_t length, char* dst) const {
  HttpRequest r;
  r.url = url_;
  r.ranged = true;
  r.begin = offset;
  r.length = length;
  r.whole_object = r.begin == 0 && r.length == info_.size;
  r.dst = dst;
  r.expect_etag = info_.etag;
  if (!info_.weak_etag) r.if_match = info_.etag;
  if (info_.etag.empty()) r.if_unmodified_since = info_.last_modified;
  r.follow_redirects = uri_.scheme == UriScheme::kHttp;
  r.signing = signing_;
  return r;
}

void RemoteFile::RaiseFailed(uint64_t offset, uint64_t length, const HttpResult& result) const {
  const std::string range = fmt::format("bytes {}-{}", offset, offset + length - 1);
  store_->Raise({&uri_, range, info_.etag, "GetObject", {}}, result);
}

void RemoteFile::Fetch(std::span<const Piece> pieces) const {
  std::vector<HttpRequest> requests;
  requests.reserve(pieces.size());
  for (const Piece& p : pieces) requests.push_back(RangeRequest(p.offset, p.length, p.dst));
  std::vector<HttpResult> results(pieces.size());
  store_->client().Run(requests, results);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (results[i].outcome != Outcome::kOk) {
      RaiseFailed(pieces[i].offset, pieces[i].length, results[i]);
    }
  }
}

void RemoteFile::ReadBatch(std::span<const FileRead> reads, const std::string& what,
                           const std::function<void(size_t)>& on_done) const {
  std::vector<HttpRequest> requests;
  std::vector<size_t> read_of;  // request -> index in `reads`
  std::vector<size_t> empty;    // reads of no bytes: complete before any request
  requests.reserve(reads.size());
  read_of.reserve(reads.size());
  for (size_t i = 0; i < reads.size(); ++i) {
    const FileRead& read = reads[i];
    const auto* file = static_cast<const RemoteFile*>(read.file);
    // Reads past the end are ReadFully's error: named the same way as for a local file.
    if (read.offset > file->Size() || read.n > file->Size() - read.offset) {
      ReadFully(*file, read.offset, read.buf, read.n, what);
    }
    if (read.n == 0) {
      empty.push_back(i);
      continue;
    }
    requests.push_back(file->RangeRequest(read.offset, read.n, static_cast<char*>(read.buf)));
    read_of.push_back(i);
  }
  if (on_done) {
    for (const size_t i : empty) on_done(i);
  }
  std::vector<HttpResult> results(requests.size());
  std::function<void(size_t)> request_done;
  if (on_done) {
    request_done = [&](size_t r) {
      if (results[r].outcome == Outcome::kOk) on_done(read_of[r]);
    };
  }
  store_->client().Run(requests, results, request_done);
  for (size_t r = 0; r < requests.size(); ++r) {
    if (results[r].outcome != Outcome::kOk) {
      static_cast<const RemoteFile*>(reads[read_of[r]].file)
          ->RaiseFailed(requests[r].begin, requests[r].length, results[r]);
    }
  }
}

size_t RemoteFile::ReadSmall(uint64_t offset, void* buf, size_t n) const {
  constexpr uint64_t kPage = PageCache::kPageSize;
  const uint64_t first = offset / kPage;
  const uint64_t last = (offset + n - 1) / kPage;  // first or first + 1: n < kPage
  std::vector<uint64_t> missing;
  for (uint64_t p = first; p <= last; ++p) {
    const uint64_t begin = std::max(offset, p * kPage);
    const uint64_t end = std::min(offset + n, (p + 1) * kPage);
    if (!cache_.Copy(p, begin - p * kPage, static_cast<char*>(buf) + (begin - offset),
                     end - begin)) {
      missing.push_back(p);
    }
  }
  if (missing.empty()) return n;
  const uint64_t begin = missing.front() * kPage;
  const uint64_t end = std::min(info_.size, (missing.back() + 1) * kPage);
  std::vector<char> bytes(end - begin);
  const Piece piece{begin, end - begin, bytes.data()};
  Fetch({&piece, 1});
  // Only the missing pages' parts of the request come from `bytes`: a page the cache held is
  // already in `buf`, and `bytes` may not span the whole request (one side held).
  for (uint64_t p : missing) {
    const uint64_t want_begin = std::max(offset, p * kPage);
    const uint64_t want_end = std::min(offset + n, (p + 1) * kPage);
    std::memcpy(static_cast<char*>(buf) + (want_begin - offset),
                bytes.data() + (want_begin - begin), want_end - want_begin);
    const uint64_t page_begin = p * kPage - begin;
    const uint64_t page_end = std::min<uint64_t>(bytes.size(), page_begin + kPage);
    cache_.Insert(p, std::vector<char>(bytes.begin() + static_cast<ptrdiff_t>(page_begin),
                                       bytes.begin() + static_cast<ptrdiff_t>(page_end)));
  }
  return n;
}

size_t RemoteFile::ReadAt(uint64_t offset, void* buf, size_t n) const {
  if (offset >= info_.size || n == 0) return 0;
  n = static_cast<size_t>(std::min<uint64_t>(n, info_.size - offset));
  if (n < PageCache::kPageSize) return ReadSmall(offset, buf, n);
  const Piece piece{offset, n, static_cast<char*>(buf)};
  Fetch({&piece, 1});
  return n;
}

void RemoteFile::ReadMany(std::span<const ReadRange> ranges, const std::string& what) const {
  for (const ReadRange& r : ranges) {
    const std::optional<uint64_t> end = CheckedAdd(r.offset, r.n);
    if (!end || *end > info_.size) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: {}: file ends at byte {} but {} bytes were expected at "
                              "offset {}",
                              uri_.uri, what, info_.size, r.n, r.offset));
    }
  }
  const std::vector<CoalescedRead> reads = CoalesceRanges(ranges, kMaxGap, kMaxMergedRead);
  std::vector<Piece> pieces;
  std::vector<std::vector<char>> staging(reads.size());
  for (size_t i = 0; i < reads.size(); ++i) {
    const CoalescedRead& read = reads[i];
    char* dst = nullptr;
    if (read.members.size() == 1) {
      dst = static_cast<char*>(ranges[read.members[0]].buf);
    } else {
      staging[i].resize(read.length);
      dst = staging[i].data();
    }
    pieces.push_back({read.offset, read.length, dst});
  }
  Fetch(pieces);
  for (size_t i = 0; i < reads.size(); ++i) {
    if (staging[i].empty()) continue;
    for (size_t m : reads[i].members) {
      std::memcpy(ranges[m].buf, staging[i].data() + (ranges[m].offset - reads[i].offset),
                  ranges[m].n);
    }
  }
}

}  // namespace gpufeed::remote
