// The shared-memory cache against a hostile folder: a squatted lock, planted FIFOs and
// symlinks, a file rewritten or truncated under a reader, and (when run as root) a second user
// planting things for the first.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <vector>

#include "cache/cache_test_util.h"
#include "cache/shm/shm_format.h"
#include "cache/shm/shm_open.h"
#include "cache/shm/shm_source.h"
#include "cache/shm/shm_user_dir.h"
#include "error_code_of.h"
#include "gpufeed/cache.h"
#include "gpufeed/shm_caches.h"
#include "gpufeed/sources.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::ReadAll;
using testing::ReadRows;
using testing::ScratchDir;

// 600 samples of 1 KiB + 8 bytes: about 40 blocks.
std::shared_ptr<Source> Synthetic() {
  return OpenSynthetic(ParseSchema("mel:float32[256],label:int64[]"), 600, 11);
}

ShmOpenOptions Options(const std::string& root, std::optional<gid_t> group = std::nullopt) {
  return {.dir = root, .group = group, .threads = 1, .verbose = false};
}

void FlipByteAt(const std::string& path, uint64_t at) {
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  char c = 0;
  ASSERT_EQ(pread(fd, &c, 1, static_cast<off_t>(at)), 1);
  c ^= 0x55;
  ASSERT_EQ(pwrite(fd, &c, 1, static_cast<off_t>(at)), 1);
  close(fd);
}

