// The lamina command-line tool: train a net from a solver prototxt (resuming from a
// snapshot or starting from trained weights), score trained weights, time a net layer by
// layer, convert weights to and from Caffe's .caffemodel, Caffe's data tools (convert_mnist,
// convert_imageset, compute_image_mean), list GPUs, draw training curves and nets (plot,
// draw_net: picture_commands.hpp). User mistakes print one message and exit 1; a misspelt
// subcommand or option is named with the closest one (command_line.hpp).
//
// `train` shows its progress and writes a metrics file (--progress, --metrics:
// train_view.hpp), and ends with each test net's results at the last iteration.
//
// --stage and --level choose the net's state (which layers its include/exclude rules keep),
// as Caffe's tool's flags do: for `test` and `time` the net's, for `train` the train net's
// (train_state); stages add to those the file gives, a level replaces its level.
//
// --gpu N runs on GPU N; --gpu -1 runs on the CPU, and for `train` overrides the solver
// file's solver_mode: GPU. Without --gpu, `train` follows the solver file and `test` and
// `time` run on the CPU. SIGXFSZ is ignored: a file-size limit (ulimit -f) makes a snapshot
// write fail with EFBIG, reported with its path like a full disk.
//
// Signals during `train` (docs/snapshots.md): SIGINT and SIGTERM snapshot and stop, SIGHUP
// snapshots and goes on; --sigint-effect, --sigterm-effect and --sighup-effect (stop,
// snapshot, none) choose, as Caffe's flags do. A second SIGINT or SIGTERM while a stop is
// pending ends the process at once (the snapshots on disk stay intact: writes are atomic).
#include <CLI/CLI.hpp>
#include <glog/logging.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <utility>

#include "command_line.hpp"
#include "export_onnx.hpp"
#include "picture_commands.hpp"
#include "train_view.hpp"
#include "workers.hpp"
#include "lamina/backend_factory.hpp"
#include "lamina/caffe_weights.hpp"
#include "lamina/cuda.hpp"
#include "lamina/data_tools.hpp"
#include "lamina/io.hpp"
#include "lamina/layer_timing.hpp"
#include "lamina/net.hpp"
#include "lamina/plugin.hpp"
#include "lamina/precision.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/solver.hpp"
#include "lamina/version.hpp"
#include "lamina/weights_file.hpp"

