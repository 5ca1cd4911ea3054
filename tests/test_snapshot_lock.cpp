// SnapshotPrefixLock: one holder per snapshot prefix, across open file descriptions and
// processes; the refusal names the prefix and the holder; release on destruction and on the
// holder's death; hostile lock files (a FIFO, a directory, escape codes) are clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lamina/snapshot_lock.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::error_of;

class SnapshotLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "lamina_lock_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    prefix_ = (dir_ / "run").string();
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string lock_content() const {
    std::ifstream in(SnapshotPrefixLock::lock_path(prefix_));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  fs::path dir_;
  std::string prefix_;
};

TEST_F(SnapshotLockTest, TheHolderRecordsItsPidAndCommandLine) {
  SnapshotPrefixLock lock(prefix_);
  EXPECT_EQ(lock.path(), prefix_ + ".lock");
  EXPECT_THAT(lock_content(), AllOf(HasSubstr("pid " + std::to_string(::getpid()) + "\n"),
                                    HasSubstr("command "), HasSubstr("test_snapshot_lock")));
}

TEST_F(SnapshotLockTest, ASecondLockIsRefusedNamingThePrefixAndTheHolder) {
  SnapshotPrefixLock first(prefix_);
  // Another open file description of the same file, in the same process.
  EXPECT_THAT(error_of([&] { SnapshotPrefixLock second(prefix_); }),
              AllOf(HasSubstr("snapshot prefix '" + prefix_ + "' is in use"),
                    HasSubstr("process " + std::to_string(::getpid()) + " ("),
                    HasSubstr("test_snapshot_lock"), HasSubstr(prefix_ + ".lock")));
  // The refusal did not disturb the holder's record.
  EXPECT_THAT(lock_content(), HasSubstr("pid " + std::to_string(::getpid())));
}

TEST_F(SnapshotLockTest, AReleasedLockCanBeRetakenAndTheFileStays) {
  { SnapshotPrefixLock first(prefix_); }
  EXPECT_TRUE(fs::exists(prefix_ + ".lock"));
  SnapshotPrefixLock again(prefix_);
  EXPECT_THAT(lock_content(), HasSubstr("pid " + std::to_string(::getpid())));
  // Other prefixes in the same directory are independent.
  SnapshotPrefixLock other((dir_ / "run2").string());
}

TEST_F(SnapshotLockTest, AMovedLockStaysHeldUntilItsLastOwnerGoes) {
  auto lock = std::make_unique<SnapshotPrefixLock>(prefix_);
  SnapshotPrefixLock moved(std::move(*lock));
  lock.reset();  // the moved-from object releases nothing
  EXPECT_THAT(error_of([&] { SnapshotPrefixLock second(prefix_); }), HasSubstr("is in use"));
  SnapshotPrefixLock assigned((dir_ / "elsewhere").string());
  assigned = std::move(moved);  // releases "elsewhere", takes over the prefix
  EXPECT_EQ(assigned.prefix(), prefix_);
  EXPECT_THAT(error_of([&] { SnapshotPrefixLock second(prefix_); }), HasSubstr("is in use"));
  SnapshotPrefixLock elsewhere((dir_ / "elsewhere").string());
}

// A child process holds the lock; the parent is refused with the child's pid, and gets the
// lock once the child is killed (SIGKILL: the kernel releases it, no stale lock remains).
TEST_F(SnapshotLockTest, AnotherProcessHoldingThePrefixIsNamedAndItsDeathReleasesIt) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    int status = 0;
    try {
      SnapshotPrefixLock lock(prefix_);
      (void)!::write(ready[1], "1", 1);
      ::pause();  // until killed
    } catch (...) {
      status = 1;
    }
    (void)!::write(ready[1], "0", 1);
    ::_exit(status);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(byte, '1') << "the child could not take the lock";
  EXPECT_THAT(error_of([&] { SnapshotPrefixLock second(prefix_); }),
              AllOf(HasSubstr("'" + prefix_ + "' is in use"),
                    HasSubstr("process " + std::to_string(child) + " (")));
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  SnapshotPrefixLock mine(prefix_);  // no stale lock after a crash
  EXPECT_THAT(lock_content(), HasSubstr("pid " + std::to_string(::getpid())));
}

// A holder that has not written its record yet (or a foreign program holding the file), and
// one whose record holds terminal escape codes: the message stays one printable line.
TEST_F(SnapshotLockTest, TheHoldersRecordIsReadDefensively) {
  const std::string path = SnapshotPrefixLock::lock_path(prefix_);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_THAT(error_of([&] { SnapshotPrefixLock second(prefix_); }),
              HasSubstr("another process (its lock file does not say which"));
  const std::string hostile = "pid 42\ncommand evil\x1b[2J\x07 run\n";
  ASSERT_EQ(::write(fd, hostile.data(), hostile.size()), ssize_t(hostile.size()));
  const std::string message = error_of([&] { SnapshotPrefixLock second(prefix_); });
  EXPECT_THAT(message, AllOf(HasSubstr("process 42 (evil?[2J? run)"), Not(HasSubstr("\x1b"))));
  const std::string not_a_pid = "pid 42; rm -rf /\n";
  ASSERT_EQ(::pwrite(fd, not_a_pid.data(), not_a_pid.size(), 0), ssize_t(not_a_pid.size()));
  ASSERT_EQ(::ftruncate(fd, off_t(not_a_pid.size())), 0);
  EXPECT_THAT(error_of([&] { SnapshotPrefixLock second(prefix_); }),
              AllOf(HasSubstr("does not say which"), Not(HasSubstr("rm -rf"))));
  ::close(fd);
  SnapshotPrefixLock mine(prefix_);  // garbage left by an earlier holder is rewritten
  EXPECT_EQ(lock_content().rfind("pid " + std::to_string(::getpid()) + "\n", 0), 0u);
}

TEST_F(SnapshotLockTest, LockFilesThatCannotBeLockedAreErrorsNamingThePath) {
  const std::string missing_dir = (dir_ / "no_such_dir" / "run").string();
  EXPECT_THAT(error_of([&] { SnapshotPrefixLock lock(missing_dir); }),
              AllOf(HasSubstr(missing_dir + ".lock"), HasSubstr("No such file or directory")));
  fs::create_directory(prefix_ + ".lock");
  EXPECT_THAT(error_of([&] { SnapshotPrefixLock lock(prefix_); }),
              AllOf(HasSubstr("'" + prefix_ + ".lock'"), HasSubstr("Is a directory")));
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo((fifo + ".lock").c_str(), 0644), 0);
  EXPECT_THAT(error_of([&] { SnapshotPrefixLock lock(fifo); }),  // refused, not a hang
              AllOf(HasSubstr("'" + fifo + ".lock'"), HasSubstr("not a regular file")));
  EXPECT_THAT(error_of([&] { SnapshotPrefixLock lock(""); }), HasSubstr("empty snapshot prefix"));
  // A symbolic link is refused, and the file it points to is left as it was.
  const std::string victim = (dir_ / "precious").string(), linked = (dir_ / "linked").string();
  std::ofstream(victim) << "keep me";
  fs::create_symlink(victim, linked + ".lock");
  EXPECT_THAT(error_of([&] { SnapshotPrefixLock lock(linked); }),
              AllOf(HasSubstr("'" + linked + ".lock'"), HasSubstr("symbolic link")));
  std::ifstream in(victim);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "keep me");
}

}  // namespace
}  // namespace lamina
