// Loads one of models/mnist/*_solver.prototxt with the overrides the mnist example and the
// benchmarks take (data directory, batch size, lr, momentum, seed), sized in whole epochs.
#pragma once

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>

#include "lamina/idx.hpp"
#include "lamina/io.hpp"
#include "lamina/solver.hpp"

namespace lamina::mnist {

// The repository root: $LAMINA_SOURCE_DIR when set (binaries moved to another machine),
// else the directory they were built from.
inline std::string source_root() {
  const char* env = std::getenv("LAMINA_SOURCE_DIR");
  return env && *env ? env : LAMINA_SOURCE_DIR;
}

// The overrides: an absent one leaves the prototxt's value. A value given is used or
// refused (load_model throws), never replaced by the file's.
struct ModelOptions {
  std::string models_dir = source_root() + "/models/mnist";
  std::string data_dir = source_root() + "/data/mnist";
  std::optional<int> batch_size;        // > 0
  std::optional<float> momentum;        // in [0, 1)
  std::optional<float> learning_rate;   // finite, > 0
  std::optional<int64_t> seed;          // >= 0
  int epochs = 1;                       // > 0
};

struct Model {
  SolverParameter solver;
  NetParameter net;
  std::string net_path;
  int batch_size = 0;
  int iters_per_epoch = 0;  // full batches; the rest of the epoch is dropped
};

inline Model load_model(const std::string& name, const ModelOptions& o) {
  LAMINA_REQUIRE(!o.batch_size || *o.batch_size > 0, "batch size must be > 0, got ",
                 *o.batch_size);
  LAMINA_REQUIRE(!o.momentum || (*o.momentum >= 0 && *o.momentum < 1), "momentum must be in "
                 "[0, 1), got ", *o.momentum);
  LAMINA_REQUIRE(!o.learning_rate || (std::isfinite(*o.learning_rate) && *o.learning_rate > 0),
                 "learning rate must be finite and > 0, got ", *o.learning_rate);
  LAMINA_REQUIRE(!o.seed || *o.seed >= 0, "seed must be >= 0, got ", *o.seed);
  LAMINA_REQUIRE(o.epochs > 0, "epochs must be > 0, got ", o.epochs);
  Model m;
  const std::string solver_path = o.models_dir + "/" + name + "_solver.prototxt";
  m.solver = read_solver_parameter(solver_path);
  m.net_path = resolve_path(m.solver.net(), solver_path);
  m.net = read_net_parameter(m.net_path);

  std::string train_images;
  for (LayerParameter& layer : *m.net.mutable_layer()) {
    if (layer.type() != "MnistData") continue;
    auto* data = layer.mutable_mnist_data_param();
    for (std::string* path : {data->mutable_images(), data->mutable_labels()})
      *path = o.data_dir + "/" + std::filesystem::path(*path).filename().string();
    const bool train = layer.include_size() > 0 && layer.include(0).phase() == TRAIN;
    if (!train) continue;
    if (o.batch_size) data->set_batch_size(*o.batch_size);
    m.batch_size = int(data->batch_size());
    train_images = data->images();
  }
  LAMINA_REQUIRE(m.batch_size > 0, m.net_path, " has no TRAIN MnistData layer");
  const int64_t images = read_idx_dims(train_images).at(0);
  LAMINA_REQUIRE(m.batch_size <= images, "batch size ", m.batch_size, " is larger than the ",
                 images, " training images of ", train_images);
  m.iters_per_epoch = int(images / m.batch_size);
  const int64_t iterations = int64_t{o.epochs} * m.iters_per_epoch;
  LAMINA_REQUIRE(iterations <= std::numeric_limits<int32_t>::max(), o.epochs, " epochs of ",
                 m.iters_per_epoch, " iterations are more than a solver counts (2^31 - 1)");

  if (o.momentum) m.solver.set_momentum(*o.momentum);
  if (o.learning_rate) m.solver.set_base_lr(*o.learning_rate);
  if (o.seed) m.solver.set_random_seed(*o.seed);
  m.solver.set_max_iter(int32_t(iterations));
  m.solver.set_display(0);  // callers report per epoch
  m.solver.set_test_interval(0);
  m.solver.clear_test_initialization();
  return m;
}

}  // namespace lamina::mnist