namespace {

// ---- signals ----

enum class Effect { kStop, kSnapshot, kNone };

Effect parse_effect(const std::string& flag, const std::string& value) {
  if (value == "stop") return Effect::kStop;
  if (value == "snapshot") return Effect::kSnapshot;
  if (value == "none") return Effect::kNone;
  lamina::fail(flag, " must be stop, snapshot or none; got '", value, "'");
}

// Set before the handlers are installed, read-only afterwards.
Effect g_effect[3] = {Effect::kStop, Effect::kStop, Effect::kSnapshot};  // INT, TERM, HUP
// Signals received and not yet acted on, per kind.
std::atomic<int> g_pending[3];
std::atomic<bool> g_stop_pending{false};
// A status line is drawn on stderr (--progress bar): a signal's message erases it first.
std::atomic<bool> g_status_line{false};
static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need lock-free atomics");

int signal_index(int sig) { return sig == SIGINT ? 0 : sig == SIGTERM ? 1 : 2; }

void write_stderr(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

extern "C" void on_signal(int sig) {
  const int i = signal_index(sig);
  if (g_status_line) write_stderr("\r\033[K");
  if (g_effect[i] == Effect::kStop) {
    if (g_stop_pending.exchange(true)) {  // the second request: quit at once
      write_stderr("lamina: second stop signal; exiting without waiting for the snapshot\n");
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigaction(sig, &dfl, nullptr);
      raise(sig);
      return;
    }
    write_stderr(sig == SIGINT ? "lamina: SIGINT: snapshot and stop after this iteration "
                                 "(again to quit at once)\n"
                               : "lamina: SIGTERM: snapshot and stop after this iteration\n");
  } else if (g_effect[i] == Effect::kSnapshot) {
    write_stderr("lamina: snapshot requested by a signal\n");
  }
  g_pending[i].fetch_add(1);
}

void install_signal_handlers(Effect sigint, Effect sigterm, Effect sighup) {
  g_effect[0] = sigint;
  g_effect[1] = sigterm;
  g_effect[2] = sighup;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction action {};
    action.sa_handler = g_effect[signal_index(sig)] == Effect::kNone ? SIG_IGN : on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // interrupted reads and writes carry on
    sigaction(sig, &action, nullptr);
  }
}

// What the solver polls between iterations: stop wins over snapshot.
lamina::SolverAction pending_action() {
  lamina::SolverAction action = lamina::SolverAction::kNone;
  for (int i = 0; i < 3; ++i) {
    if (g_pending[i].exchange(0) == 0) continue;
    if (g_effect[i] == Effect::kStop) return lamina::SolverAction::kStop;
    if (g_effect[i] == Effect::kSnapshot) action = lamina::SolverAction::kSnapshot;
  }
  return action;
}

lamina::SolverParameter::FailureAction parse_failure(const std::string& flag,
                                                     const std::string& value) {
  if (value == "stop") return lamina::SolverParameter::STOP;
  if (value == "continue") return lamina::SolverParameter::CONTINUE;
  lamina::fail(flag, " must be stop or continue; got '", value, "'");
}

// The backend a --gpu value asks for (nullptr: none given), made by `make`; a GPU that cannot
// be used is an Error that also says how this tool picks the CPU.
template <class Make>
std::unique_ptr<lamina::Backend> backend_with_cpu_hint(const std::string& gpu, Make make) {
  const std::string spec = gpu.empty() ? "" : lamina::backend_spec_from_gpu(gpu);
  try {
    return make(spec);
  } catch (const lamina::Error& e) {
    if (spec.empty() || spec == "cpu") throw;
    throw lamina::Error(std::string(e.what()) + " (--gpu -1 trains on the CPU)");
  }
}

// The backend of `lamina test` and `lamina time`: --gpu N, or the CPU (also --gpu -1).
std::unique_ptr<lamina::Backend> backend_for(const std::string& gpu) {
  return backend_with_cpu_hint(gpu, [](const std::string& spec) {
    return lamina::make_backend(spec.empty() ? "cpu" : spec);
  });
}

// Runs fn; an Error it throws is thrown again with `context` in front ("TEST net of m: ...").
template <class Fn>
auto with_context(const std::string& context, Fn&& fn) {
  try {
    return fn();
  } catch (const lamina::Error& e) {
    throw lamina::Error(context + ": " + e.what());
  }
}

// Solver fields that `lamina train` can also set with a flag: a library message naming the
// field gets the flag as a hint (the library knows nothing of this tool's flags).
const std::vector<lamina::cli::FieldFlag> kTrainFieldFlags = {
    {"nonfinite: CONTINUE", "--nonfinite continue"},
    {"snapshot_failure: CONTINUE", "--snapshot-failure continue"},
    {"solver_mode: GPU", "--gpu N"},
    {"solver_mode: CPU", "--gpu -1"},
};

// --stage and --level: stages the net's state adds, and the level it takes (when given).
struct StateFlags {
  std::vector<std::string> stages;
  std::optional<int> level;
  void apply(lamina::NetState& state) const {
    for (const std::string& stage : stages) state.add_stage(stage);
    if (level) state.set_level(*level);
  }
};

struct TrainOptions {
  std::string solver_path;
  StateFlags state;
  std::string gpu;       // empty: as the solver file says; -1: the CPU whatever it says
  std::string snapshot;  // a .solverstate to resume from
  std::string weights;   // a .lamina to start from (fine-tuning)
  bool allow_unmatched_weights = false;
  std::string sigint_effect = "stop", sigterm_effect = "stop", sighup_effect = "snapshot";
  std::string snapshot_failure, nonfinite;  // empty: as the solver file says
  bool no_cuda_graph = false;
  std::string precision;  // empty: as the solver file says
  std::string progress = "auto", metrics;  // train_view.hpp
};

// The net of model_path with every layer that names no precision in `precision` (a
// command-line option's text; empty: FP32).
lamina::NetParameter net_in_precision(const std::string& model_path,
                                      const std::string& precision, const StateFlags& state) {
  lamina::NetParameter net = lamina::read_net_parameter(model_path);
  state.apply(*net.mutable_state());
  if (precision.empty()) return net;
  lamina::set_default_precision(net, lamina::parse_precision(precision, "--precision"));
  return net;
}

int train(const TrainOptions& o, int argc, char** argv) {
  LAMINA_REQUIRE(o.snapshot.empty() || o.weights.empty(), "give --snapshot to resume training "
                 "or --weights to start from trained weights, not both");
  LAMINA_REQUIRE(!o.allow_unmatched_weights || !o.weights.empty(),
                 "--allow-unmatched-weights is for --weights, which was not given");
  const Effect sigint = parse_effect("--sigint-effect", o.sigint_effect);
  const Effect sigterm = parse_effect("--sigterm-effect", o.sigterm_effect);
  const Effect sighup = parse_effect("--sighup-effect", o.sighup_effect);
  lamina::parse_progress_mode(o.progress, "--progress");  // refused before anything starts
  lamina::SolverParameter param = lamina::read_solver_parameter(o.solver_path);
  if (!o.snapshot_failure.empty())
    param.set_snapshot_failure(parse_failure("--snapshot-failure", o.snapshot_failure));
  if (!o.nonfinite.empty()) param.set_nonfinite(parse_failure("--nonfinite", o.nonfinite));
  if (o.no_cuda_graph) param.set_cuda_graph(false);
  if (!o.precision.empty())
    param.set_precision(lamina::parse_precision(o.precision, "--precision"));
  if (!o.state.stages.empty() || o.state.level) o.state.apply(*param.mutable_train_state());
  // Several GPUs: this process launches the workers (workers.hpp) and waits for them.
  std::vector<int> stop_signals;
  for (const auto& [sig, effect] : {std::pair{SIGINT, sigint}, {SIGTERM, sigterm}, {SIGHUP, sighup}})
    if (effect == Effect::kStop) stop_signals.push_back(sig);
  if (const std::optional<int> status =
          lamina::cli::launch_job(o.gpu, argc, argv, stop_signals))
    return *status;
  const std::string gpu = lamina::cli::gpu_of_this_process(o.gpu);
  if (!param.has_snapshot_prefix()) {
    // As Caffe: snapshots go beside the solver file, named after it.
    param.set_snapshot_prefix(std::filesystem::path(o.solver_path).replace_extension().string());
    LOG(INFO) << "snapshot_prefix is not set; snapshots go to " << param.snapshot_prefix()
              << "_iter_N.{lamina,solverstate}";
  } else if (std::error_code ec; std::filesystem::is_directory(param.snapshot_prefix(), ec)) {
    param.set_snapshot_prefix((std::filesystem::path(param.snapshot_prefix()) /
                               std::filesystem::path(o.solver_path).stem()).string());
  }
  // --gpu wins over the solver's solver_mode and device_id.
  auto backend = backend_with_cpu_hint(gpu, [&](const std::string& spec) {
    return lamina::make_solver_backend(param, spec);
  });
  const std::shared_ptr<lamina::Communicator> job = lamina::cli::join_job(*backend, param);
  const bool speaks = !job || job->rank() == 0;  // worker 0 speaks for the job
  if (speaks) std::cout << "Training on " << backend->name() << std::endl;
  auto solver = lamina::Solver::create(param, o.solver_path, *backend, job.get());
  if (!o.snapshot.empty()) {
    solver->restore(o.snapshot);
  } else if (!o.weights.empty()) {
    const lamina::WeightsLoadReport report = lamina::load_weights_file(
        solver->net(), o.weights, lamina::WeightsMatch::kFineTune,
        "net '" + solver->net().name() + "'", o.allow_unmatched_weights,
        ", or give --allow-unmatched-weights to train every parameter from its filler");
    solver->protect_file(o.weights);  // its snapshots never overwrite what it started from
    LOG(INFO) << "Fine-tuning from " << o.weights << ": " << report.loaded.size()
              << " parameter(s) loaded";
    for (const std::string& name : report.kept_filler)
      LOG(INFO) << "  not in " << o.weights << ", keeps its filler: " << name;
    for (const std::string& name : report.ignored)
      LOG(INFO) << "  in " << o.weights << " but not in the net, ignored: " << name;
  }
  install_signal_handlers(sigint, sigterm, sighup);
  solver->set_action_source(pending_action);
  lamina::cli::TrainView view(*solver, o.progress, o.metrics, speaks);
  g_status_line = view.draws_status_line();
  solver->solve();
  // Each test net's results at the last iteration (tested now when its last test was earlier).
  const std::vector<lamina::TestResult> final_tests =
      solver->stopped_early() ? std::vector<lamina::TestResult>{}
                              : lamina::cli::final_test_results(*solver);
  view.finish();
  g_status_line = false;
  if (!speaks) return 0;
  if (solver->stopped_early()) {
    std::cout << "stopped at iteration " << solver->iter();
    if (!solver->last_snapshot().empty()) {
      std::cout << "; resume with: "
                << (lamina::launched_by_mpi() ? "mpirun -np " + std::to_string(solver->workers()) + " "
                                               : std::string())
                << "lamina train --solver " << o.solver_path << " --snapshot "
                << solver->last_snapshot().state;
      if (!o.gpu.empty()) std::cout << " --gpu " << lamina::cli::job_gpu(o.gpu);
      if (!o.precision.empty()) std::cout << " --precision " << o.precision;
    }
    std::cout << std::endl;
    return 0;
  }
  // "final accuracy = 0.98", or with several test nets "final #1 accuracy = 0.97".
  if (!final_tests.empty()) std::cout << "final test, at iteration " << solver->iter() << ":\n";
  for (const lamina::TestResult& result : final_tests) {
    const std::string net = final_tests.size() > 1 ? "#" + std::to_string(result.net) + " " : "";
    for (const auto& output : result.outputs)
      std::cout << "final " << net << output.first << " = " << output.second << "\n";
    if (result.has_loss) std::cout << "final " << net << "test loss = " << result.loss << "\n";
  }
  return 0;
}

// Scores trained weights: the mean of every output of the TEST net over `iterations`
// batches. Errors of the TEST net (building it, loading the weights into it, running it) say
// that it is the TEST net.
int test(const std::string& model_path, const std::string& weights_path, int iterations,
         const std::string& gpu, const std::string& precision, const StateFlags& state) {
  LAMINA_REQUIRE(iterations > 0, "--iterations must be > 0, got ", iterations);
  auto backend = backend_for(gpu);
  const lamina::NetParameter net_param = net_in_precision(model_path, precision, state);
  const std::string label = "TEST net of " + model_path;
  lamina::Net net = with_context(label, [&] {
    return lamina::Net(net_param, lamina::TEST, *backend, 1, nullptr, model_path);
  });
  const lamina::WeightsLoadReport report = with_context(label, [&] {
    return lamina::load_weights_file(net, weights_path, lamina::WeightsMatch::kRequireAll,
                                     "TEST net");
  });
  for (const std::string& name : report.ignored)
    LOG(INFO) << "in " << weights_path << " but not in the TEST net, ignored: " << name;
  LAMINA_REQUIRE(!net.output_names().empty(), model_path, ": the TEST net has no outputs to "
                 "score (a top no layer consumes, such as accuracy or loss)");
  std::vector<double> sums;
  with_context(label, [&] {
    for (int it = 0; it < iterations; ++it) {
      net.forward();
      size_t k = 0;
      for (const std::string& name : net.output_names()) {
        for (float v : net.blob(name).copy_data_to_host()) {
          if (k == sums.size()) sums.push_back(0);
          sums[k++] += v;
        }
      }
    }
  });
  std::cout << "Scored " << weights_path << " with " << model_path << " on " << backend->name()
            << ": " << iterations << " batches\n";
  size_t k = 0;
  for (const std::string& name : net.output_names()) {
    const int64_t count = net.blob(name).count();
    for (int64_t i = 0; i < count; ++i, ++k) {
      const std::string label = count == 1 ? name : name + "[" + std::to_string(i) + "]";
      std::cout << label << " = " << sums[k] / iterations << "\n";
    }
  }
  return 0;
}

// Per-layer forward and backward time (synchronizing around each layer), each layer's share
// and tops, and the whole-iteration time (no synchronization inside the iteration), in the
// table of layer_timing.hpp.
int time_net(const std::string& model_path, int iterations, const std::string& gpu,
             const std::string& precision, const StateFlags& state) {
  LAMINA_REQUIRE(iterations > 0, "--iterations must be > 0, got ", iterations);
  auto backend = backend_for(gpu);
  lamina::Net net(net_in_precision(model_path, precision, state), lamina::TRAIN, *backend, 1,
                  nullptr, model_path);
  net.forward();  // warm-up: first touches, library initialisation
  net.backward();
  backend->synchronize();
  const lamina::LayerTiming timing = lamina::time_layers(net, iterations);
  std::cout << "Timing " << net.name() << " on " << backend->name() << ", " << iterations
            << " iterations (ms per iteration)\n"
            << lamina::layer_table(net, timing);
  return 0;
}

// Converts trained weights between Lamina's format and Caffe's .caffemodel, through the net
// of model_path (its `phase`): every parameter of the net must be in `in` (read by its
// content, as --weights is); `out` is written as `to` says ("caffe" or "lamina"), or by its
// extension (.caffemodel: Caffe's; anything else: Lamina's).
int convert_weights(const std::string& in, const std::string& out, const std::string& model_path,
                    std::string to, const std::string& phase, const StateFlags& state) {
  LAMINA_REQUIRE(phase == "train" || phase == "test", "--phase must be train or test, got '",
                 phase, "'");
  if (to.empty())
    to = std::filesystem::path(out).extension() == ".caffemodel" ? "caffe" : "lamina";
  LAMINA_REQUIRE(to == "caffe" || to == "lamina", "--to must be caffe or lamina, got '", to, "'");
  LAMINA_REQUIRE(std::filesystem::absolute(in) != std::filesystem::absolute(out),
                 "the output ", out, " is the input; write the converted weights elsewhere");
  auto backend = lamina::make_backend("cpu");
  lamina::NetParameter net_param = lamina::read_net_parameter(model_path);
  state.apply(*net_param.mutable_state());
  const lamina::Phase net_phase = phase == "train" ? lamina::TRAIN : lamina::TEST;
  const std::string label = lamina::Phase_Name(net_phase) + " net of " + model_path;
  lamina::Net net = with_context(label, [&] {
    return lamina::Net(net_param, net_phase, *backend, 1, nullptr, model_path);
  });
  const bool from_lamina = lamina::weights_file_is_lamina(in);
  const lamina::WeightsLoadReport report = with_context(label, [&] {
    return from_lamina ? lamina::load_weights(net.arena(), in, lamina::WeightsMatch::kRequireAll)
                       : lamina::load_caffe_weights(net, in, lamina::WeightsMatch::kRequireAll);
  });
  for (const std::string& name : report.ignored)
    LOG(INFO) << "in " << in << " but not in the " << label << ", not converted: " << name;
  if (to == "caffe")
    lamina::save_caffemodel(net, out);
  else
    lamina::save_weights(net, out);
  std::cout << "Converted " << in << " (" << (from_lamina ? "Lamina weights" : "Caffe model")
            << ") to " << out << " (" << (to == "caffe" ? "Caffe model" : "Lamina weights")
            << "): " << report.loaded.size() << " parameters of the " << label << "\n";
  return 0;
}

// Prints device_query's answer: every device, their number, or one device's name.
int device_query(bool count_only, int name_of, bool name_given) {
  if (count_only) {
    std::cout << lamina::cuda_device_count() << "\n";
  } else if (name_given) {
    const int count = lamina::cuda_device_count();
    LAMINA_REQUIRE(name_of >= 0, "--name must be a device number >= 0, got ", name_of);
    LAMINA_REQUIRE(name_of < count, "--name ", name_of, ": there is no GPU ", name_of, "; ",
                   count == 0 ? std::string("no GPU can be used (lamina device_query says why)")
                              : "the devices are 0 to " + std::to_string(count - 1));
    std::cout << lamina::make_backend(lamina::BackendSpec{lamina::BackendSpec::Kind::kCuda,
                                                          name_of})->name()
              << "\n";
  } else {
    std::cout << lamina::cuda_device_query();
  }
  return 0;
}

// Caffe's convert_mnist_data: IDX files to a database of Datums keyed "%08d".
int convert_mnist_command(const std::string& images, const std::string& labels,
                          const std::string& db, const std::string& backend) {
  const lamina::DbKind kind = lamina::parse_db_kind(backend);
  const int64_t n = lamina::convert_mnist(images, labels, db, kind);
  std::cout << "wrote " << n << " records to " << lamina::db_name(db, kind) << "\n";
  return 0;
}

// Caffe's convert_imageset: a list file of images to a database of Datums keyed "%08d_PATH".
int convert_imageset_command(const std::string& root, const std::string& list,
                             const std::string& db, const std::string& backend,
                             lamina::ImagesetOptions options) {
  options.backend = lamina::parse_db_kind(backend);
  const int64_t n = lamina::convert_imageset(root, list, db, options);
  std::cout << "wrote " << n << " records to " << lamina::db_name(db, options.backend) << "\n";
  return 0;
}

// Caffe's compute_image_mean: the mean image of a database, and each channel's mean.
int compute_image_mean_command(const std::string& db, const std::string& mean_path,
                               const std::string& backend, bool force_color, bool force_gray) {
  LAMINA_REQUIRE(!(force_color && force_gray), "give --force_color or --force_gray, not both");
  const lamina::ImageMode mode = force_color  ? lamina::ImageMode::kColor
                                 : force_gray ? lamina::ImageMode::kGray
                                              : lamina::ImageMode::kAsIs;
  const lamina::BlobProto mean =
      lamina::compute_image_mean(db, lamina::parse_db_kind(backend), mode);
  lamina::write_blob_proto(mean, mean_path);
  const int64_t pixels = int64_t(mean.height()) * mean.width();
  for (int c = 0; c < mean.channels(); ++c) {
    double sum = 0;
    for (int64_t i = 0; i < pixels; ++i) sum += mean.data(int(c * pixels + i));
    std::cout << "mean_value channel [" << c << "]: " << sum / double(pixels) << "\n";
  }
  return 0;
}

constexpr const char* kGpuHelp = "GPU device to run on; -1 runs on the CPU (the default)";

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported with its path like
  // a full disk, instead of killing the process with SIGXFSZ halfway through a snapshot.
  signal(SIGXFSZ, SIG_IGN);

