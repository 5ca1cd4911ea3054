// launch_workers: ranks and environment reach every worker; a failure (exit status, signal,
// a program that cannot run) stops the others within the grace and returns its status; a
// worker ignoring SIGTERM is SIGKILLed; SIGINT given to the launcher reaches every worker; the
// workers share a process group of their own, inherit no stray descriptor, and die with a
// killed launcher. Workers are /bin/sh scripts whose $1 is the test's temporary directory, and
// once this test program itself (a worker mode, below).
// Time bounds are generous: they tell "stopped by the launcher" from "ran its 60 s", which
// is long enough for that and short enough that a broken launcher fails a test, not hangs it.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lamina/common.hpp"
#include "launcher.hpp"

namespace lamina::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Alive and not a zombie (a killed worker's orphaned child may wait a moment for init).
bool process_running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state != 'Z' && state != 'X';
}

// Polls until done() or the timeout; returns done().
template <class Done>
bool eventually(Done done, double timeout_seconds = 10) {
  const auto start = Clock::now();
  while (!done() && seconds_since(start) < timeout_seconds)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

pid_t read_pid(const fs::path& path) { return pid_t(std::atol(read_text(path).c_str())); }

// Worker mode: this test program, run by launch_workers as "/proc/self/exe" (the way the
// lamina tool runs itself) with LAMINA_TEST_SIGHUP_WORKER set to a directory, takes SIGHUP with
// a handler of its own, as `lamina train` does even where its parent ignored SIGHUP: it writes
// ready_RANK, then hup_RANK when the signal comes, and exits 0 (7 when none came in 60 s).
volatile sig_atomic_t g_worker_got_hup = 0;
extern "C" void on_worker_hup(int) { g_worker_got_hup = 1; }

[[noreturn]] void run_sighup_worker(const std::string& dir) {
  struct sigaction action {};
  action.sa_handler = on_worker_hup;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGHUP, &action, nullptr);
  const std::string rank = std::getenv("LAMINA_WORKER_RANK");
  std::ofstream(dir + "/ready_" + rank) << "ready";
  for (int i = 0; i < 6000 && !g_worker_got_hup; ++i) ::usleep(10 * 1000);
  if (!g_worker_got_hup) ::_exit(7);
  std::ofstream(dir + "/hup_" + rank) << "hup";
  ::_exit(0);
}

// Before gtest's main: a worker never runs the tests.
const bool kIsSighupWorker = [] {
  if (const char* dir = std::getenv("LAMINA_TEST_SIGHUP_WORKER")) run_sighup_worker(dir);
  return false;
}();

// 60 s of 50 ms sleeps: a shell running it takes a trapped signal within 50 ms, where a
// foreground `sleep 60` would delay its trap until the sleep ends.
const std::string kPoll60 = "i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done";

// SIGINT at its default for the test's duration: a background job of a script (ctest &)
// starts with SIGINT ignored, which its workers would inherit and sh could not trap.
class DefaultSigint {
 public:
  DefaultSigint() {
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &previous_);
  }
  ~DefaultSigint() { ::sigaction(SIGINT, &previous_, nullptr); }

 private:
  struct sigaction previous_ {};
};

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "lamina_launcher_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // One worker per script, each run as `sh -c SCRIPT sh DIR`.
  WorkerSpec sh_workers(const std::vector<std::string>& scripts) const {
    WorkerSpec spec;
    spec.program = "/bin/sh";
    for (const std::string& script : scripts) spec.args.push_back({"-c", script, "sh", dir_});
    spec.grace_seconds = 1;
    return spec;
  }

  // Writes this shell's pid to $1/NAME, complete when the file appears.
  static std::string write_pid(const std::string& name) {
    return "echo $$ > \"$1/" + name + ".tmp\" && mv \"$1/" + name + ".tmp\" \"$1/" + name + "\"; ";
  }

  fs::path dir_;
};

