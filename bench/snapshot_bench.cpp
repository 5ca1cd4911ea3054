// How long a snapshot takes to write and to load, for the MNIST models of models/mnist.
//
// For each model it trains a few iterations (so the momentum history is not zero), then
// times, as medians over --repeats runs:
//   write:  Solver::snapshot(): weights and optimizer history to the host, encoding with the
//           CRC-32, two atomic writes (temporary file, fsync, rename, directory fsync);
//   load:   Solver::restore() into a new solver: reading both files, verifying checksums and
//           shapes, uploading weights, history and layer states;
//   weights only: save_weights / load_weights of the trained net.
//   snapshot_bench [--model mlp] [--model lenet] [--gpu N] [--repeats 10] [--dir /tmp/x]
#include <CLI/CLI.hpp>
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <vector>

#include "../examples/mnist/mnist_model.hpp"
#include "lamina/backend_factory.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/solver.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median_ms(int repeats, const std::function<void()>& fn) {
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double megabytes(const std::string& path) {
  return double(std::filesystem::file_size(path)) / (1 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;  // no per-snapshot INFO lines in the timings
  CLI::App app{"Snapshot write and load times for the MNIST models"};
  std::vector<std::string> models = {"mlp"};
  std::string gpu = "-1";
  int repeats = 10;
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("lamina_snapshot_bench_" + std::to_string(::getpid())))
                        .string();
  std::string data_dir = lamina::mnist::ModelOptions().data_dir;
  app.add_option("--model", models, "models/mnist/MODEL_solver.prototxt (repeatable)");
  app.add_option("--gpu", gpu, "GPU device; -1 is the CPU (the default)");
  app.add_option("--repeats", repeats, "Runs per median");
  app.add_option("--dir", dir, "Directory for the snapshot files (its disk is what is timed)");
  app.add_option("--data-dir", data_dir, "MNIST IDX files");
  CLI11_PARSE(app, argc, argv);

  try {
    LAMINA_REQUIRE(repeats > 0, "--repeats must be > 0, got ", repeats);
    std::unique_ptr<lamina::Backend> backend =
        lamina::make_backend(lamina::backend_spec_from_gpu(gpu));
    std::filesystem::create_directories(dir);
    std::printf("snapshot timings on %s, files in %s, median of %d\n", backend->name().c_str(),
                dir.c_str(), repeats);
    std::printf("%-8s %10s %10s %10s %10s %12s %12s\n", "model", "params", "weights", "state",
                "write ms", "load ms", "w-only w/l");
    for (const std::string& name : models) {
      lamina::mnist::ModelOptions options;
      options.data_dir = data_dir;
      if (!std::filesystem::exists(options.models_dir + "/" + name + "_solver.prototxt")) {
        std::printf("%-8s (no models/mnist/%s_solver.prototxt in this tree)\n", name.c_str(),
                    name.c_str());
        continue;
      }
      lamina::mnist::Model m = lamina::mnist::load_model(name, options);
      m.solver.set_snapshot_prefix(dir + "/" + name);
      lamina::Solver solver(m.solver, m.net, *backend, m.net_path);
      solver.step(10);
      lamina::SnapshotPaths paths;
      const double write = median_ms(repeats, [&] { paths = solver.snapshot(); });
      lamina::Solver resumed(m.solver, m.net, *backend, m.net_path);
      const double load = median_ms(repeats, [&] { resumed.restore(paths.state); });
      const std::string weights = dir + "/" + name + "_weights_only.lamina";
      const double save_w = median_ms(repeats, [&] { lamina::save_weights(solver.net(), weights); });
      const double load_w = median_ms(repeats, [&] {
        lamina::load_weights(resumed.net(), weights, lamina::WeightsMatch::kExact);
      });
      int64_t params = 0;
      for (const lamina::ParamInfo& info : solver.net().arena().table()) params += info.count;
      std::printf("%-8s %10lld %8.2f MB %7.2f MB %10.2f %12.2f %6.2f/%.2f\n", name.c_str(),
                  static_cast<long long>(params), megabytes(paths.weights), megabytes(paths.state),
                  write, load, save_w, load_w);
    }
    std::filesystem::remove_all(dir);
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "snapshot_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