  CLI::App app{"Lamina: train, score and time neural networks defined in prototxt files",
               "lamina"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("lamina ") + lamina::version());
  // Layer plugins, before or after the subcommand (lamina train --plugin FILE ...).
  std::vector<std::string> plugins;
  app.add_option("--plugin", plugins, "Load custom layers from this plugin (a shared library "
                 "built against this Lamina; repeat for several; also LAMINA_PLUGIN_PATH, "
                 "a ':' list of plugin files and folders; docs/plugins.md)")
      ->type_name("FILE");
  app.fallthrough();
  std::string model_path, weights_path, gpu, precision;
  int iterations = 50;
  TrainOptions train_options;
  StateFlags state;
  int level = 0;
  // --stage (repeated, or a,b,c as Caffe's) and --level, for each subcommand that builds nets.
  auto add_state_flags = [](CLI::App* cmd, StateFlags& flags, int& level_value,
                            const std::string& which) {
    cmd->add_option("--stage", flags.stages, "A stage of " + which + "'s state (repeat, or "
                    "a,b): layers whose include/exclude rules name stages are kept or dropped "
                    "by it (docs/prototxt.md)")
        ->delimiter(',')
        ->type_name("NAME");
    return cmd->add_option("--level", level_value, "The level of " + which + "'s state "
                           "(default: the net file's state, else 0)");
  };

