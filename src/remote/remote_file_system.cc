// RemoteFileSystem: Open (HEAD unless the manifest holds the object), Type and List from one
// recursive listing per prefix kept as the manifest, and the process's default instance.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "gpufeed/error.h"
#include "gpufeed/remote.h"
#include "remote/remote_file.h"
#include "remote/store.h"

namespace gpufeed {
namespace {

using remote::ObjectInfo;
using remote::RemoteStore;
using remote::RemoteUri;
using remote::UriScheme;

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
    if (uri.scheme == UriScheme::kHttp) {
      if (path.ends_with('/')) HttpFolderUnsupported(path);
      if (std::optional<ObjectInfo> info = Store()->Head(uri, /*missing_ok=*/true)) {
        Remember(path, *info);
        return PathType::kFile;
      }
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
    if (may_be_object) {
      if (std::optional<ObjectInfo> info = Store()->Head(uri, /*missing_ok=*/true)) {
        Remember(ManifestKey(uri), *info);
        return PathType::kFile;
      }
    }
    EnsureListed(uri, folder);
    std::lock_guard lock(mu_);
    return HasChildrenLocked(ObjectUri(uri.bucket, folder)) ? PathType::kDirectory
                                                            : PathType::kMissing;
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
      throw Error(ErrorCode::kNotFound, fmt::format("{}: no objects under this prefix", dir));
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
    listed_.insert(dir);
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

  // Whether a listing already holds every key that could answer for `key`: a listed folder
  // that is `key` itself (a folder key) or one of its ancestors.
  bool CoveredLocked(const std::string& bucket, const std::string& key) const {
    if (listed_.contains(ObjectUri(bucket, ""))) return true;
    for (size_t slash = key.find('/'); slash != std::string::npos;
         slash = key.find('/', slash + 1)) {
      if (listed_.contains(ObjectUri(bucket, key.substr(0, slash + 1)))) return true;
    }
    return false;
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
    std::vector<remote::ListedObject> listed = Store()->ListAll(uri, folder);
    std::lock_guard lock(mu_);
    for (remote::ListedObject& o : listed) {
      objects_[ObjectUri(uri.bucket, o.key)] = ObjectInfo{o.size, std::move(o.etag), false, {}};
    }
    listed_.insert(ObjectUri(uri.bucket, folder));
  }

  std::shared_ptr<const RemoteStore> Store() const {
    std::lock_guard lock(mu_);
    return store_;
  }

  std::shared_ptr<remote::StatsRecorder> stats_;
  mutable std::mutex mu_;
  std::shared_ptr<const RemoteStore> store_;
  mutable std::map<std::string, ObjectInfo> objects_;  // by URI
  mutable std::set<std::string> listed_;               // folder URIs listed whole
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

RemoteStats ProcessRemoteStats() {
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
