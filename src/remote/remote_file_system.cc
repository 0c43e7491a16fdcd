// RemoteFileSystem: Open (HEAD unless the manifest holds the object), Type and List from one
// recursive listing per prefix kept as the manifest, what the store answered where Type found
// nothing (WhyMissing), and the process's default instance.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "gpufeed/error.h"
#include "gpufeed/remote.h"
#include "remote/process_file_system.h"
#include "remote/remote_file.h"
#include "remote/store.h"

namespace gpufeed {
namespace {

using remote::ObjectInfo;
using remote::RemoteStore;
using remote::RemoteUri;
using remote::StoreAnswer;
using remote::UriScheme;

// Paths whose WhyMissing is kept; past this many the oldest answers are dropped all at once.
constexpr size_t kMaxMissingKept = 1024;

std::string ObjectUri(const std::string& bucket, const std::string& key) {
  return fmt::format("s3://{}/{}", bucket, key);
}

// `key` as a folder prefix: "" for the bucket, else ending in '/'.
std::string FolderKey(const std::string& key) {
  return key.empty() || key.ends_with('/') ? key : key + "/";
}

[[noreturn]] void HttpFolderUnsupported(const std::string& uri) {
  throw Error(ErrorCode::kUnsupported,
              fmt::format("{}: HTTP servers have no folder listing gpufeed can read; name the "
                          "files, or put them in an S3-API store",
                          uri));
}

class RemoteFileSystemImpl final : public RemoteFileSystem {
 public:
  explicit RemoteFileSystemImpl(const RemoteOptions& options)
      : stats_(std::make_shared<remote::StatsRecorder>()),
        store_(std::make_shared<RemoteStore>(options, stats_)) {}

  // Files opened from now on use `options`; open files keep theirs; the manifest stays.
  void SetOptions(const RemoteOptions& options) {
    auto store = std::make_shared<RemoteStore>(options, stats_);
    std::lock_guard lock(mu_);
    store_ = std::move(store);
  }

  std::unique_ptr<File> Open(const std::string& path) const override {
    RemoteUri uri = remote::ParseRemoteUri(path);
    if (uri.scheme == UriScheme::kS3 && (uri.key.empty() || uri.key.ends_with('/'))) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: names a folder, not an object", path));
    }
    const std::string key = ManifestKey(uri);
    std::shared_ptr<const RemoteStore> store;
    {
      std::lock_guard lock(mu_);
      if (auto it = objects_.find(key); it != objects_.end()) {
        return std::make_unique<remote::RemoteFile>(store_, std::move(uri), it->second);
      }
      store = store_;
    }
    ObjectInfo info = *store->Head(uri, /*missing_ok=*/false);
    Remember(key, info);
    return std::make_unique<remote::RemoteFile>(std::move(store), std::move(uri), std::move(info));
  }

  PathType Type(const std::string& path) const override {
    const RemoteUri uri = remote::ParseRemoteUri(path);
    {
      std::lock_guard lock(mu_);
      missing_.erase(path);
    }
    if (uri.scheme == UriScheme::kHttp) {
      if (path.ends_with('/')) HttpFolderUnsupported(path);
      StoreAnswer head;
      if (std::optional<ObjectInfo> info = Store()->Head(uri, /*missing_ok=*/true, &head)) {
        Remember(path, *info);
        return PathType::kFile;
      }
      std::lock_guard lock(mu_);
      KeepMissingLocked(
          path, fmt::format("{} ({})", remote::AnswerHeadline(head, {}), remote::AnswerIds(head)));
      return PathType::kMissing;
    }
    const std::string folder = FolderKey(uri.key);
    const bool may_be_object = !uri.key.empty() && !uri.key.ends_with('/');
    {
      std::lock_guard lock(mu_);
      if (may_be_object && objects_.contains(ManifestKey(uri))) return PathType::kFile;
      const bool has_children = HasChildrenLocked(ObjectUri(uri.bucket, folder));
      if (CoveredLocked(uri.bucket, uri.key)) {
        // The listing holds the object and the folder alike.
        return has_children ? PathType::kDirectory : PathType::kMissing;
      }
      // A listed folder answers for itself; an object of the same name is not looked for.
      if (has_children && CoveredLocked(uri.bucket, folder)) return PathType::kDirectory;
    }
    std::optional<StoreAnswer> head;  // a HEAD's 404
    if (may_be_object) {
      StoreAnswer answer;
      if (std::optional<ObjectInfo> info = Store()->Head(uri, /*missing_ok=*/true, &answer)) {
        Remember(ManifestKey(uri), *info);
        return PathType::kFile;
      }
      head = std::move(answer);
    }
    EnsureListed(uri, folder);
    std::lock_guard lock(mu_);
    if (HasChildrenLocked(ObjectUri(uri.bucket, folder))) return PathType::kDirectory;
    KeepMissingLocked(path, MissingEvidenceLocked(uri, head ? &*head : nullptr));
    return PathType::kMissing;
  }

