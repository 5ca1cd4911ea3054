// The Solver on the Native backend: learning-rate policies, every update rule with weight
// decay, multipliers and clipping, iter_size, display smoothing, testing, and the settings
// it must refuse.
//
// The net is tiny so that its gradient has a closed form: x (4, 3) -> Linear (W (2, 3),
// b (2)) -> EuclideanLoss against t (4, 2), loss = ||x W^T + b - t||^2 / (2 N). The test
// iterates the update formulas written in backend.hpp in double and compares the weights
// Lamina reaches. Batches that change from one forward to the next come from "TestFeed", a
// layer defined here (a user's custom layer, registered at run time).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include <unistd.h>

#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/registry.hpp"
#include "lamina/solver.hpp"
#include "lamina/solver_config.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using testing::error_of;

using ::testing::AllOf;
using ::testing::HasSubstr;
using Mat = std::vector<double>;

constexpr int kN = 4, kK = 3, kM = 2;  // batch, inputs, outputs

NativeBackend& native() {
  static NativeBackend backend;
  return backend;
}

struct Batch {
  std::vector<float> x;  // (4, 3)
  std::vector<float> t;  // (4, 2)
};

Batch make_batch(uint64_t seed) {
  return {lamina::testing::random_values(kN * kK, seed, -2, 2),
          lamina::testing::random_values(kN * kM, seed + 100, -1, 1)};
}

// ---------------------------------------------------------------------------------------
// TestFeed: tops x and t; each forward copies in the next batch of the named set, cycling.
//   layer { type: "TestFeed" top: "x" top: "t" custom_param { entry { key: "set" value: "A" } }
//           input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }

std::map<std::string, std::vector<Batch>>& feed_sets() {
  static std::map<std::string, std::vector<Batch>> sets;
  return sets;
}

class FeedLayer : public Layer {
 public:
  using Layer::Layer;
  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  int min_tops() const override { return 2; }
  int max_tops() const override { return 2; }
  std::vector<std::string> parameter_messages() const override {
    return {"input_param", "custom_param"};
  }

  void setup(const Tensors& /*bottom*/, const Tensors& top) override {
    for (int i = 0; i < 2; ++i) {
      const BlobShape& s = param_.input_param().shape(i);
      top[i]->reshape(Shape(s.dim().begin(), s.dim().end()));
    }
    require_custom_keys({"set"});
    set_ = custom_string("set", "");
    LAMINA_REQUIRE(feed_sets().count(set_), "no feed set ", set_);
  }
  void forward(const Tensors& /*bottom*/, const Tensors& top) override {
    const std::vector<Batch>& batches = feed_sets().at(set_);
    LAMINA_REQUIRE(!batches.empty(), "feed set ", set_, " has no batches");
    const Batch& b = batches[next_++ % batches.size()];
    top[0]->copy_data_from_host(b.x);
    top[1]->copy_data_from_host(b.t);
  }
  void backward_input(const Tensors&, const std::vector<bool>&, const Tensors&) override {}

 private:
  std::string set_;
  size_t next_ = 0;
};

void register_feed() {
  static const bool registered = [] {
    register_layer<FeedLayer>("TestFeed");
    return true;
  }();
  (void)registered;
}

// ---------------------------------------------------------------------------------------
// The tiny net

// fc's param { } blocks for (weight, bias).
std::string param_blocks(float lr_w, float decay_w, float lr_b, float decay_b) {
  char text[256];
  std::snprintf(text, sizeof(text),
                "param { lr_mult: %g decay_mult: %g } param { lr_mult: %g decay_mult: %g }", lr_w,
                decay_w, lr_b, decay_b);
  return text;
}