  auto* train_cmd = app.add_subcommand("train", "Train a net from a solver prototxt");
  train_cmd->add_option("--solver", train_options.solver_path, "Solver prototxt")->required();
  train_cmd->add_option("--gpu", train_options.gpu,
                        "GPU device to train on, overriding the solver's solver_mode and "
                        "device_id; -1 trains on the CPU even with solver_mode: GPU "
                        "(default: as the solver file says). Several (0,1 or all) train "
                        "data-parallel, one worker process per GPU; under mpirun, local "
                        "takes the GPU of each process's rank on its machine "
                        "(docs/distributed.md)")
      ->type_name("N|N,M,..|all|local");
  train_cmd->add_option("--snapshot", train_options.snapshot,
                        "Resume from PREFIX_iter_N.solverstate");
  train_cmd->add_option("--weights", train_options.weights,
                        "Start from trained weights: Lamina's (.lamina), matched by parameter "
                        "name (<layer>/<role>), or a Caffe model (.caffemodel: a file that "
                        "neither begins with Lamina's magic nor is named *.lamina), matched by "
                        "layer name as Caffe does; a file that matches "
                        "no parameter is an error")
      ->type_name("FILE");
  train_cmd->add_flag("--allow-unmatched-weights", train_options.allow_unmatched_weights,
                      "Accept --weights that match no parameter (every parameter then starts "
                      "from its filler)");
  train_cmd->add_option("--sigint-effect,--sigint_effect", train_options.sigint_effect,
                        "On SIGINT: stop (snapshot, then stop), snapshot, or none");
  train_cmd->add_option("--sigterm-effect,--sigterm_effect", train_options.sigterm_effect,
                        "On SIGTERM: stop, snapshot, or none");
  train_cmd->add_option("--sighup-effect,--sighup_effect", train_options.sighup_effect,
                        "On SIGHUP: snapshot (and go on), stop, or none");
  train_cmd->add_option("--snapshot-failure", train_options.snapshot_failure,
                        "When a snapshot cannot be written: stop or continue "
                        "(default: the solver's snapshot_failure, STOP)");
  train_cmd->add_option("--nonfinite", train_options.nonfinite,
                        "When a loss, gradient or weight becomes NaN or infinite: stop or "
                        "continue (default: the solver's nonfinite, STOP)");
  train_cmd->add_flag("--no-cuda-graph", train_options.no_cuda_graph,
                      "Launch every operation of a step directly instead of replaying it as "
                      "a CUDA graph (the solver's cuda_graph: false)");
  constexpr const char* kPrecisionHelp =
      "Precision of the layers that name none: fp32, tf32, bf16 or fp16 (docs/precision.md)";
  train_cmd->add_option("--precision", train_options.precision,
                        std::string(kPrecisionHelp) + "; default: the solver's precision, FP32");
  int train_level = 0;
  auto* train_level_option =
      add_state_flags(train_cmd, train_options.state, train_level, "the train net");
  train_cmd->add_option("--progress", train_options.progress,
                        "auto (the default: a live status line on a terminal, else plain lines "
                        "at display iterations), bar, log or none");
  train_cmd->add_option("--metrics", train_options.metrics,
                        "Record every displayed iteration and test in FILE (.csv or .jsonl) for "
                        "lamina plot; a resumed run appends to it")
      ->type_name("FILE");