TEST(ShmHostileTest, FilesAreTheUsersOwnAndPrivate) {
  ScratchDir root;
  ShmOpenResult r = OpenShmCache(Synthetic(), Options(root.path()));
  ASSERT_TRUE(r.source);
  const std::string dir = ShmUserDirPath(root.path());
  EXPECT_EQ(fs::path(r.path).parent_path().string(), dir);
  struct stat st {};
  ASSERT_EQ(lstat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  for (const std::string& file : {r.path, r.path + ".lock", dir + "/secret"}) {
    ASSERT_EQ(lstat(file.c_str(), &st), 0) << file;
    EXPECT_TRUE(S_ISREG(st.st_mode)) << file;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << file;
    EXPECT_EQ(st.st_uid, geteuid()) << file;
  }
}

// Only the owner can write the file, so a reader serves what is there; `gpufeed cache verify`
// finds a byte rewritten in place, in an 8 KiB row (a block of its own) or in a label (a block
// of 512), and names the block.
TEST(ShmHostileTest, ARewrittenRowOrSmallRowBlockIsFoundByVerify) {
  for (const size_t field : {size_t{0}, size_t{1}}) {
    SCOPED_TRACE(field == 0 ? "8 KiB row" : "label in a block of 512");
    ScratchDir root;
    auto make = [] { return OpenSynthetic(ParseSchema("mel:float32[2048],label:int64[]"), 64, 5); };
    ShmOpenResult r = OpenShmCache(make(), Options(root.path()));
    ASSERT_TRUE(r.source);
    const std::vector<int64_t> rows = {12, 40, 9, 11, 10, 63};
    const auto want = ReadRows(*make(), rows);
    EXPECT_EQ(ReadRows(*r.source, rows), want);
    const auto src = make();
    const ShmLayout layout = PlanShmLayout(src->schema(), src->size(), src->Identity(),
                                           src->schema().ToString(), src->Describe());
    FlipByteAt(r.path, layout.header_bytes + layout.RowBegin(field, 11) + 3);
    EXPECT_NE(ReadRows(*r.source, rows), want);  // the mapping shows the rewrite at once
    const ShmVerifyReport report = VerifyShmCache(r.key, root.path());
    EXPECT_FALSE(report.ok);
    EXPECT_EQ(report.first_bad_block, static_cast<int64_t>(layout.BlockOf(field, 11)));
    EXPECT_THAT(report.first_bad, HasSubstr(field == 0 ? "field 'mel', samples 11 to 11"
                                                       : "field 'label', samples 0 to 63"));
  }
}

TEST(ShmHostileTest, AFifoUnderTheCachesNameIsRemovedNotOpenedForReading) {
  ScratchDir root;
  const std::string key = CacheKey(*Synthetic());
  ShmUserDir::Open(root.path(), /*create=*/true);
  const std::string path = ShmCachePath(root.path(), key);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  // `gpufeed cache ls` lists it as refused, without blocking on it.
  const auto listed = ListShmCaches(root.path());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_FALSE(listed[0].valid);
  EXPECT_THAT(listed[0].description, HasSubstr("not a regular file"));
  // Opening the cache removes it and builds the real one.
  ShmOpenResult r = OpenShmCache(Synthetic(), Options(root.path()));
  ASSERT_TRUE(r.source);
  EXPECT_TRUE(r.built);
  EXPECT_EQ(ReadAll(*r.source), ReadAll(*Synthetic()));
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST(ShmHostileTest, ASymlinkUnderTheCachesNameOrTheLocksIsNeverFollowed) {
  ScratchDir root;
  ScratchDir elsewhere;
  const std::string target = elsewhere.Write("target", "do not touch");
  const std::string key = CacheKey(*Synthetic());
  ShmUserDir::Open(root.path(), /*create=*/true);
  const std::string path = ShmCachePath(root.path(), key);
  ASSERT_EQ(symlink(target.c_str(), path.c_str()), 0);
  ShmOpenResult r = OpenShmCache(Synthetic(), Options(root.path()));
  ASSERT_TRUE(r.source);
  EXPECT_TRUE(r.built);
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  // The lock as a symlink: refused, and the target's mode is not changed.
  ScratchDir root2;
  ShmUserDir::Open(root2.path(), /*create=*/true);
  ASSERT_EQ(chmod(target.c_str(), 0600), 0);
  const std::string lock = ShmCachePath(root2.path(), key) + ".lock";
  ASSERT_EQ(symlink(target.c_str(), lock.c_str()), 0);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenShmCache(Synthetic(), Options(root2.path())); }, &message),
            ErrorCode::kIo);
  EXPECT_THAT(message, AllOf(HasSubstr(lock), HasSubstr("symlink")));
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// Callers tell "nothing there" (build or report not found) from "something there that is
// refused" (report it) by OpenFile's state, not by its message.
TEST(ShmHostileTest, OpenFileTellsAbsentFromRefused) {
  ScratchDir root;
  ScratchDir elsewhere;
  const auto dir = ShmUserDir::Open(root.path(), /*create=*/true);
  std::string why;
  auto state = ShmUserDir::FileState::kOpened;
  EXPECT_EQ(dir->OpenFile("none", O_RDONLY, &why, &state), -1);
  EXPECT_EQ(state, ShmUserDir::FileState::kAbsent);
  const std::string target = elsewhere.Write("target", "x");
  ASSERT_EQ(symlink(target.c_str(), dir->PathOf("link").c_str()), 0);
  EXPECT_EQ(dir->OpenFile("link", O_RDONLY, &why, &state), -1);
  EXPECT_EQ(state, ShmUserDir::FileState::kRefused);
  EXPECT_EQ(why, "a symlink");
  const int made = dir->CreateFile("good");
  ASSERT_GE(made, 0);
  close(made);
  const int fd = dir->OpenFile("good", O_RDONLY, &why, &state);
  EXPECT_GE(fd, 0) << why;
  EXPECT_EQ(state, ShmUserDir::FileState::kOpened);
  if (fd >= 0) close(fd);
}

TEST(ShmHostileTest, AUserFolderOpenToOthersOrASymlinkIsRefused) {
  ScratchDir root;
  const std::string dir = ShmUserDirPath(root.path());
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);  // past the umask
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenShmCache(Synthetic(), Options(root.path())); }, &message),
            ErrorCode::kIo);
  EXPECT_THAT(message, AllOf(HasSubstr(dir), HasSubstr("mode 0755")));
  ASSERT_EQ(rmdir(dir.c_str()), 0);
  ScratchDir elsewhere;
  ASSERT_EQ(symlink(elsewhere.path().c_str(), dir.c_str()), 0);
  EXPECT_EQ(ErrorCodeOf([&] { OpenShmCache(Synthetic(), Options(root.path())); }, &message),
            ErrorCode::kIo);
  EXPECT_THAT(message, AllOf(HasSubstr(dir), HasSubstr("symlink")));
  EXPECT_TRUE(fs::is_empty(elsewhere.path()));
  EXPECT_EQ(ErrorCodeOf([&] { ListShmCaches(root.path()); }), ErrorCode::kIo);
}

