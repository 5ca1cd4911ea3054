// launch_workers (launcher.hpp): start the workers, supervise them, stop them together.
//
// Shape of a launch:
//   1. Everything a child needs between fork and exec (argv, envp, the signal mask to restore)
//      is built before fork: the child only makes async-signal-safe calls.
//   2. The forwarded signals are blocked while forking, so a child never runs the launcher's
//      handler; each child gives them the dispositions a plain exec from the caller would
//      (ignored stays ignored, anything else is SIG_DFL) and restores the caller's mask.
//   3. Each child reports a failed setup or exec through a close-on-exec pipe (8 bytes: step
//      and errno; end of file means exec succeeded), read when the child's exit is seen.
//   4. The supervising loop polls every 20 ms: forward recorded signals, observe exits
//      (waitid on each pid, WNOHANG), and apply the SIGTERM / SIGKILL deadlines.
// The process group's id is worker 0's pid. Worker 0 is observed with WNOWAIT and reaped last,
// so that the id cannot be reused by another process while kill(-pgid, ...) may still be sent.
#include "launcher.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>

#include "lamina/common.hpp"

extern char** environ;

namespace lamina::cli {
namespace {

using Clock = std::chrono::steady_clock;

// ---- signals: recorded by the handler, forwarded by the supervising loop ----

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kForwardedCount = 3;

// Received and not yet forwarded, per signal of kForwarded.
std::atomic<int> g_received[kForwardedCount];
std::atomic<bool> g_launching{false};
static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need lock-free atomics");

int forwarded_index(int sig) { return sig == SIGINT ? 0 : sig == SIGTERM ? 1 : 2; }

extern "C" void record_signal(int sig) { g_received[forwarded_index(sig)].fetch_add(1); }

// Installs record_signal for the forwarded signals, also where the caller ignores them (a
// script's background job ignores SIGINT; `lamina train` alone would still take it), and makes
// the workers' exit statuses collectable (SIGCHLD ignored, or SA_NOCLDWAIT, would reap them
// automatically); restores all of it on destruction.
class SignalForwarding {
 public:
  SignalForwarding() {
    for (int i = 0; i < kForwardedCount; ++i) {
      g_received[i].store(0);
      sigaction(kForwarded[i], nullptr, &previous_[i]);
      struct sigaction action {};
      action.sa_handler = record_signal;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESTART;
      sigaction(kForwarded[i], &action, nullptr);
    }
    sigaction(SIGCHLD, nullptr, &previous_sigchld_);
    if (previous_sigchld_.sa_handler == SIG_IGN || (previous_sigchld_.sa_flags & SA_NOCLDWAIT)) {
      struct sigaction action {};
      action.sa_handler = SIG_DFL;
      sigemptyset(&action.sa_mask);
      sigaction(SIGCHLD, &action, nullptr);
      sigchld_changed_ = true;
    }
  }
  ~SignalForwarding() {
    for (int i = 0; i < kForwardedCount; ++i) sigaction(kForwarded[i], &previous_[i], nullptr);
    if (sigchld_changed_) sigaction(SIGCHLD, &previous_sigchld_, nullptr);
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

  // Whether the caller ignored kForwarded[i] (SIG_IGN), as the workers will.
  bool caller_ignores(int i) const { return previous_[i].sa_handler == SIG_IGN; }

  // The signals received since the last call, each as many times as it arrived.
  std::vector<int> take_received() {
    std::vector<int> signals;
    for (int i = 0; i < kForwardedCount; ++i)
      for (int count = g_received[i].exchange(0); count > 0; --count)
        signals.push_back(kForwarded[i]);
    return signals;
  }

 private:
  struct sigaction previous_[kForwardedCount] {};
  struct sigaction previous_sigchld_ {};
  bool sigchld_changed_ = false;
};

// Blocks the forwarded signals in this thread while it forks; the children inherit the block.
class ForwardedSignalsBlocked {
 public:
  ForwardedSignalsBlocked() {
    sigset_t block;
    sigemptyset(&block);
    for (int sig : kForwarded) sigaddset(&block, sig);
    pthread_sigmask(SIG_BLOCK, &block, &caller_mask_);
  }
  ~ForwardedSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &caller_mask_, nullptr); }
  ForwardedSignalsBlocked(const ForwardedSignalsBlocked&) = delete;
  ForwardedSignalsBlocked& operator=(const ForwardedSignalsBlocked&) = delete;