  auto* test_cmd = app.add_subcommand("test", "Score trained weights on a net's TEST phase");
  test_cmd->add_option("--model", model_path, "Net prototxt (its TEST phase)")->required();
  test_cmd->add_option("--weights", weights_path, "Trained weights: Lamina's (.lamina) or a "
                       "Caffe model (.caffemodel: a file that neither begins with Lamina's "
                       "magic nor is named *.lamina)")
      ->required()
      ->type_name("FILE");
  test_cmd->add_option("--iterations", iterations, "Batches to score (default 50)");
  test_cmd->add_option("--gpu", gpu, kGpuHelp)->type_name("INT");
  test_cmd->add_option("--precision", precision, std::string(kPrecisionHelp) + "; default fp32");
  auto* test_level_option = add_state_flags(test_cmd, state, level, "the net");

  auto* time_cmd = app.add_subcommand("time", "Time a net's layers forward and backward");
  time_cmd->add_option("--model", model_path, "Net prototxt (its TRAIN phase)")->required();
  time_cmd->add_option("--iterations", iterations, "Iterations to average over (default 50)");
  time_cmd->add_option("--gpu", gpu, kGpuHelp)->type_name("INT");
  time_cmd->add_option("--precision", precision, std::string(kPrecisionHelp) + "; default fp32");
  auto* time_level_option = add_state_flags(time_cmd, state, level, "the net");