TEST(ShmHostileTest, ALockHeldTooLongIsWaitedForBoundedlyAndItsHolderNamed) {
  ScratchDir root;
  const std::string key = CacheKey(*Synthetic());
  ShmUserDir::Open(root.path(), /*create=*/true);
  const std::string lock = ShmCachePath(root.path(), key) + ".lock";
  const int fd = open(lock.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);  // another open file description: it conflicts
  ShmOpenOptions options = Options(root.path());
  options.lock_timeout_s = 0.3;
  ShmOpenResult r = OpenShmCache(Synthetic(), options);
  EXPECT_EQ(r.source, nullptr);
  EXPECT_THAT(r.failure, AllOf(HasSubstr(fmt::format("process {}", getpid())),
                               HasSubstr("held the cache lock"), HasSubstr(lock)));
  close(fd);
  EXPECT_TRUE(OpenShmCache(Synthetic(), Options(root.path())).source);
}

// The reader maps the file: another process truncating it would raise SIGBUS on the next
// access past its new end. The guarded gather turns that into an error naming the cache, in
// the process that built the file and in one that found it published, and the reader keeps
// working for rows still inside the file.
TEST(ShmHostileTest, ACacheFileTruncatedUnderAMappedReaderIsAnIoErrorNotSigbus) {
  ScratchDir root;
  ShmOpenResult builder = OpenShmCache(Synthetic(), Options(root.path()));
  ASSERT_TRUE(builder.source);
  ASSERT_TRUE(builder.built);
  ShmOpenResult r = OpenShmCache(Synthetic(), Options(root.path()));
  ASSERT_TRUE(r.source);
  ASSERT_FALSE(r.built);
  EXPECT_EQ(ReadRows(*r.source, {599}), ReadRows(*Synthetic(), {599}));  // its page is mapped
  EXPECT_EQ(ReadRows(*builder.source, {599}), ReadRows(*Synthetic(), {599}));
  ASSERT_EQ(truncate(r.path.c_str(), 4096), 0);
  for (const ShmOpenResult* reader : {&r, &builder}) {
    // Twice on the same thread: the first fault left the guard cleanly.
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::string message;
      EXPECT_EQ(ErrorCodeOf(
                    [&] {
                      ReadRows(*reader->source, {0, 599});
                    },
                    &message),
                ErrorCode::kIo);
      EXPECT_THAT(message, AllOf(HasSubstr("shared-memory cache " + r.path),
                                 HasSubstr("changed size while being read")));
    }
  }
}

// Sharing with a group is asked for: the group's folder is 2770 of the group, its files 0640
// of the group, and they are refused when open to others or writable by the whole group.
TEST(ShmGroupTest, AGroupsCachesLiveInItsFolderWithGroupModes) {
  ScratchDir root;
  const gid_t group = getegid();  // a group this user is always in
  ShmOpenResult r = OpenShmCache(Synthetic(), Options(root.path(), group));
  ASSERT_TRUE(r.source);
  EXPECT_TRUE(r.built);
  const std::string dir = ShmUserDirPath(root.path(), group);
  EXPECT_EQ(dir, fmt::format("{}/gpufeed-group-{}", root.path(), group));
  EXPECT_EQ(fs::path(r.path).parent_path().string(), dir);
  struct stat st {};
  ASSERT_EQ(lstat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 02770u);
  EXPECT_EQ(st.st_gid, group);
  for (const std::string& file : {r.path, r.path + ".lock", dir + "/secret"}) {
    ASSERT_EQ(lstat(file.c_str(), &st), 0) << file;
    EXPECT_EQ(st.st_mode & 07777, 0640u) << file;
    EXPECT_EQ(st.st_gid, group) << file;
  }
  // The user's own folder is untouched: sharing is per option, never the default.
  EXPECT_FALSE(fs::exists(ShmUserDirPath(root.path())));
  ShmOpenResult again = OpenShmCache(Synthetic(), Options(root.path(), group));
  ASSERT_TRUE(again.source);
  EXPECT_FALSE(again.built);
  EXPECT_EQ(ReadAll(*again.source), ReadAll(*Synthetic()));
  const auto listed = ListShmCaches(root.path(), std::to_string(group));
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].key, r.key);
  EXPECT_TRUE(ListShmCaches(root.path()).empty());
}