  const sigset_t& caller_mask() const { return caller_mask_; }

 private:
  sigset_t caller_mask_;
};

// ---- what a child runs between fork and exec ----

// A null-terminated char* array over strings that are not modified any more.
std::vector<char*> c_array(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// What a child reports through its status pipe when it cannot exec the program.
enum class ChildStep : int { kJoinGroup, kDeathSignal, kExec };
struct ChildFailure {
  ChildStep step;
  int error;  // errno
};

struct ChildPlan {
  const char* program;
  char* const* argv;
  char* const* envp;
  pid_t pgid;    // 0: start the group (worker 0)
  pid_t parent;  // the launcher's pid
  int status_fd;
  int max_fd;  // the file descriptor limit, for closing when close_range is missing
  const sigset_t* caller_mask;
  const SignalForwarding* forwarding;
};

// Closes every descriptor >= 3 except keep, so that a worker inherits no descriptor of the
// caller's (lock files, sockets) that was opened without O_CLOEXEC.
void close_inherited_descriptors(int keep, int max_fd) {
#ifdef SYS_close_range
  const bool below = keep <= 3 || ::syscall(SYS_close_range, 3u, unsigned(keep - 1), 0u) == 0;
  if (below && ::syscall(SYS_close_range, unsigned(keep + 1), ~0u, 0u) == 0) return;
#endif
  for (int fd = 3; fd < max_fd; ++fd)
    if (fd != keep) ::close(fd);
}

// In the child: tells the launcher why exec did not happen (errno), and exits.
[[noreturn]] void report_child_failure(int status_fd, ChildStep step) {
  const ChildFailure failure{step, errno};
  const ssize_t ignored = ::write(status_fd, &failure, sizeof failure);
  (void)ignored;
  ::_exit(127);
}

// In the child: async-signal-safe calls only (the parent may have other threads).
[[noreturn]] void run_child(const ChildPlan& plan) {
  const int fd = plan.status_fd;
  if (::setpgid(0, plan.pgid) != 0) report_child_failure(fd, ChildStep::kJoinGroup);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) report_child_failure(fd, ChildStep::kDeathSignal);
  if (::getppid() != plan.parent) ::_exit(1);  // the launcher died before prctl took effect
  for (int i = 0; i < kForwardedCount; ++i) {
    struct sigaction action {};
    action.sa_handler = plan.forwarding->caller_ignores(i) ? SIG_IGN : SIG_DFL;
    sigemptyset(&action.sa_mask);
    ::sigaction(kForwarded[i], &action, nullptr);
  }
  ::sigprocmask(SIG_SETMASK, plan.caller_mask, nullptr);
  close_inherited_descriptors(plan.status_fd, plan.max_fd);
  ::execve(plan.program, plan.argv, plan.envp);
  report_child_failure(fd, ChildStep::kExec);
}

// ---- building each worker's command line and environment ----

std::string variable_name(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// The caller's environment, less the names that additions set, then the additions (of a name
// given twice, the later one).
std::vector<std::string> worker_environment(
    const std::vector<std::pair<std::string, std::string>>& additions) {
  auto added = [&](const std::string& name, size_t from) {
    for (size_t i = from; i < additions.size(); ++i)
      if (additions[i].first == name) return true;
    return false;
  };
  std::vector<std::string> entries;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text = *entry;
    if (!added(variable_name(text), 0)) entries.push_back(text);
  }
  for (size_t i = 0; i < additions.size(); ++i)
    if (!added(additions[i].first, i + 1))
      entries.push_back(additions[i].first + "=" + additions[i].second);
  return entries;
}

void validate(const WorkerSpec& spec) {
  LAMINA_REQUIRE(!spec.program.empty(),
                 "launch_workers: no program given; set WorkerSpec::program to the path of "
                 "the executable the workers run");
  LAMINA_REQUIRE(!spec.args.empty(),
                 "launch_workers: no workers to start; WorkerSpec::args needs one argument "
                 "list per worker");
  LAMINA_REQUIRE(spec.labels.empty() || spec.labels.size() == spec.args.size(),
                 "launch_workers: ", spec.labels.size(), " labels for ", spec.args.size(),
                 " workers; give one label per worker, or none");
  LAMINA_REQUIRE(std::isfinite(spec.grace_seconds) && spec.grace_seconds >= 0,
                 "launch_workers: grace_seconds must be a number of seconds >= 0, got ",
                 spec.grace_seconds);
  for (const auto& [name, value] : spec.env)
    LAMINA_REQUIRE(!name.empty() && name.find('=') == std::string::npos, "launch_workers: '", name,
                   "' cannot name an environment variable (empty, or contains '=')");
  for (int sig : spec.stop_signals)
    LAMINA_REQUIRE(sig == SIGINT || sig == SIGTERM || sig == SIGHUP,
                   "launch_workers: stop_signals may hold SIGINT, SIGTERM and SIGHUP only "
                   "(the signals that are forwarded), got ",
                   sig);
}

// ---- supervising ----

struct Worker {
  pid_t pid = -1;
  int status_fd = -1;  // read end of the child's status pipe
  bool running = false;
};

std::string worker_name(const WorkerSpec& spec, size_t r) {
  std::string name = "worker " + std::to_string(r);
  if (!spec.labels.empty() && !spec.labels[r].empty()) name += " (" + spec.labels[r] + ")";
  return name;
}

// How a worker ended: its status (exit code, or 128+signal) and the words for it.
struct Ending {
  int status;
  std::string what;  // "exited with status 3"
};

Ending ending_of(const siginfo_t& info, int status_fd, const std::string& program) {
  ChildFailure failure{};
  ssize_t got;
  do {
    got = ::read(status_fd, &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  if (got == sizeof failure) {
    const std::string reason = std::strerror(failure.error);
    switch (failure.step) {
      case ChildStep::kJoinGroup:
        return {127, "could not join the workers' process group (" + reason + ")"};
      case ChildStep::kDeathSignal:
        return {127, "could not set its parent-death signal (" + reason + ")"};
      case ChildStep::kExec:
        return {127, "could not run " + program + ": " + reason};
    }
  }
  if (info.si_code == CLD_EXITED)
    return {info.si_status, "exited with status " + std::to_string(info.si_status)};
  const char* description = ::strsignal(info.si_status);
  return {128 + info.si_status, "was killed by signal " + std::to_string(info.si_status) + " (" +
                                    (description ? description : "unknown") + ")"};
}

void sleep_briefly() {
  const timespec interval{0, 20 * 1000 * 1000};
  ::nanosleep(&interval, nullptr);  // EINTR: a signal to forward, the loop comes back sooner
}

void close_status_fd(Worker& worker) {
  if (worker.status_fd >= 0) ::close(worker.status_fd);
  worker.status_fd = -1;
}

// A fork or pipe failed after some workers started: kill and reap them, then report.
[[noreturn]] void abandon_start(std::vector<Worker>& workers, pid_t pgid, const WorkerSpec& spec,
                                size_t r, const char* call, int error) {
  if (pgid > 0) ::kill(-pgid, SIGKILL);
  for (Worker& worker : workers) {
    close_status_fd(worker);
    if (worker.pid <= 0) continue;
    ::kill(worker.pid, SIGKILL);  // one that had not joined the group yet
    while (::waitpid(worker.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  fail("could not start ", worker_name(spec, r), " of ", workers.size(), ": ", call, ": ",
       std::strerror(error),
       error == EAGAIN || error == EMFILE || error == ENFILE || error == ENOMEM
           ? " (a process, file or memory limit is reached; see ulimit -a)"
           : "");
}

}  // namespace

int launch_workers(const WorkerSpec& spec) {
  validate(spec);
  LAMINA_REQUIRE(!g_launching.exchange(true),
                 "launch_workers: already running in this process; one launch at a time");
  struct Release {
    ~Release() { g_launching.store(false); }
  } release;
  const size_t n = spec.args.size();

  // 1. Command lines and environments, complete before any fork.
  std::vector<std::vector<std::string>> argv_strings(n), env_strings(n);
  std::vector<std::vector<char*>> argv(n), envp(n);
  for (size_t r = 0; r < n; ++r) {
    argv_strings[r].push_back(spec.argv0.empty() ? spec.program : spec.argv0);
    argv_strings[r].insert(argv_strings[r].end(), spec.args[r].begin(), spec.args[r].end());
    auto additions = spec.env;
    additions.emplace_back(kWorkerRankVariable, std::to_string(r));
    additions.emplace_back(kWorkerCountVariable, std::to_string(n));
    env_strings[r] = worker_environment(additions);
    argv[r] = c_array(argv_strings[r]);
    envp[r] = c_array(env_strings[r]);
  }
  rlimit files{};
  const int max_fd = ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                         ? int(std::min<rlim_t>(files.rlim_cur, 1 << 20))
                         : 1 << 16;

  // 2. Start them.
  SignalForwarding forwarding;
  std::vector<Worker> workers(n);
  pid_t pgid = 0;
  {
    ForwardedSignalsBlocked blocked;
    for (size_t r = 0; r < n; ++r) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
        abandon_start(workers, pgid, spec, r, "pipe", errno);
      ChildPlan plan{};
      plan.program = spec.program.c_str();
      plan.argv = argv[r].data();
      plan.envp = envp[r].data();
      plan.pgid = pgid;
      plan.parent = ::getpid();
      plan.status_fd = fds[1];
      plan.max_fd = max_fd;
      plan.caller_mask = &blocked.caller_mask();
      plan.forwarding = &forwarding;
      const pid_t pid = ::fork();
      if (pid == 0) run_child(plan);
      const int fork_error = errno;
      ::close(fds[1]);
      workers[r].status_fd = fds[0];
      if (pid < 0) abandon_start(workers, pgid, spec, r, "fork", fork_error);
      if (pgid == 0) pgid = pid;
      ::setpgid(pid, pgid);  // also done by the child; whichever runs first wins the race
      workers[r].pid = pid;
      workers[r].running = true;
    }
  }

  // 3. Supervise until every worker has exited.
  const auto grace = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(spec.grace_seconds));
  size_t running = n;
  bool leader_reaped = false;  // worker 0 was reaped by someone else (see ECHILD below)
  std::optional<int> failure_status;
  bool stop_forwarded = false;
  std::optional<size_t> first_exited;
  std::optional<Clock::time_point> kill_at;
  bool killed = false;
  while (running > 0) {
    for (int sig : forwarding.take_received()) {
      ::kill(-pgid, sig);
      if (std::count(spec.stop_signals.begin(), spec.stop_signals.end(), sig) > 0)
        stop_forwarded = true;
    }
    for (size_t r = 0; r < n; ++r) {
      Worker& worker = workers[r];
      if (!worker.running) continue;
      siginfo_t info{};
      // Worker 0 leads the group: observed only, reaped after the loop.
      const int options = WEXITED | WNOHANG | (r == 0 ? WNOWAIT : 0);
      Ending ending{0, ""};
      if (::waitid(P_PID, id_t(worker.pid), &info, options) != 0) {
        if (errno == EINTR) continue;
        // ECHILD: another part of the program reaped it (waitpid(-1) in a SIGCHLD handler).
        ending = {1,
                  "ended, but its exit status was collected elsewhere in the launcher "
                  "(by a SIGCHLD handler calling waitpid(-1)?)"};
        if (r == 0) leader_reaped = true;
      } else if (info.si_pid == 0) {
        continue;  // still running
      } else {
        ending = ending_of(info, worker.status_fd, spec.program);
      }
      worker.running = false;
      close_status_fd(worker);
      --running;
      if (!first_exited) first_exited = r;
      if (ending.status != 0 && !failure_status) {
        failure_status = ending.status;
        std::cerr << worker_name(spec, r) << " " << ending.what
                  << (running > 0 ? "; stopping the other workers" : "") << std::endl;
        if (running > 0) {
          ::kill(-pgid, SIGTERM);
          if (!kill_at) kill_at = Clock::now() + grace;
        }
      }
    }
    if (running == 0) break;
    if (!kill_at && stop_forwarded && first_exited) kill_at = Clock::now() + grace;
    if (kill_at && !killed && Clock::now() >= *kill_at) {
      if (!failure_status) {  // a forwarded stop that some worker did not follow
        failure_status = 128 + SIGKILL;
        const auto straggler =
            std::find_if(workers.begin(), workers.end(), [](const Worker& w) { return w.running; });
        std::cerr << worker_name(spec, size_t(straggler - workers.begin())) << " had not stopped "
                  << spec.grace_seconds << " s after " << worker_name(spec, *first_exited)
                  << " did; killing the remaining workers" << std::endl;
      }
      ::kill(-pgid, SIGKILL);
      killed = true;
    }
    sleep_briefly();
  }

  // 4. After a failure, nothing of the group may linger: the workers' own children that
  // outlived them get SIGKILL too. Worker 0, still unreaped, keeps the group id ours until then.
  if (failure_status && !leader_reaped) ::kill(-pgid, SIGKILL);
  if (!leader_reaped)
    while (::waitpid(workers[0].pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  return failure_status.value_or(0);
}

}  // namespace lamina::cli