  auto* convert_cmd = app.add_subcommand(
      "convert_weights", "Convert trained weights between Lamina's format and Caffe's "
      ".caffemodel, through the net they were trained for");
  std::string convert_in, convert_out, convert_to, convert_phase = "test";
  convert_cmd->add_option("IN", convert_in, "The weights to convert: Lamina's (a file that "
                          "begins with its magic, or named *.lamina), else a Caffe model "
                          "(.caffemodel, V1 included)")
      ->required();
  convert_cmd->add_option("OUT", convert_out, "Where to write them: Caffe's format when OUT "
                          "ends in .caffemodel, else Lamina's (unless --to says)")
      ->required();
  convert_cmd->add_option("--model", model_path, "Net prototxt the weights belong to (a "
                          "deploy net is enough); every parameter of its net must be in IN")
      ->required();
  convert_cmd->add_option("--to", convert_to, "The output's format, whatever OUT's extension: "
                          "caffe or lamina");
  convert_cmd->add_option("--phase", convert_phase, "The net's phase: train or test "
                          "(default test)");
  auto* convert_level_option = add_state_flags(convert_cmd, state, level, "the net");

  auto* query_cmd = app.add_subcommand("device_query", "List the GPUs Lamina can use");
  bool count_only = false;
  int name_of = 0;
  query_cmd->add_flag("--count", count_only, "Print only the number of devices");
  auto* name_option = query_cmd->add_option("--name", name_of, "Print only this device's name");