TEST_F(LauncherTest, AllSucceedEachWithItsRankAndEnvironment) {
  ::setenv("LAMINA_TEST_INHERITED", "inherited", 1);
  ::setenv("LAMINA_TEST_OVERRIDDEN", "old", 1);
  ::setenv("LAMINA_WORKER_RANK", "stale", 1);
  const std::string script =
      "echo \"$LAMINA_WORKER_RANK $LAMINA_WORKERS $LAMINA_TEST_EXTRA $LAMINA_TEST_OVERRIDDEN "
      "$LAMINA_TEST_INHERITED $2\" > \"$1/out_$LAMINA_WORKER_RANK\"";
  WorkerSpec spec = sh_workers({script, script, script});
  for (size_t r = 0; r < spec.args.size(); ++r) spec.args[r].push_back("arg" + std::to_string(r));
  spec.env = {{"LAMINA_TEST_EXTRA", "extra"}, {"LAMINA_TEST_OVERRIDDEN", "new"}};

  EXPECT_EQ(launch_workers(spec), 0);
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(read_text(dir_ / ("out_" + std::to_string(r))),
              std::to_string(r) + " 3 extra new inherited arg" + std::to_string(r) + "\n");
  ::unsetenv("LAMINA_TEST_INHERITED");
  ::unsetenv("LAMINA_TEST_OVERRIDDEN");
  ::unsetenv("LAMINA_WORKER_RANK");
}

TEST_F(LauncherTest, AWorkerThatFinishesFirstWaitsForTheOthers) {
  WorkerSpec spec = sh_workers({"exit 0", "sleep 1.5; touch \"$1/done\""});
  spec.grace_seconds = 0.2;  // no failure and no stop: the grace must not apply
  EXPECT_EQ(launch_workers(spec), 0);
  EXPECT_TRUE(fs::exists(dir_ / "done"));
}

TEST_F(LauncherTest, AFailureStopsTheOthersAndReturnsItsStatus) {
  // Worker 2 fails once 0 and 1 are running; 1 says whether it was asked to stop (SIGTERM).
  WorkerSpec spec = sh_workers(
      {write_pid("sleeper") + "exec sleep 60",
       "trap 'touch \"$1/terminated\"; exit 0' TERM; " + write_pid("polite") + kPoll60,
       "while [ ! -f \"$1/sleeper\" ] || [ ! -f \"$1/polite\" ]; do sleep 0.05; done; exit 3"});
  spec.labels = {"GPU 0", "GPU 1", "GPU 2"};
  const auto start = Clock::now();
  ::testing::internal::CaptureStderr();
  const int status = launch_workers(spec);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, 3);
  EXPECT_LT(seconds_since(start), spec.grace_seconds + 5);
  EXPECT_THAT(err, HasSubstr("worker 2 (GPU 2) exited with status 3; stopping the other workers"));
  EXPECT_THAT(err, Not(HasSubstr("worker 0")));  // stopped by the launcher: not a second report
  EXPECT_FALSE(process_running(read_pid(dir_ / "sleeper")));
  EXPECT_TRUE(fs::exists(dir_ / "terminated"));
}

TEST_F(LauncherTest, AFailedWorkersOwnChildrenDoNotOutliveTheLaunch) {
  // The child ignores SIGTERM and outlives its worker: only the final SIGKILL to the group
  // ends it.
  WorkerSpec spec =
      sh_workers({"(trap '' TERM; exec sleep 60) & echo $! > \"$1/child.tmp\"; "
                  "mv \"$1/child.tmp\" \"$1/child\"; exit 3"});
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(launch_workers(spec), 3);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              AllOf(HasSubstr("worker 0 exited with status 3"), Not(HasSubstr("stopping"))));
  const pid_t child = read_pid(dir_ / "child");
  EXPECT_TRUE(eventually([&] { return !process_running(child); }, 5));
}

TEST_F(LauncherTest, AWorkerKilledBySignalReturns128PlusTheSignal) {
  WorkerSpec spec = sh_workers({"sleep 60", "kill -9 $$"});
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(launch_workers(spec), 128 + 9);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("worker 1 was killed by signal 9 (Killed); stopping the other workers"));
}