  std::string WhyMissing(const std::string& path) const override {
    if (!IsRemoteUri(path)) return {};
    {
      std::lock_guard lock(mu_);
      if (auto it = missing_.find(path); it != missing_.end()) return it->second;
    }
    // Type answered from a listing made earlier, without a request.
    RemoteUri uri;
    try {
      uri = remote::ParseRemoteUri(path);
    } catch (const Error&) {
      return {};
    }
    if (uri.scheme == UriScheme::kHttp) return {};
    std::lock_guard lock(mu_);
    return MissingEvidenceLocked(uri, nullptr);
  }

  std::vector<DirEntry> List(const std::string& path) const override {
    const RemoteUri uri = remote::ParseRemoteUri(path);
    if (uri.scheme == UriScheme::kHttp) HttpFolderUnsupported(path);
    const std::string folder = FolderKey(uri.key);
    EnsureListed(uri, folder);
    const std::string dir = ObjectUri(uri.bucket, folder);
    std::vector<DirEntry> out;
    {
      std::lock_guard lock(mu_);
      std::string last_dir;
      for (auto it = objects_.lower_bound(dir); it != objects_.end() && it->first.starts_with(dir);
           ++it) {
        const std::string rest = it->first.substr(dir.size());
        if (rest.empty()) continue;  // the folder's own marker object
        const size_t slash = rest.find('/');
        if (slash == std::string::npos) {
          out.push_back({rest, PathType::kFile, it->second.size});
        } else if (rest.compare(0, slash, last_dir) != 0 || last_dir.empty()) {
          last_dir = rest.substr(0, slash);
          out.push_back({last_dir, PathType::kDirectory, 0});
        }
      }
    }
    if (out.empty()) {
      std::lock_guard lock(mu_);
      throw Error(ErrorCode::kNotFound, fmt::format("{}: no objects under this prefix: {}", dir,
                                                    MissingEvidenceLocked(uri, nullptr)));
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return out;
  }

  std::vector<RemoteObject> Manifest() const override {
    std::lock_guard lock(mu_);
    std::vector<RemoteObject> out;
    out.reserve(objects_.size());
    for (const auto& [uri, info] : objects_) out.push_back({uri, info.size, info.etag});
    return out;
  }

  void AddManifest(const std::string& prefix, std::vector<RemoteObject> objects) override {
    const RemoteUri uri = remote::ParseRemoteUri(prefix);
    if (uri.scheme == UriScheme::kHttp) HttpFolderUnsupported(prefix);
    const std::string folder = FolderKey(uri.key);
    const std::string dir = ObjectUri(uri.bucket, folder);
    for (const RemoteObject& o : objects) {
      if (!o.uri.starts_with(dir) || o.uri.size() == dir.size()) {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("manifest entry {} is not an object under {}", o.uri, dir));
      }
    }
    std::lock_guard lock(mu_);
    for (RemoteObject& o : objects) {
      objects_[std::move(o.uri)] = ObjectInfo{o.size, remote::UnquoteEtag(o.etag), false, {}};
    }
    listed_.insert_or_assign(dir, StoreAnswer{});  // no request: status 0
  }

  RemoteStats stats() const override { return stats_->Snapshot(Store()->options().max_requests); }

 private:
  static std::string ManifestKey(const RemoteUri& uri) {
    return uri.scheme == UriScheme::kHttp ? uri.uri : ObjectUri(uri.bucket, uri.key);
  }

  void Remember(const std::string& key, const ObjectInfo& info) const {
    std::lock_guard lock(mu_);
    objects_.emplace(key, info);
  }

  // The listing that already holds every key that could answer for `key`: a listed folder
  // that is `key` itself (a folder key) or one of its ancestors, the nearest first; its
  // prefix in `*prefix`. Null when none.
  const StoreAnswer* CoveringLocked(const std::string& bucket, const std::string& key,
                                    std::string* prefix = nullptr) const {
    for (size_t end = key.rfind('/'); end != std::string::npos;
         end = end == 0 ? std::string::npos : key.rfind('/', end - 1)) {
      if (auto it = listed_.find(ObjectUri(bucket, key.substr(0, end + 1))); it != listed_.end()) {
        if (prefix != nullptr) *prefix = key.substr(0, end + 1);
        return &it->second;
      }
    }
    auto it = listed_.find(ObjectUri(bucket, ""));
    if (it == listed_.end()) return nullptr;
    if (prefix != nullptr) prefix->clear();
    return &it->second;
  }
  bool CoveredLocked(const std::string& bucket, const std::string& key) const {
    return CoveringLocked(bucket, key) != nullptr;
  }