  std::string images, labels, db_path, mean_path, db_backend = "lmdb";
  auto* mnist_cmd = app.add_subcommand(
      "convert_mnist", "Convert MNIST-format IDX files (.gz too) to a database of Datums, as "
      "Caffe's convert_mnist_data (keys %08d of the index)");
  mnist_cmd->add_option("IMAGES", images, "IDX image file (N, H, W)")->required();
  mnist_cmd->add_option("LABELS", labels, "IDX label file (N)")->required();
  mnist_cmd->add_option("DB", db_path, "The database to create (a new directory)")->required();
  mnist_cmd->add_option("--backend", db_backend, "lmdb (the default) or leveldb");
  auto* imageset_cmd = app.add_subcommand(
      "convert_imageset", "Convert the images of a list file (PATH LABEL lines) to a database "
      "of Datums, as Caffe's convert_imageset (keys %08d_PATH)");
  std::string root, list;
  lamina::ImagesetOptions imageset;
  imageset_cmd->add_option("ROOT", root, "Prepended to each listed path as it is (end it with "
                           "/ for a folder; \"\" for none)")
      ->required();
  imageset_cmd->add_option("LIST", list, "The list file: one PATH LABEL a line, the label "
                           "after the last space")
      ->required();
  imageset_cmd->add_option("DB", db_path, "The database to create (a new directory)")
      ->required();
  imageset_cmd->add_option("--resize_height", imageset.resize_height,
                           "Resize every image to this height (with --resize_width; bilinear, "
                           "as cv::resize)");
  imageset_cmd->add_option("--resize_width", imageset.resize_width,
                           "Resize every image to this width (with --resize_height)");
  imageset_cmd->add_flag("--shuffle", imageset.shuffle, "Write the lines in a random order "
                         "drawn from --seed");
  imageset_cmd->add_option("--seed", imageset.seed, "The seed of --shuffle (default 1)");
  imageset_cmd->add_flag("--gray", imageset.gray, "Decode the images in gray (1 channel); "
                         "else in colour (3, B G R)");
  imageset_cmd->add_flag("--encoded", imageset.encoded, "Store the images as JPEG/PNG files "
                         "(encoded Datums) instead of raw pixels");
  imageset_cmd->add_option("--encode_type", imageset.encode_type, "With --encoded: jpg or png, "
                           "re-encoding images of another type (implies --encoded)");
  imageset_cmd->add_flag("--check_size", imageset.check_size, "Require every image to have "
                         "the first one's size");
  imageset_cmd->add_option("--backend", db_backend, "lmdb (the default) or leveldb");
  auto* mean_cmd = app.add_subcommand(
      "compute_image_mean", "Write the mean image of a database of Datums as a BlobProto "
      "(.binaryproto, for transform_param.mean_file), as Caffe's compute_image_mean");
  mean_cmd->add_option("DB", db_path, "The database")->required();
  mean_cmd->add_option("MEAN", mean_path, "The .binaryproto file to write")->required();
  mean_cmd->add_option("--backend", db_backend, "lmdb (the default) or leveldb");
  bool force_color = false, force_gray = false;
  mean_cmd->add_flag("--force_color", force_color, "Decode encoded (JPEG/PNG) records in colour, "
                     "as transform_param.force_color (default: as each file is, as Caffe)");
  mean_cmd->add_flag("--force_gray", force_gray, "Decode encoded records in gray, as "
                     "transform_param.force_gray");