// With feed sets: TRAIN reads set train_set, TEST reads test_set. Else one Input layer.
std::string tiny_net(const std::string& fc_params = "", const std::string& train_set = "",
                     const std::string& test_set = "") {
  const std::string shapes =
      " input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } ";
  std::string data;
  if (train_set.empty()) {
    data = "layer { name: \"data\" type: \"Input\" top: \"x\" top: \"t\"" + shapes + "}\n";
  } else {
    data = "layer { name: \"train_data\" type: \"TestFeed\" top: \"x\" top: \"t\"" + shapes +
           "include { phase: TRAIN } custom_param { entry { key: \"set\" value: \"" + train_set +
           "\" } } }\n";
    if (!test_set.empty())
      data += "layer { name: \"test_data\" type: \"TestFeed\" top: \"x\" top: \"t\"" + shapes +
              "include { phase: TEST } custom_param { entry { key: \"set\" value: \"" +
              test_set + "\" } } }\n";
  }
  return "name: \"tiny\"\n" + data +
         "layer { name: \"fc\" type: \"Linear\" bottom: \"x\" top: \"y\" " + fc_params +
         " inner_product_param { num_output: 2 weight_filler { type: \"constant\" value: 0.5 } } }\n"
         "layer { name: \"loss\" type: \"EuclideanLoss\" bottom: \"y\" bottom: \"t\" top: \"loss\" }\n";
}

const Mat kW0 = {0.2, -0.4, 0.6, -0.1, 0.3, 0.5};  // (2, 3)
const Mat kB0 = {0.1, -0.2};                       // (2)

Tensor& fc_param(Net& net, int k) {
  for (int i = 0; i < net.num_layers(); ++i)
    if (net.layer(i).name() == "fc") return *net.layer(i).params().at(k).tensor;
  throw Error("no fc layer");
}
Mat data_of(Tensor& t) {
  const std::vector<float> v = t.copy_data_to_host();
  return Mat(v.begin(), v.end());
}
std::vector<float> to_float(const Mat& v) { return std::vector<float>(v.begin(), v.end()); }

std::unique_ptr<Solver> make_solver(const std::string& solver_text, const std::string& net_text) {
  register_feed();
  auto solver = std::make_unique<Solver>(parse_solver_parameter(solver_text, "solver"),
                                         parse_net_parameter(net_text, "net"), native());
  fc_param(solver->net(), 0).copy_data_from_host(to_float(kW0));
  fc_param(solver->net(), 1).copy_data_from_host(to_float(kB0));
  return solver;
}

// Loss of the tiny net on a batch, adding the gradients to gw (2, 3) and gb (2).
double loss_and_grads(const Mat& w, const Mat& b, const Batch& batch, Mat* gw, Mat* gb) {
  double loss = 0;
  for (int n = 0; n < kN; ++n) {
    for (int m = 0; m < kM; ++m) {
      double y = b[m];
      for (int k = 0; k < kK; ++k) y += batch.x[n * kK + k] * w[m * kK + k];
      const double r = y - batch.t[n * kM + m];
      loss += r * r;
      if (gw) {
        for (int k = 0; k < kK; ++k) (*gw)[m * kK + k] += r / kN * batch.x[n * kK + k];
        (*gb)[m] += r / kN;
      }
    }
  }
  return loss / (2.0 * kN);
}

// The solver's arithmetic in double: backend.hpp's update formulas, Solver's iter_size and
// clipping rules, with the learning rate of the test's own closed form.
struct Simulation {
  SolverParameter p;
  std::function<double(int)> lr;
  double lr_mult[2] = {1, 1}, decay_mult[2] = {1, 1};
  Mat param[2] = {kW0, kB0};
  Mat history[2] = {Mat(6, 0.0), Mat(2, 0.0)};
  Mat history2[2] = {Mat(6, 0.0), Mat(2, 0.0)};
  std::vector<double> losses;  // per iteration, mean over iter_size
  int clipped = 0;