  // Why nothing is at `uri` (an S3 path Type found missing): the HEAD's 404, where one was
  // sent, and the listing that holds no object there. A listing the store answered proves the
  // bucket there, so the 404 was the key's: NoSuchKey, as S3 says to a GET.
  std::string MissingEvidenceLocked(const RemoteUri& uri, const StoreAnswer* head) const {
    std::string prefix;
    const StoreAnswer* listing = CoveringLocked(uri.bucket, FolderKey(uri.key), &prefix);
    std::string listed;
    if (listing != nullptr) {
      StoreAnswer quoted = *listing;
      if (head != nullptr && quoted.endpoint == head->endpoint) quoted.endpoint.clear();
      listed = remote::EmptyListingEvidence(quoted, prefix, uri.key);
    }
    if (head == nullptr) return listed;
    const bool bucket_there = listing != nullptr && listing->status != 0;
    const char* then = bucket_there ? "; the bucket is there: " : listed.empty() ? "" : "; ";
    return fmt::format("{} ({}){}{}",
                       remote::AnswerHeadline(*head, bucket_there ? "NoSuchKey" : ""),
                       remote::AnswerIds(*head), then, listed);
  }

  void KeepMissingLocked(const std::string& path, std::string why) const {
    if (missing_.size() >= kMaxMissingKept) missing_.clear();
    missing_.insert_or_assign(path, std::move(why));
  }

  bool HasChildrenLocked(const std::string& dir) const {
    auto it = objects_.lower_bound(dir);
    while (it != objects_.end() && it->first == dir) ++it;  // the folder's marker
    return it != objects_.end() && it->first.starts_with(dir);
  }

  void EnsureListed(const RemoteUri& uri, const std::string& folder) const {
    {
      std::lock_guard lock(mu_);
      if (CoveredLocked(uri.bucket, folder)) return;
    }
    StoreAnswer answer;
    std::vector<remote::ListedObject> listed = Store()->ListAll(uri, folder, &answer);
    std::lock_guard lock(mu_);
    for (remote::ListedObject& o : listed) {
      objects_[ObjectUri(uri.bucket, o.key)] = ObjectInfo{o.size, std::move(o.etag), false, {}};
    }
    listed_.insert_or_assign(ObjectUri(uri.bucket, folder), std::move(answer));
  }

  std::shared_ptr<const RemoteStore> Store() const {
    std::lock_guard lock(mu_);
    return store_;
  }

  std::shared_ptr<remote::StatsRecorder> stats_;
  mutable std::mutex mu_;
  std::shared_ptr<const RemoteStore> store_;
  mutable std::map<std::string, ObjectInfo> objects_;  // by URI
  // Folder URIs listed whole, each with the store's answer to its listing.
  mutable std::map<std::string, StoreAnswer> listed_;
  mutable std::map<std::string, std::string> missing_;  // WhyMissing, by path Type was asked
};

std::mutex default_mu;
std::shared_ptr<RemoteFileSystem>& DefaultSlot() {
  static auto* fs = new std::shared_ptr<RemoteFileSystem>();  // outlives static destruction
  return *fs;
}

}  // namespace

std::shared_ptr<RemoteFileSystem> RemoteFileSystem::Create(RemoteOptions options) {
  return std::make_shared<RemoteFileSystemImpl>(options);
}

std::shared_ptr<RemoteFileSystem> DefaultRemoteFileSystem() {
  std::lock_guard lock(default_mu);
  std::shared_ptr<RemoteFileSystem>& fs = DefaultSlot();
  if (!fs) fs = RemoteFileSystem::Create();
  return fs;
}

RemoteStats remote::DefaultFileSystemStats() {
  std::shared_ptr<RemoteFileSystem> fs;
  {
    std::lock_guard lock(default_mu);
    fs = DefaultSlot();
  }
  return fs ? fs->stats() : RemoteStats{};
}

void SetDefaultRemoteOptions(const RemoteOptions& options) {
  std::lock_guard lock(default_mu);
  std::shared_ptr<RemoteFileSystem>& fs = DefaultSlot();
  if (fs) {
    static_cast<RemoteFileSystemImpl&>(*fs).SetOptions(options);
  } else {
    fs = RemoteFileSystem::Create(options);
  }
}

}  // namespace gpufeed