  ExportOnnxFlags onnx_flags;  // export_onnx.cpp
  auto* onnx_cmd = add_export_onnx_command(app, onnx_flags);
  lamina::cli::PictureCommands pictures;
  lamina::cli::add_picture_commands(app, pictures);

  if (const std::optional<int> status = lamina::cli::parse(app, argc, argv)) return *status;
  if (train_level_option->count() > 0) train_options.state.level = train_level;
  if (test_level_option->count() > 0 || time_level_option->count() > 0 ||
      convert_level_option->count() > 0)
    state.level = level;
  try {
    lamina::load_plugins_from_environment();
    for (const std::string& plugin : plugins) lamina::load_plugin(plugin);
    if (*train_cmd) {
      try {
        return train(train_options, argc, argv);
      } catch (const lamina::Error& e) {
        throw lamina::Error(
            lamina::cli::with_flag_hints(e.what(), kTrainFieldFlags, "lamina train"));
      }
    }
    if (*test_cmd) return test(model_path, weights_path, iterations, gpu, precision, state);
    if (*convert_cmd)
      return convert_weights(convert_in, convert_out, model_path, convert_to, convert_phase, state);
    if (*time_cmd) return time_net(model_path, iterations, gpu, precision, state);
    if (*query_cmd) return device_query(count_only, name_of, name_option->count() > 0);
    if (*mnist_cmd) return convert_mnist_command(images, labels, db_path, db_backend);
    if (*imageset_cmd)
      return convert_imageset_command(root, list, db_path, db_backend, imageset);
    if (*mean_cmd)
      return compute_image_mean_command(db_path, mean_path, db_backend, force_color, force_gray);
    if (*onnx_cmd) return export_onnx_command(onnx_flags);
    if (const std::optional<int> status = lamina::cli::run_picture_command(pictures))
      return *status;
  } catch (const lamina::Error& e) {
    std::cerr << "lamina: error" << lamina::cli::worker_label() << ": " << e.what() << std::endl;
    lamina::cli::abort_job();  // under mpirun: the other processes stop too
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "lamina: error" << lamina::cli::worker_label() << ": out of memory" << std::endl;
    lamina::cli::abort_job();
    return 1;
  }
  return 0;
}