  // One iteration at iteration number it over the given batches (iter_size of them).
  void iterate(int it, const std::vector<Batch>& batches) {
    Mat g[2] = {Mat(6, 0.0), Mat(2, 0.0)};
    double loss = 0;
    for (const Batch& b : batches) loss += loss_and_grads(param[0], param[1], b, &g[0], &g[1]);
    losses.push_back(loss / batches.size());
    double scale = 1.0 / p.iter_size();
    if (p.clip_gradients() > 0) {
      double sq = 0;
      for (const Mat& gi : g)
        for (double v : gi) sq += v * v;
      const double norm = std::sqrt(sq) * scale;
      if (norm > p.clip_gradients()) {
        scale *= p.clip_gradients() / norm;
        ++clipped;
      }
    }
    const std::string type = solver_type_name(parse_solver_type(p));  // solver_type too
    const double b1 = p.momentum();
    const double b2 = type == "RMSProp" ? p.rms_decay() : p.momentum2();
    const double eps = p.delta();
    const int t = it + 1;
    const double correction = std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (int s = 0; s < 2; ++s) {
      const double lr_i = lr(it) * lr_mult[s];
      const double decay_i = p.weight_decay() * decay_mult[s];
      for (size_t i = 0; i < param[s].size(); ++i) {
        double& w = param[s][i];
        double& h = history[s][i];
        double& v = history2[s][i];
        const double reg = p.regularization_type() == "L1" ? (w > 0) - (w < 0) : w;
        const double gi = scale * g[s][i] + (type == "AdamW" ? 0.0 : decay_i * reg);
        if (type == "SGD") {
          h = b1 * h + lr_i * gi;
          w -= h;
        } else if (type == "Nesterov") {
          const double h_old = h;
          h = b1 * h + lr_i * gi;
          w -= (1 + b1) * h - b1 * h_old;
        } else if (type == "Adam" || type == "AdamW") {
          h = b1 * h + (1 - b1) * gi;
          v = b2 * v + (1 - b2) * gi * gi;
          const double step = correction * h / (std::sqrt(v) + eps);
          w -= lr_i * (step + (type == "AdamW" ? decay_i * w : 0.0));
        } else if (type == "RMSProp") {
          h = b2 * h + (1 - b2) * gi * gi;
          w -= lr_i * gi / (std::sqrt(h) + eps);
        } else if (type == "AdaGrad") {
          h += gi * gi;
          w -= lr_i * gi / (std::sqrt(h) + eps);
        } else if (type == "AdaDelta") {  // b1 (momentum) decays both averages
          h = b1 * h + (1 - b1) * gi * gi;
          const double step = gi * std::sqrt((v + eps) / (h + eps));
          v = b1 * v + (1 - b1) * step * step;
          w -= lr_i * step;
        } else {
          ADD_FAILURE() << "simulation: unknown type " << type;
        }
      }
    }
  }
};