TEST(ShmGroupTest, AGroupFileWritableByTheGroupIsRebuiltAndAFolderOpenToOthersRefused) {
  ScratchDir root;
  const gid_t group = getegid();
  ShmOpenResult r = OpenShmCache(Synthetic(), Options(root.path(), group));
  ASSERT_TRUE(r.source);
  // Any member could rewrite a group-writable file: it is not served, it is rebuilt.
  ASSERT_EQ(chmod(r.path.c_str(), 0660), 0);
  ShmOpenResult again = OpenShmCache(Synthetic(), Options(root.path(), group));
  ASSERT_TRUE(again.source);
  EXPECT_TRUE(again.built);
  const std::string dir = ShmUserDirPath(root.path(), group);
  ASSERT_EQ(chmod(dir.c_str(), 02777), 0);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenShmCache(Synthetic(), Options(root.path(), group)); }, &message),
            ErrorCode::kIo);
  EXPECT_THAT(message, AllOf(HasSubstr(dir), HasSubstr("open to users outside group")));
}

TEST(ShmGroupTest, AnUnknownGroupIsAnInvalidArgument) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { ResolveShmGroup("no-such-group-gpufeed"); }, &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("'no-such-group-gpufeed': no such group"));
  EXPECT_EQ(ResolveShmGroup(std::to_string(getegid())), getegid());
  ScratchDir root;
  EXPECT_EQ(ErrorCodeOf([&] {
              OpenCached(Synthetic(), {.tier = CacheTier::kRam,
                                       .shm_dir = root.path(),
                                       .shm_group = "no-such-group-gpufeed",
                                       .verbose = false});
            }),
            ErrorCode::kInvalidArgument);
}

// Cross-user: a second uid (via setpriv, so only when run as root) plants things for the first.
constexpr int kOtherUid = 54321;

bool CanSwitchUser() {
  return geteuid() == 0 && std::system("command -v setpriv >/dev/null 2>&1") == 0;
}

// Runs `script` with sh as kOtherUid; returns its exit status.
int AsOtherUser(const std::string& script, int uid = kOtherUid) {
  const std::string command = fmt::format(
      "setpriv --reuid={0} --regid={0} --clear-groups sh -c '{1}' 2>/dev/null", uid, script);
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A shared root like /dev/shm: world-writable and sticky, reachable by the other user.
std::string SharedRoot(const ScratchDir& scratch) {
  const std::string root = scratch.Path("shm");
  fs::create_directories(root);
  chmod(scratch.path().c_str(), 0755);
  chmod(root.c_str(), 01777);
  return root;
}

TEST(ShmCrossUserTest, AFolderOrSymlinkPlantedByAnotherUserIsRefused) {
  if (!CanSwitchUser()) GTEST_SKIP() << "needs root and setpriv to act as a second user";
  ScratchDir scratch;
  const std::string root = SharedRoot(scratch);
  const std::string dir = ShmUserDirPath(root);
  // The other user makes the victim's folder first, open to all, hoping to be used.
  ASSERT_EQ(AsOtherUser(fmt::format("mkdir -m 0700 {}", dir)), 0);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenShmCache(Synthetic(), Options(root)); }, &message),
            ErrorCode::kIo);
  EXPECT_THAT(message, AllOf(HasSubstr(dir), HasSubstr(fmt::format("uid {}", kOtherUid))));
  EXPECT_EQ(ErrorCodeOf([&] { ListShmCaches(root); }), ErrorCode::kIo);
  ASSERT_EQ(AsOtherUser(fmt::format("rmdir {0} && mkdir -m 0777 {1}/mine && ln -s {1}/mine {0}",
                                    dir, root)),
            0);
  EXPECT_EQ(ErrorCodeOf([&] { OpenShmCache(Synthetic(), Options(root)); }, &message),
            ErrorCode::kIo);
  EXPECT_THAT(message, AllOf(HasSubstr(dir), HasSubstr("symlink")));
  EXPECT_TRUE(fs::is_empty(root + "/mine"));  // nothing was written through the link
}