TEST_F(LauncherTest, AWorkerIgnoringSigtermIsKilledAfterTheGrace) {
  // The worker and its own child (the backgrounded sleep) both ignore SIGTERM.
  WorkerSpec spec = sh_workers(
      {"trap '' TERM; sleep 60 & echo $! > \"$1/child\"; " + write_pid("stubborn") + "wait",
       "while [ ! -f \"$1/stubborn\" ]; do sleep 0.05; done; exit 4"});
  const auto start = Clock::now();
  ::testing::internal::CaptureStderr();
  const int status = launch_workers(spec);
  ::testing::internal::GetCapturedStderr();
  const double elapsed = seconds_since(start);
  EXPECT_EQ(status, 4);
  EXPECT_GE(elapsed, spec.grace_seconds * 0.9);  // it was given the grace...
  EXPECT_LT(elapsed, spec.grace_seconds + 5);    // ...and no more
  EXPECT_FALSE(process_running(read_pid(dir_ / "stubborn")));
  const pid_t child = read_pid(dir_ / "child");
  EXPECT_TRUE(eventually([&] { return !process_running(child); }, 5));
}

TEST_F(LauncherTest, AProgramThatCannotRunIsAFailureNamingItAndTheReason) {
  WorkerSpec spec;
  spec.program = (dir_ / "no-such-program").string();
  spec.args = {{}, {}};
  spec.labels = {"GPU 0", "GPU 1"};
  spec.grace_seconds = 1;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(launch_workers(spec), 127);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("could not run " + spec.program + ": No such file or directory"));
  // Both workers fail alike; whichever the launcher sees first is named.
  EXPECT_THAT(err, ContainsRegex("worker [01] \\(GPU [01]\\) could not run"));
}

TEST_F(LauncherTest, SigintToTheLauncherReachesEveryWorker) {
  DefaultSigint default_sigint;
  const std::string worker =
      "trap 'kill $child; echo stopped > \"$1/stopped_$LAMINA_WORKER_RANK\"; exit 0' INT; "
      "sleep 60 & child=$!; touch \"$1/ready_$LAMINA_WORKER_RANK\"; wait $child; exit 5";
  WorkerSpec spec = sh_workers({worker, worker});
  std::thread interrupter([&] {
    // Only once both traps are set: before, SIGINT would end a worker (or, with no launcher
    // running, this test program).
    if (eventually([&] { return fs::exists(dir_ / "ready_0") && fs::exists(dir_ / "ready_1"); })) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      ::kill(::getpid(), SIGINT);
    }
  });
  const int status = launch_workers(spec);
  interrupter.join();
  EXPECT_EQ(status, 0);
  EXPECT_TRUE(fs::exists(dir_ / "stopped_0"));
  EXPECT_TRUE(fs::exists(dir_ / "stopped_1"));
  // The test program's own SIGINT disposition is back.
  struct sigaction current {};
  ::sigaction(SIGINT, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
}

TEST_F(LauncherTest, AWorkerThatOutlivesAForwardedStopIsKilledAfterTheGrace) {
  DefaultSigint default_sigint;
  WorkerSpec spec = sh_workers({"trap 'exit 0' INT; touch \"$1/ready_0\"; " + kPoll60,
                                "trap '' INT; touch \"$1/ready_1\"; sleep 60"});
  spec.labels = {"GPU 0", "GPU 1"};
  std::thread interrupter([&] {
    if (eventually([&] { return fs::exists(dir_ / "ready_0") && fs::exists(dir_ / "ready_1"); }))
      ::kill(::getpid(), SIGINT);
  });
  const auto start = Clock::now();
  ::testing::internal::CaptureStderr();
  const int status = launch_workers(spec);
  const std::string err = ::testing::internal::GetCapturedStderr();
  interrupter.join();
  EXPECT_EQ(status, 128 + SIGKILL);
  EXPECT_LT(seconds_since(start), spec.grace_seconds + 8);
  EXPECT_THAT(err, HasSubstr("worker 1 (GPU 1) had not stopped 1 s after worker 0 (GPU 0) did"));
}

TEST_F(LauncherTest, SighupIsForwardedEvenWhereTheCallerIgnoresIt) {
  struct sigaction ignore {};
  struct sigaction previous_hup {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGHUP, &ignore, &previous_hup);  // as nohup does
  WorkerSpec spec;
  spec.program = "/proc/self/exe";
  spec.args = {{}, {}};
  spec.env = {{"LAMINA_TEST_SIGHUP_WORKER", dir_.string()}};
  std::thread hangup([&] {
    if (eventually([&] { return fs::exists(dir_ / "ready_0") && fs::exists(dir_ / "ready_1"); }))
      ::kill(::getpid(), SIGHUP);
  });
  const int status = launch_workers(spec);
  hangup.join();
  ::sigaction(SIGHUP, &previous_hup, nullptr);
  EXPECT_EQ(status, 0);
  EXPECT_TRUE(fs::exists(dir_ / "hup_0"));
  EXPECT_TRUE(fs::exists(dir_ / "hup_1"));
}

