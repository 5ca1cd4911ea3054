// The process launcher behind `lamina train --gpu 0,1`: one worker process per GPU for
// data-parallel training, as torchrun runs them. The workers live and die together: a worker
// that fails stops the others (a peer left running would wait forever in its next
// all-reduce), a stop signal given to the launcher reaches every worker once, and no worker
// outlives a launcher that is killed.
//
// Linux only (fork/exec, process groups, PR_SET_PDEATHSIG). Conventions:
//   - Worker r runs `program` with argv = {argv0 or program, args[r]...} (program is not
//     searched in PATH) and the launcher's environment plus env, LAMINA_WORKER_RANK=r and
//     LAMINA_WORKERS=n (these override inherited variables of the same name; a later entry of
//     env overrides an earlier one). Workers inherit stdin, stdout and stderr, no other file
//     descriptor.
//   - A worker's status is its exit code, or 128+N when signal N killed it (as a shell says).
//   - The workers run in a process group of their own, so that a terminal's Ctrl-C reaches
//     only the launcher, which forwards it; whatever the launcher sends (forwarded signals,
//     SIGTERM, SIGKILL) goes to the whole group, the workers' own child processes included.
#pragma once

#include <signal.h>

#include <string>
#include <utility>
#include <vector>

namespace lamina::cli {

// What launch_workers adds to worker r's environment: its rank and the worker count.
constexpr const char* kWorkerRankVariable = "LAMINA_WORKER_RANK";
constexpr const char* kWorkerCountVariable = "LAMINA_WORKERS";

struct WorkerSpec {
  // Path of the executable each worker runs (the lamina tool passes "/proc/self/exe").
  std::string program;
  // args[r]: worker r's argv without argv[0]; args.size() is the number of workers.
  std::vector<std::vector<std::string>> args;
  // Set in every worker's environment, in addition to the inherited one.
  std::vector<std::pair<std::string, std::string>> env;
  // labels[r] names worker r in messages, e.g. "GPU 1"; empty, or one per worker.
  std::vector<std::string> labels;
  // After a failure, or after a forwarded stop once one worker has stopped: how long the
  // others get before SIGKILL.
  double grace_seconds = 10;
  // argv[0] of every worker, as `ps` and the workers' logs show it; empty: program.
  std::string argv0;
  // The forwarded signals that make the workers stop (the lamina tool's signals whose
  // --sig*-effect is `stop`). Once one of them was forwarded and a worker has exited, the
  // others are expected to follow within grace_seconds; other forwarded signals (SIGHUP's
  // `snapshot`) leave the workers running, and a worker that finishes first waits for its
  // peers however long they take. Only SIGINT, SIGTERM and SIGHUP are forwarded.
  std::vector<int> stop_signals = {SIGINT, SIGTERM};
};

// Starts every worker (fork + exec), waits for all of them, and returns 0 when every worker
// exited with status 0.
//
// When one fails (non-zero exit, killed by a signal, or could not be started: the message
// then names the program and the reason, and its status is 127), prints one line to stderr
// naming it ("worker 1 (GPU 1) exited with status 3; stopping the other workers"), sends
// SIGTERM to the others and SIGKILL to any still running after grace_seconds, and returns
// the first failure's status. A worker still running grace_seconds after a peer stopped on a
// forwarded stop signal is SIGKILLed too (one line says so; the status is then 137).
//
// SIGINT, SIGTERM and SIGHUP received by the launcher while it waits are forwarded to every
// worker, each signal once (a second Ctrl-C is forwarded too: lamina workers then quit
// without waiting for their snapshot). They are forwarded also where the caller ignores them
// (a script's background job ignores SIGINT; nohup, SIGHUP), as `lamina train` alone would
// take them; the workers start with the caller's dispositions (ignored stays ignored until a
// worker installs its own handler). A forwarded signal is consumed: launch_workers returns
// the workers' status. The caller's handlers and signal mask are restored before returning,
// also when a lamina::Error is thrown (a spec mistake, or no process could be created: the
// workers already started are then killed and reaped).
//
// Call it from a thread that outlives the workers, normally the main thread: the workers'
// PR_SET_PDEATHSIG fires when the thread that forked them ends. One call at a time per
// process. It reaps only its own workers (waitid on their pids, never on -1).
int launch_workers(const WorkerSpec& spec);

}  // namespace lamina::cli