std::string expect_close(const Mat& actual, const Mat& expected, double tol) {
  return lamina::testing::compare(to_float(actual), to_float(expected), tol);
}
Mat minus(const Mat& a, const Mat& b) {
  Mat d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// ---------------------------------------------------------------------------------------
// Learning-rate policies

struct PolicyCase {
  const char* name;
  const char* settings;  // beside base_lr: 0.01
  std::function<double(int)> rate;
};

class LrPolicy : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(LrPolicy, MatchesItsClosedForm) {
  const PolicyCase& c = GetParam();
  auto solver = make_solver(std::string("base_lr: 0.01 random_seed: 1 ") + c.settings, tiny_net());
  solver->net().blob("x").copy_data_from_host(make_batch(1).x);
  solver->net().blob("t").copy_data_from_host(make_batch(1).t);
  for (int it = 0; it <= 20; ++it) {
    ASSERT_EQ(solver->iter(), it);
    const double expected = c.rate(it);
    EXPECT_NEAR(solver->learning_rate(), expected, 1e-6 * std::abs(expected) + 1e-12)
        << c.name << " at iteration " << it;
    solver->step(1);
  }
}

const double kBase = 0.01;
INSTANTIATE_TEST_SUITE_P(
    Solver, LrPolicy,
    ::testing::Values(
        PolicyCase{"fixed", "lr_policy: \"fixed\"", [](int) { return kBase; }},
        PolicyCase{"step", "lr_policy: \"step\" gamma: 0.5 stepsize: 3",
                   [](int it) { return kBase * std::pow(0.5, it / 3); }},
        PolicyCase{"multistep",
                   "lr_policy: \"multistep\" gamma: 0.1 stepvalue: 2 stepvalue: 5 stepvalue: 9",
                   [](int it) {
                     const int passed = (it >= 2) + (it >= 5) + (it >= 9);
                     return kBase * std::pow(0.1, passed);
                   }},
        PolicyCase{"exp", "lr_policy: \"exp\" gamma: 0.9",
                   [](int it) { return kBase * std::pow(0.9, it); }},
        PolicyCase{"inv", "lr_policy: \"inv\" gamma: 0.1 power: 0.75",
                   [](int it) { return kBase / std::pow(1 + 0.1 * it, 0.75); }},
        PolicyCase{"poly", "lr_policy: \"poly\" power: 2 max_iter: 20",
                   [](int it) { return kBase * (1 - it / 20.0) * (1 - it / 20.0); }},
        PolicyCase{"sigmoid", "lr_policy: \"sigmoid\" gamma: -0.5 stepsize: 8",
                   [](int it) { return kBase / (1 + std::exp(0.5 * (it - 8))); }},
        PolicyCase{"cosine", "lr_policy: \"cosine\" max_iter: 20",
                   [](int it) { return kBase * (1 + std::cos(M_PI * it / 20.0)) / 2; }}),
    [](const ::testing::TestParamInfo<PolicyCase>& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------
// Update rules, regularisation, multipliers, clipping

struct UpdateCase {
  const char* name;
  const char* settings;            // the solver prototxt, base_lr included
  float lr_mult[2] = {1, 1};       // weight, bias
  float decay_mult[2] = {1, 1};
  std::function<double(int)> lr;  // the rate at an iteration; base_lr when empty
};

class SolverUpdate : public ::testing::TestWithParam<UpdateCase> {};

TEST_P(SolverUpdate, ThreeIterationsMatchTheFormulas) {
  const UpdateCase& c = GetParam();
  const std::string settings = std::string(c.settings) + " random_seed: 1";
  auto solver = make_solver(settings, tiny_net(param_blocks(c.lr_mult[0], c.decay_mult[0],
                                                            c.lr_mult[1], c.decay_mult[1])));
  const Batch batch = make_batch(7);
  solver->net().blob("x").copy_data_from_host(batch.x);
  solver->net().blob("t").copy_data_from_host(batch.t);

  Simulation sim;
  sim.p = parse_solver_parameter(settings, "solver");
  const double base_lr = sim.p.base_lr();
  sim.lr = c.lr ? c.lr : [base_lr](int) { return base_lr; };
  for (int s = 0; s < 2; ++s) {
    sim.lr_mult[s] = c.lr_mult[s];
    sim.decay_mult[s] = c.decay_mult[s];
  }
  for (int it = 0; it < 3; ++it) {
    solver->step(1);
    sim.iterate(it, {batch});
    const Mat w = data_of(fc_param(solver->net(), 0));
    const Mat b = data_of(fc_param(solver->net(), 1));
    EXPECT_EQ(expect_close(w, sim.param[0], 1e-5), "") << "weight after iteration " << it;
    EXPECT_EQ(expect_close(b, sim.param[1], 1e-5), "") << "bias after iteration " << it;
    // The steps themselves, not only the weights they land on.
    EXPECT_EQ(expect_close(minus(w, kW0), minus(sim.param[0], kW0), 1e-4), "")
        << "weight step after iteration " << it;
    EXPECT_EQ(expect_close(minus(b, kB0), minus(sim.param[1], kB0), 1e-4), "")
        << "bias step after iteration " << it;
  }
  if (sim.p.clip_gradients() > 0) EXPECT_GT(sim.clipped, 0) << "the case never clips";
}

INSTANTIATE_TEST_SUITE_P(
    Solver, SolverUpdate,
    ::testing::Values(
        UpdateCase{"SGD", "base_lr: 0.1"},
        UpdateCase{"SGDMomentum", "base_lr: 0.1 momentum: 0.9"},
        UpdateCase{"SGDStepPolicy",
                   "base_lr: 0.2 momentum: 0.5 lr_policy: \"step\" gamma: 0.5 stepsize: 2",
                   {1, 1}, {1, 1}, [](int it) { return 0.2 * std::pow(0.5, it / 2); }},
        UpdateCase{"Nesterov", "type: \"Nesterov\" base_lr: 0.1 momentum: 0.9"},
        UpdateCase{"WeightDecayL2", "base_lr: 0.1 momentum: 0.9 weight_decay: 0.05"},
        UpdateCase{"WeightDecayL1",
                   "base_lr: 0.1 weight_decay: 0.05 regularization_type: \"L1\""},
        UpdateCase{"LrMultDecayMult", "base_lr: 0.1 momentum: 0.9 weight_decay: 0.1",
                   {0.5, 2}, {3, 0}},
        UpdateCase{"ClipGradients", "base_lr: 0.1 momentum: 0.9 clip_gradients: 0.3"},
        UpdateCase{"Adam", "type: \"Adam\" base_lr: 0.05 momentum: 0.9 momentum2: 0.99"},
        UpdateCase{"AdamL2WeightDecay",
                   "type: \"Adam\" base_lr: 0.05 momentum: 0.9 weight_decay: 0.1",
                   {1, 2}, {1, 0.5}},
        UpdateCase{"AdamW", "type: \"AdamW\" base_lr: 0.05 momentum: 0.9 weight_decay: 0.1",
                   {1, 2}, {1, 0.5}},
        UpdateCase{"AdaGrad", "type: \"AdaGrad\" base_lr: 0.1"},
        UpdateCase{"AdaGradDelta", "type: \"AdaGrad\" base_lr: 0.1 delta: 0.5 weight_decay: 0.01"},
        UpdateCase{"RMSProp", "type: \"RMSProp\" base_lr: 0.01 rms_decay: 0.9"},
        UpdateCase{"RMSPropDelta",
                   "type: \"RMSProp\" base_lr: 0.01 rms_decay: 0.8 delta: 0.1 "
                   "weight_decay: 0.01 regularization_type: \"L1\""},
        // Caffe's examples/mnist/lenet_adadelta_solver.prototxt settings.
        UpdateCase{"AdaDelta", "type: \"AdaDelta\" base_lr: 1 momentum: 0.95 delta: 1e-6"},
        UpdateCase{"AdaDeltaDecayMultipliers",
                   "type: \"AdaDelta\" base_lr: 0.5 momentum: 0.9 delta: 1e-4 "
                   "weight_decay: 0.05 lr_policy: \"step\" gamma: 0.5 stepsize: 1",
                   {1, 2}, {1, 0.5}, [](int it) { return 0.5 * std::pow(0.5, it); }},
        UpdateCase{"AdaDeltaMomentumZeroL1",
                   "type: \"AdaDelta\" base_lr: 1 delta: 1e-3 weight_decay: 0.01 "
                   "regularization_type: \"L1\""},
        UpdateCase{"AdaDeltaAsSolverTypeEnum",
                   "solver_type: ADADELTA base_lr: 1 momentum: 0.95 delta: 1e-6"},
        UpdateCase{"NesterovAsSolverTypeEnum", "solver_type: NESTEROV base_lr: 0.1 momentum: 0.9"},
        UpdateCase{"RMSPropAsSolverTypeEnum",
                   "solver_type: RMSPROP base_lr: 0.01 rms_decay: 0.9 momentum: 0"}),
    [](const ::testing::TestParamInfo<UpdateCase>& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------
// iter_size

class SolverIterSize : public ::testing::TestWithParam<const char*> {};

// Batches A and B alternate: each update uses (g(A) + g(B)) / 2, clipped by its own norm.
TEST_P(SolverIterSize, UpdateUsesTheMeanOfTheAccumulatedGradients) {
  feed_sets()["iter_size"] = {make_batch(11), make_batch(12)};
  const std::string settings =
      std::string("base_lr: 0.1 momentum: 0.9 iter_size: 2 display: 1 random_seed: 1 ") +
      GetParam();
  auto solver = make_solver(settings, tiny_net("", "iter_size"));
  Simulation sim;
  sim.p = parse_solver_parameter(settings, "solver");
  sim.lr = [](int) { return 0.1; };
  solver->step(3);
  for (int it = 0; it < 3; ++it) sim.iterate(it, feed_sets()["iter_size"]);
  EXPECT_EQ(expect_close(data_of(fc_param(solver->net(), 0)), sim.param[0], 1e-5), "");
  EXPECT_EQ(expect_close(data_of(fc_param(solver->net(), 1)), sim.param[1], 1e-5), "");
  if (sim.p.clip_gradients() > 0) {
    EXPECT_GT(sim.clipped, 0);  // clipping sees the mean gradient
    EXPECT_LT(sim.clipped, 3);  // and not the sum, which the threshold would always clip
  }
  // The loss shown for an iteration is the mean over its iter_size forwards.
  ASSERT_EQ(solver->loss_history().size(), 3u);
  for (int it = 0; it < 3; ++it) {
    EXPECT_EQ(solver->loss_history()[it].iteration, it);
    EXPECT_NEAR(solver->loss_history()[it].loss, sim.losses[it], 1e-5 * sim.losses[it]);
  }
}

INSTANTIATE_TEST_SUITE_P(Solver, SolverIterSize,
                         // Mean-gradient norms are about 1.19, 1.06, 0.82: only the first
                         // is clipped; the sums' norms (about twice) would all be.
                         ::testing::Values("", "clip_gradients: 1.1"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.index == 0 ? "NoClipping" : "Clipping");
                         });

TEST(SolverIterSizeSameBatch, TwiceTheSameBatchEqualsOnce) {
  const Batch batch = make_batch(21);
  std::vector<float> weights[2];
  for (int iter_size : {1, 2}) {
    auto solver = make_solver("base_lr: 0.1 momentum: 0.9 weight_decay: 0.01 random_seed: 1 "
                              "iter_size: " + std::to_string(iter_size),
                              tiny_net());
    solver->net().blob("x").copy_data_from_host(batch.x);
    solver->net().blob("t").copy_data_from_host(batch.t);
    solver->step(3);
    weights[iter_size - 1] = fc_param(solver->net(), 0).copy_data_to_host();
  }
  EXPECT_EQ(weights[0], weights[1]);
}

// ---------------------------------------------------------------------------------------
// Display, loss smoothing, testing

TEST(SolverDisplay, LossHistoryIsSmoothedOverAverageLoss) {
  feed_sets()["display"] = {make_batch(31), make_batch(32), make_batch(33)};
  const std::string settings = "base_lr: 0.05 display: 2 average_loss: 3 random_seed: 1";
  auto solver = make_solver(settings, tiny_net("", "display"));
  Simulation sim;
  sim.p = parse_solver_parameter(settings, "solver");
  sim.lr = [](int) { return 0.05; };
  for (int it = 0; it < 7; ++it) sim.iterate(it, {feed_sets()["display"][it % 3]});
  solver->step(7);
  const auto& history = solver->loss_history();
  ASSERT_EQ(history.size(), 4u);  // iterations 0, 2, 4, 6
  for (size_t i = 0; i < history.size(); ++i) {
    const int it = int(2 * i);
    EXPECT_EQ(history[i].iteration, it);
    double sum = 0;
    int count = 0;
    for (int k = std::max(0, it - 2); k <= it; ++k, ++count) sum += sim.losses[k];
    EXPECT_NEAR(history[i].loss, sum / count, 1e-5 * sum / count) << "iteration " << it;
  }
  // The raw losses really differ, so the smoothing is visible.
  EXPECT_GT(std::abs(sim.losses[6] - history[3].loss), 1e-3);

  double sum = 0;
  for (double l : sim.losses) sum += l;
  EXPECT_NEAR(solver->take_mean_loss(), sum / 7, 1e-5 * sum / 7);
  solver->step(2);
  sim.iterate(7, {feed_sets()["display"][7 % 3]});
  sim.iterate(8, {feed_sets()["display"][8 % 3]});
  const double mean = (sim.losses[7] + sim.losses[8]) / 2;
  EXPECT_NEAR(solver->take_mean_loss(), mean, 1e-5 * mean);
  ASSERT_EQ(solver->loss_history().size(), 5u);
  EXPECT_EQ(solver->loss_history()[4].iteration, 8);
  const double smoothed = (sim.losses[6] + sim.losses[7] + sim.losses[8]) / 3;
  EXPECT_NEAR(solver->loss_history()[4].loss, smoothed, 1e-5 * smoothed);
}

TEST(SolverTest, OutputsAreAveragedOverTestIter) {
  feed_sets()["train"] = {make_batch(41), make_batch(42)};
  feed_sets()["test"] = {make_batch(51), make_batch(52), make_batch(53)};
  const std::string settings =
      "base_lr: 0.1 momentum: 0.5 test_iter: 4 test_interval: 2 random_seed: 1";
  auto solver = make_solver(settings, tiny_net("", "train", "test"));
  ASSERT_NE(solver->test_net(), nullptr);
  EXPECT_EQ(solver->test_net()->output_names(), std::vector<std::string>{"loss"});

  Simulation sim;
  sim.p = parse_solver_parameter(settings, "solver");
  sim.lr = [](int) { return 0.1; };
  const auto& test = feed_sets()["test"];
  size_t next_test = 0;  // the test feed's position, it cycles across tests
  auto expected_test = [&]() {
    double sum = 0;
    for (int i = 0; i < 4; ++i)
      sum += loss_and_grads(sim.param[0], sim.param[1], test[next_test++ % 3], nullptr, nullptr);
    return sum / 4;
  };

  std::vector<std::pair<int, double>> expected;
  for (int it = 0; it < 3; ++it) {
    if (it % 2 == 0) expected.push_back({it, expected_test()});  // before the update
    sim.iterate(it, {feed_sets()["train"][it % 2]});
  }
  solver->step(3);
  const TestResult now = solver->test();
  expected.push_back({3, expected_test()});

  EXPECT_NEAR(now.value("loss"), expected.back().second, 1e-5 * expected.back().second);
  const auto& history = solver->test_history();
  ASSERT_EQ(history.size(), expected.size());
  for (size_t i = 0; i < history.size(); ++i) {
    EXPECT_EQ(history[i].first, expected[i].first);
    ASSERT_EQ(history[i].second.outputs.size(), 1u);
    EXPECT_EQ(history[i].second.outputs[0].first, "loss");
    EXPECT_NEAR(history[i].second.value("loss"), expected[i].second, 1e-5 * expected[i].second)
        << "test at iteration " << expected[i].first;
  }
  EXPECT_THAT(error_of([&] { now.value("accuracy"); }), AllOf(HasSubstr("accuracy"), HasSubstr("loss")));
  // The test net evaluates the weights being trained.
  EXPECT_EQ(fc_param(*solver->test_net(), 0).data(), fc_param(solver->net(), 0).data());
}

TEST(SolverTest, NoTestAtIterationZeroWithoutTestInitialization) {
  feed_sets()["train"] = {make_batch(41), make_batch(42)};
  feed_sets()["test"] = {make_batch(51), make_batch(52), make_batch(53)};
  auto solver = make_solver(
      "base_lr: 0.1 test_iter: 2 test_interval: 2 test_initialization: false random_seed: 1 "
      "max_iter: 5",
      tiny_net("", "train", "test"));
  solver->solve();
  EXPECT_EQ(solver->iter(), 5);
  ASSERT_EQ(solver->test_history().size(), 2u);  // at 2 and 4; 5 is not a test point
  EXPECT_EQ(solver->test_history()[0].first, 2);
  EXPECT_EQ(solver->test_history()[1].first, 4);
}

// An error in the TEST net's forward pass while training says that it was the TEST net, at
// which test and training iteration.
TEST(SolverTest, ATestNetErrorDuringTrainingSaysTest) {
  feed_sets()["train"] = {make_batch(41)};
  feed_sets()["broken_test"] = {make_batch(51)};
  auto solver = make_solver(
      "base_lr: 0.1 test_iter: 2 test_interval: 2 test_initialization: false random_seed: 1 "
      "max_iter: 4",
      tiny_net("", "train", "broken_test"));
  feed_sets()["broken_test"].clear();
  EXPECT_THAT(error_of([&] { solver->solve(); }),
              AllOf(HasSubstr("TEST net, test iteration 0 of 2 at training iteration 2: "),
                    HasSubstr("feed set broken_test has no batches")));
}

// ---------------------------------------------------------------------------------------
// Settings the solver refuses

struct InvalidCase {
  const char* name;
  const char* settings;
  std::vector<const char*> message_has;
};

class SolverInvalid : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(SolverInvalid, IsAnErrorNamingTheField) {
  const InvalidCase& c = GetParam();
  const std::string message = error_of([&] {
    Solver solver(parse_solver_parameter(c.settings, "solver.prototxt"),
                  parse_net_parameter(tiny_net(), "net"), native());
  });
  for (const char* part : c.message_has) EXPECT_THAT(message, HasSubstr(part));
}

INSTANTIATE_TEST_SUITE_P(
    Solver, SolverInvalid,
    ::testing::Values(
        InvalidCase{"UnknownPolicy", "base_lr: 0.1 lr_policy: \"linear\"", {"lr_policy", "linear"}},
        InvalidCase{"StepWithoutStepsize", "base_lr: 0.1 lr_policy: \"step\" gamma: 0.5",
                    {"step", "stepsize"}},
        InvalidCase{"StepWithoutGamma", "base_lr: 0.1 lr_policy: \"step\" stepsize: 3",
                    {"step", "gamma"}},
        InvalidCase{"MultistepWithoutStepvalue", "base_lr: 0.1 lr_policy: \"multistep\" gamma: 0.1",
                    {"stepvalue"}},
        InvalidCase{"PolyWithoutMaxIter", "base_lr: 0.1 lr_policy: \"poly\" power: 1",
                    {"poly", "max_iter"}},
        InvalidCase{"StepsizeWithFixed", "base_lr: 0.1 stepsize: 10", {"stepsize", "fixed"}},
        InvalidCase{"GammaWithCosine", "base_lr: 0.1 lr_policy: \"cosine\" max_iter: 10 gamma: 1",
                    {"gamma", "cosine"}},
        InvalidCase{"Momentum2WithSGD", "base_lr: 0.1 momentum2: 0.9", {"momentum2", "SGD"}},
        InvalidCase{"MomentumWithAdaGrad", "base_lr: 0.1 type: \"AdaGrad\" momentum: 0.9",
                    {"momentum", "AdaGrad"}},
        InvalidCase{"DeltaWithSGD", "base_lr: 0.1 delta: 1e-6", {"delta", "SGD"}},
        InvalidCase{"RmsDecayWithAdam", "base_lr: 0.1 type: \"Adam\" rms_decay: 0.9",
                    {"rms_decay", "Adam"}},
        InvalidCase{"UnknownType", "base_lr: 0.1 type: \"Adamax\"", {"type", "Adamax"}},
        InvalidCase{"TypeAndSolverTypeDisagree",
                    "base_lr: 0.1 type: \"Adam\" solver_type: ADADELTA",
                    {"solver_type is ADADELTA", "type is 'Adam'"}},
        InvalidCase{"AdaDeltaMomentumOne", "base_lr: 1 type: \"AdaDelta\" momentum: 1",
                    {"momentum is 1", "AdaDelta"}},
        InvalidCase{"RMSPropEnumWithMomentum", "base_lr: 0.1 solver_type: RMSPROP momentum: 0.9",
                    {"momentum is 0.9", "RMSProp", "rms_decay"}},
        InvalidCase{"BaseLrMissing", "momentum: 0.9", {"base_lr"}},
        InvalidCase{"UnknownRegularization", "base_lr: 0.1 regularization_type: \"L3\"",
                    {"regularization_type", "L3"}},
        InvalidCase{"IterSizeZero", "base_lr: 0.1 iter_size: 0", {"iter_size"}},
        InvalidCase{"TestIntervalWithoutTestIter", "base_lr: 0.1 test_interval: 10",
                    {"test_interval", "test_iter"}},
        InvalidCase{"UnknownField", "base_lr: 0.1 learning_rate: 0.1",
                    {"learning_rate", "solver.prototxt:1:"}}),
    [](const ::testing::TestParamInfo<InvalidCase>& info) { return std::string(info.param.name); });

TEST(SolverFromFile, ReadsTheNetNamedRelativeToTheSolverFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("lamina_solver_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "net.prototxt") << tiny_net();
  std::ofstream(dir / "solver.prototxt") << "net: \"net.prototxt\"\nbase_lr: 0.1\nrandom_seed: 1\n";
  auto solver = Solver::from_file((dir / "solver.prototxt").string(), native());
  EXPECT_EQ(solver->net().name(), "tiny");
  EXPECT_EQ(solver->net().arena().table().size(), 2u);

  // An error in the net names the net file and the layer's line.
  std::ofstream(dir / "net.prototxt")
      << "name: \"broken\"\n"
         "layer { name: \"data\" type: \"Input\" top: \"x\"\n"
         "        input_param { shape { dim: 4 dim: 3 } } }\n"
         "layer { name: \"fc\" type: \"Linear\" bottom: \"y\"\n"
         "        inner_product_param { num_output: 2 } }\n";
  const std::string message =
      error_of([&] { Solver::from_file((dir / "solver.prototxt").string(), native()); });
  EXPECT_THAT(message, AllOf(HasSubstr("net.prototxt:4:"), HasSubstr("'fc'"), HasSubstr("'y'")));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lamina