TEST_F(LauncherTest, WorkersStartWithTheCallersSignalDispositions) {
  DefaultSigint default_sigint;
  struct sigaction ignore {};
  struct sigaction previous_hup {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGHUP, &ignore, &previous_hup);
  const int status = launch_workers(
      sh_workers({"sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status > \"$1/ignored\""}));
  struct sigaction hup_after {};
  ::sigaction(SIGHUP, &previous_hup, &hup_after);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(hup_after.sa_handler, SIG_IGN);  // the caller's disposition is back
  const unsigned long long ignored = std::stoull(read_text(dir_ / "ignored"), nullptr, 16);
  EXPECT_TRUE(ignored & (1ull << (SIGHUP - 1))) << "SigIgn " << std::hex << ignored;
  EXPECT_FALSE(ignored & (1ull << (SIGINT - 1))) << "SigIgn " << std::hex << ignored;
  EXPECT_FALSE(ignored & (1ull << (SIGTERM - 1))) << "SigIgn " << std::hex << ignored;
}

TEST_F(LauncherTest, WorkersShareAProcessGroupOfTheirOwnAndNoStrayDescriptor) {
  const int stray = ::open("/dev/null", O_RDONLY);  // opened without O_CLOEXEC
  ASSERT_GE(stray, 0);
  const std::string script =
      "read -r _ _ _ _ pgid _ < /proc/$$/stat; echo $pgid > \"$1/pgid_$LAMINA_WORKER_RANK\"; "
      "if [ -e /proc/$$/fd/" +
      std::to_string(stray) + " ]; then touch \"$1/leaked\"; fi";
  EXPECT_EQ(launch_workers(sh_workers({script, script, script})), 0);
  ::close(stray);
  const std::string group = read_text(dir_ / "pgid_0");
  EXPECT_FALSE(group.empty());
  EXPECT_EQ(read_text(dir_ / "pgid_1"), group);
  EXPECT_EQ(read_text(dir_ / "pgid_2"), group);
  EXPECT_NE(std::atol(group.c_str()), long(::getpgrp()));
  EXPECT_FALSE(fs::exists(dir_ / "leaked"));
}

TEST_F(LauncherTest, WorkersDieWithAKilledLauncher) {
  WorkerSpec spec = sh_workers({write_pid("worker") + "exec sleep 60"});
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) ::_exit(launch_workers(spec));
  const bool started = eventually([&] { return fs::exists(dir_ / "worker"); });
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  ASSERT_TRUE(started);
  const pid_t worker = read_pid(dir_ / "worker");
  EXPECT_TRUE(eventually([&] { return !process_running(worker); }, 5));
}

TEST_F(LauncherTest, SpecMistakesAreErrorsSayingWhatToFix) {
  auto error_of = [](const WorkerSpec& spec) -> std::string {
    try {
      launch_workers(spec);
    } catch (const lamina::Error& e) {
      return e.what();
    }
    return "no error";
  };
  WorkerSpec no_workers = sh_workers({});
  EXPECT_THAT(error_of(no_workers), HasSubstr("one argument list per worker"));
  WorkerSpec labels = sh_workers({"true", "true"});
  labels.labels = {"GPU 0"};
  EXPECT_THAT(error_of(labels), HasSubstr("1 labels for 2 workers"));
  WorkerSpec env = sh_workers({"true"});
  env.env = {{"A=B", "c"}};
  EXPECT_THAT(error_of(env), HasSubstr("'A=B' cannot name an environment variable"));
  WorkerSpec grace = sh_workers({"true"});
  grace.grace_seconds = -1;
  EXPECT_THAT(error_of(grace), HasSubstr("grace_seconds must be"));
}

}  // namespace
}  // namespace lamina::cli