TEST(ShmCrossUserTest, AnotherUserCanNeitherReadNorPlantNorSquat) {
  if (!CanSwitchUser()) GTEST_SKIP() << "needs root and setpriv to act as a second user";
  ScratchDir scratch;
  const std::string root = SharedRoot(scratch);
  ShmOpenResult r = OpenShmCache(Synthetic(), Options(root));
  ASSERT_TRUE(r.source);
  // Reading the samples, planting a FIFO or a file under the cache's name, squatting the lock:
  // all refused by the folder's mode.
  EXPECT_NE(AsOtherUser(fmt::format("cat {} >/dev/null", r.path)), 0);
  EXPECT_NE(AsOtherUser(fmt::format("ls {}", ShmUserDirPath(root))), 0);
  EXPECT_NE(AsOtherUser(fmt::format("mkfifo {}.tmp-1", r.path)), 0);
  EXPECT_NE(AsOtherUser(fmt::format("touch {}.lock", r.path)), 0);
  // The old spelling's names in the shared root itself are not the victim's: planting them
  // (a FIFO, a held lock) changes nothing.
  const std::string old_name = fmt::format("{}/gpufeed-{}", root, r.key);
  ASSERT_EQ(AsOtherUser(fmt::format("mkfifo {0} && touch {0}.lock", old_name)), 0);
  ShmOpenResult again = OpenShmCache(Synthetic(), Options(root));
  ASSERT_TRUE(again.source);
  EXPECT_FALSE(again.built);
  EXPECT_EQ(ReadAll(*again.source), ReadAll(*Synthetic()));
}

// Two members of a group share one cache; a user outside the group can neither use nor read
// it. Each user is a forked child that drops to its uid and groups (root only).
constexpr gid_t kSharedGid = 54400;  // no user of these tests has it as its own gid

// Runs `body` in a child as `uid` with primary group `uid` and supplementary `groups`;
// returns the child's exit status (body's return value), or -1.
int InChildAs(uid_t uid, std::vector<gid_t> groups, const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    if (setgroups(groups.size(), groups.data()) != 0 || setresgid(uid, uid, uid) != 0 ||
        setresuid(uid, uid, uid) != 0) {
      _exit(90);
    }
    int code = 91;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", static_cast<int>(uid), e.what());
      code = 92;
    }
    _exit(code);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ShmCrossUserTest, MembersOfTheGroupShareOneCacheOthersCannotUseIt) {
  if (!CanSwitchUser()) GTEST_SKIP() << "needs root to act as other users";
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "forks a multi-threaded process";
#endif
  ScratchDir scratch;
  const std::string root = SharedRoot(scratch);
  const std::string group = std::to_string(kSharedGid);
  const auto open = [&] {
    return OpenShmCache(Synthetic(), Options(root, ResolveShmGroup(group)));
  };
  // Member 1 builds; member 2 maps what member 1 built and reads the same samples.
  EXPECT_EQ(InChildAs(kOtherUid, {kSharedGid}, [&] { return open().built ? 0 : 1; }), 0);
  EXPECT_EQ(InChildAs(kOtherUid + 1, {kSharedGid},
                      [&] {
                        ShmOpenResult r = open();
                        if (!r.source || r.built) return 1;
                        return ReadAll(*r.source) == ReadAll(*Synthetic()) ? 0 : 2;
                      }),
            0);
  // Outside the group: naming the group is refused, and the files cannot be read.
  EXPECT_EQ(InChildAs(kOtherUid + 2, {},
                      [&] {
                        try {
                          open();
                        } catch (const Error& e) {
                          return e.code() == ErrorCode::kInvalidArgument ? 0 : 1;
                        }
                        return 2;
                      }),
            0);
  const std::string path = ShmCachePath(root, CacheKey(*Synthetic()), kSharedGid);
  EXPECT_NE(AsOtherUser(fmt::format("cat {} >/dev/null", path), kOtherUid + 2), 0);
  EXPECT_NE(AsOtherUser(fmt::format("touch {}.tmp-1", path), kOtherUid + 2), 0);
  EXPECT_EQ(AsOtherUser(fmt::format("cat {} >/dev/null", path), kOtherUid), 0);  // the maker
}

}  // namespace
}  // namespace gpufeed
