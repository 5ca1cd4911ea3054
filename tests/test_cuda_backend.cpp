// The CUDA backend against the Native backend (tier 2 of the test suite): every Backend
// operation on the same random inputs on both, compared with compare() at relative error
// 1e-5, or bit for bit where both compute the same float operations (dropout, gather_batch,
// accuracy). Then what makes the CUDA backend fast and usable: no transfers in a sequence of
// kernels, one context per device, errors a user can act on.
//
// Every test needs a GPU and skips (with the reason) without one, except the ones that check
// what a user without a GPU is told.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/common.hpp"
#include "lamina/cuda.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/solver_config.hpp"
#include "lamina/tensor.hpp"
#include "forwarding_backend.hpp"
#include "test_util.hpp"
#include "update_layouts.hpp"

namespace lamina::testing {
namespace {

constexpr double kTol = 1e-5;

// Named results of one case on one backend.
using Outputs = std::vector<std::pair<std::string, std::vector<float>>>;

std::vector<float> labels_for(int64_t rows, int64_t cols, uint64_t seed, bool with_ignored,
                              int ignore_label) {
  std::mt19937_64 rng(seed);
  std::vector<float> labels(rows);
  for (int64_t r = 0; r < rows; ++r) {
    labels[r] = static_cast<float>(rng() % cols);
    if (with_ignored && r % 3 == 1) labels[r] = static_cast<float>(ignore_label);
  }
  return labels;
}

// Segments and their block table in a backend's memory, as Backend::update reads them.
struct DeviceLayout {
  DeviceLayout(Backend& be, const std::vector<ParamSegment>& segments, int64_t n)
      : segs(be, segments),
        blocks(be, block_segments(segments, n)),
        layout{n, segs.get(), int(segments.size()), blocks.get()} {}
  Array<ParamSegment> segs;
  Array<int32_t> blocks;
  UpdateLayout layout;
};

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LAMINA_CUDA_BACKEND_OR_SKIP(backend);
    cuda_ = std::move(backend);
  }

  // Runs one case on both backends; every output must agree to tol (bits when tol < 0).
  void expect_same(const std::function<Outputs(Backend&)>& run, double tol = kTol) {
    const Outputs expected = run(native_);
    const Outputs actual = run(*cuda_);
    ASSERT_EQ(expected.size(), actual.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const std::string diff = tol < 0 ? compare_bits(actual[i].second, expected[i].second)
                                       : compare(actual[i].second, expected[i].second, tol);
      EXPECT_EQ(diff, "") << "output '" << expected[i].first << "' (cuda vs native)";
    }
  }

  NativeBackend native_;
  std::unique_ptr<Backend> cuda_;
};

// ---------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------

TEST_F(CudaBackendTest, NameAndMemoryRoundTrip) {
  EXPECT_EQ(cuda_->name().rfind("cuda:0 (", 0), 0u) << cuda_->name();  // "cuda:0 (NVIDIA ...)"
  EXPECT_FALSE(cuda_->is_host());
  const std::vector<float> values = random_values(1000, 1);
  Floats a(*cuda_, values);
  EXPECT_EQ(compare_bits(a.host(), values), "");

  Floats b(*cuda_, 1000, 7.0f);
  cuda_->copy(sizeof(float) * 1000, a.get(), b.get());
  EXPECT_EQ(compare_bits(b.host(), values), "");

  cuda_->fill(1000, 2.5f, b.get());
  EXPECT_EQ(compare_bits(b.host(), std::vector<float>(1000, 2.5f)), "");
  cuda_->zero(sizeof(float) * 1000, b.get());
  EXPECT_EQ(compare_bits(b.host(), std::vector<float>(1000, 0.0f)), "");
  EXPECT_EQ(cuda_->allocate(0), nullptr);
  cuda_->deallocate(nullptr);
}

TEST_F(CudaBackendTest, CopyFromHostSurvivesFreeingTheSource) {
  // Small copies go through the staging ring (more copies than slots), large ones wait.
  std::vector<Floats> arrays;
  for (int i = 0; i < 12; ++i) {
    auto values = std::make_unique<std::vector<float>>(5000, static_cast<float>(i));
    arrays.emplace_back(*cuda_, 5000);
    cuda_->copy_from_host(sizeof(float) * 5000, values->data(), arrays.back().get());
    values.reset();  // freed before the device may have run the copy
    std::vector<float> reuse(5000, -1.0f);  // likely the same host memory
    (void)reuse;
  }
  const int64_t large = (int64_t{20} << 20) / sizeof(float);  // past the staging limit
  Floats big(*cuda_, large);
  {
    std::vector<float> values(large, 3.0f);
    cuda_->copy_from_host(sizeof(float) * large, values.data(), big.get());
  }
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(compare_bits(arrays[i].host(), std::vector<float>(5000, float(i))), "") << i;
  }
  EXPECT_EQ(compare_bits(big.host(), std::vector<float>(large, 3.0f)), "");
}

// ---------------------------------------------------------------------------------------
// BLAS
// ---------------------------------------------------------------------------------------

TEST_F(CudaBackendTest, GemmAllTransposes) {
  for_each_gemm_case({{37, 29, 53}, {1, 17, 9}, {128, 96, 300}}, [&](const GemmCase& s) {
    expect_same([&](Backend& be) -> Outputs {
      Floats a(be, random_values(s.m * s.k, 1));
      Floats b(be, random_values(s.k * s.n, 2));
      Floats c(be, random_values(s.m * s.n, 3));
      be.gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 0.7f, a.get(), b.get(), s.beta, c.get());
      return {{"c", c.host()}};
    });
  });
}

TEST_F(CudaBackendTest, GemmWithEmptySum) {
  for (float beta : {0.0f, 0.5f, 1.0f}) {
    SCOPED_TRACE(::testing::Message() << "beta " << beta);
    expect_same([&](Backend& be) -> Outputs {
      std::vector<float> init = random_values(6 * 4, 3);
      if (beta == 0) init[5] = std::numeric_limits<float>::quiet_NaN();  // must not be read
      Floats c(be, init);
      be.gemm(Transpose::kNo, Transpose::kNo, 6, 4, 0, 1.0f, nullptr, nullptr, beta, c.get());
      return {{"c", c.host()}};
    }, -1);
  }
}

TEST_F(CudaBackendTest, Gemv) {
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (float beta : {0.0f, 0.3f}) {
      SCOPED_TRACE(::testing::Message() << "trans " << (ta == Transpose::kYes) << " beta "
                                        << beta);
      const int64_t m = 41, n = 23;
      const int64_t in = ta == Transpose::kNo ? n : m, out = ta == Transpose::kNo ? m : n;
      expect_same([&](Backend& be) -> Outputs {
        Floats a(be, random_values(m * n, 4));
        Floats x(be, random_values(in, 5));
        Floats y(be, random_values(out, 6));
        be.gemv(ta, m, n, 1.3f, a.get(), x.get(), beta, y.get());
        return {{"y", y.host()}};
      });
    }
  }
}

TEST_F(CudaBackendTest, LevelOne) {
  const int64_t n = 100003;
  expect_same([&](Backend& be) -> Outputs {
    Floats x(be, random_values(n, 7));
    Floats y(be, random_values(n, 8));
    be.axpy(n, 0.25f, x.get(), y.get());
    return {{"axpy", y.host()}};
  });
  const struct {
    float alpha, beta;
  } coefficients[] = {{0.6f, -0.4f}, {0.6f, 0.0f}, {0.0f, 0.9f}};
  for (const auto& [alpha, beta] : coefficients) {
    SCOPED_TRACE(::testing::Message() << "axpby alpha " << alpha << " beta " << beta);
    const float a = alpha, b = beta;  // lambdas cannot capture structured bindings in C++17
    expect_same([&](Backend& be) -> Outputs {
      Floats x(be, random_values(n, 9));
      std::vector<float> init = random_values(n, 10);
      if (b == 0) init[17] = std::numeric_limits<float>::quiet_NaN();  // must not be read
      Floats y(be, init);
      be.axpby(n, a, x.get(), b, y.get());
      return {{"axpby", y.host()}};
    });
  }
  expect_same([&](Backend& be) -> Outputs {
    Floats x(be, random_values(n, 11));
    be.scal(n, -1.7f, x.get());
    return {{"scal", x.host()}};
  });
  expect_same([&](Backend& be) -> Outputs {
    Floats a(be, random_values(n, 12));
    Floats b(be, random_values(n, 13));
    Floats y(be, n);
    be.mul(n, a.get(), b.get(), y.get());
    be.mul(n, y.get(), b.get(), a.get());
    be.mul(n, a.get(), a.get(), a.get());  // in place
    return {{"mul", y.host()}, {"mul in place", a.host()}};
  }, -1);
  // Positive values: the sum has no cancellation, so relative error is meaningful. Both
  // accumulate in double and round once: the same float, or one ulp apart where the double
  // sums straddle a rounding boundary. Arrays off a 16-byte boundary (from element 1) take
  // CUDA's one-float kernel, aligned ones its four-float kernel and its tail (n % 4 = 1).
  for (int64_t len : {n, int64_t{0}, int64_t{1}, int64_t{3000001}}) {
    SCOPED_TRACE(::testing::Message() << "dot of " << len);
    expect_same([&](Backend& be) -> Outputs {
      Floats x(be, random_values(len, 14, 0, 1));
      Floats y(be, random_values(len, 15, 0, 1));
      Floats result(be, std::vector<float>{std::nanf(""), 0.0f});  // dot(0) must write 0
      be.dot(len, x.get(), y.get(), result.get());
      if (len > 1) be.dot(len - 1, x.get() + 1, y.get() + 1, result.get() + 1);
      return {{"dot", result.host()}};
    }, 2.4e-7);
  }
}

// ---------------------------------------------------------------------------------------
// Neural-network operations
// ---------------------------------------------------------------------------------------

TEST_F(CudaBackendTest, Activations) {
  const int64_t n = 30001;
  const struct {
    Activation f;
    float slope;
    const char* name;
  } cases[] = {{Activation::kReLU, 0.0f, "relu"},
               {Activation::kReLU, 0.1f, "leaky relu"},
               {Activation::kSigmoid, 0.0f, "sigmoid"},
               {Activation::kTanH, 0.0f, "tanh"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_same([&](Backend& be) -> Outputs {
      std::vector<float> xv = random_values(n, 20, -4, 4);
      xv[0] = 0.0f;  // the kink
      Floats x(be, xv);
      Floats y(be, n);
      Floats dy(be, random_values(n, 21));
      Floats dx(be, n);
      be.activation_forward(c.f, n, c.slope, x.get(), y.get());
      be.activation_backward(c.f, n, c.slope, y.get(), dy.get(), dx.get());
      // In place: x becomes y, dy becomes dx.
      be.activation_forward(c.f, n, c.slope, x.get(), x.get());
      be.activation_backward(c.f, n, c.slope, x.get(), dy.get(), dy.get());
      return {{"y", y.host()}, {"dx", dx.host()}, {"y in place", x.host()},
              {"dx in place", dy.host()}};
    });
  }
}

TEST_F(CudaBackendTest, SoftmaxAndLogSoftmax) {
  const struct {
    int64_t rows, cols;
  } shapes[] = {{7, 10}, {5, 1000}, {3, 1}, {2, 3000}, {300, 33}};
  for (const auto& s : shapes) {
    for (bool log : {false, true}) {
      for (float offset : {0.0f, 1000.0f}) {  // large values must not overflow
        SCOPED_TRACE(::testing::Message() << "rows " << s.rows << " cols " << s.cols << " log "
                                          << log << " offset " << offset);
        const int64_t n = s.rows * s.cols;
        expect_same([&](Backend& be) -> Outputs {
          std::vector<float> xv = random_values(n, 30, -5, 5);
          for (float& v : xv) v += offset;
          Floats x(be, xv);
          Floats y(be, n);
          Floats dy(be, random_values(n, 31));
          Floats dx(be, n);
          be.softmax_forward(s.rows, s.cols, log, x.get(), y.get());
          be.softmax_backward(s.rows, s.cols, log, y.get(), dy.get(), dx.get());
          be.softmax_forward(s.rows, s.cols, log, x.get(), x.get());  // in place
          be.softmax_backward(s.rows, s.cols, log, y.get(), dy.get(), dy.get());
          return {{"y", y.host()}, {"dx", dx.host()}, {"y in place", x.host()},
                  {"dx in place", dy.host()}};
        });
      }
    }
  }
}

struct LossCase {
  const char* name;
  LossOptions options;
  bool with_ignored;  // some rows carry the ignore label
  bool all_ignored;
};

std::vector<LossCase> loss_cases() {
  std::vector<LossCase> cases;
  const std::pair<Normalization, const char*> modes[] = {
      {Normalization::kFull, "full"},
      {Normalization::kValid, "valid"},
      {Normalization::kBatchSize, "batch size"},
      {Normalization::kNone, "none"}};
  for (const auto& [mode, name] : modes) {
    LossOptions plain;
    plain.normalization = mode;
    cases.push_back({name, plain, false, false});
    LossOptions ignoring = plain;
    ignoring.has_ignore_label = true;
    ignoring.ignore_label = -1;
    cases.push_back({name, ignoring, true, false});
  }
  LossOptions all;
  all.has_ignore_label = true;
  all.ignore_label = 255;
  all.normalization = Normalization::kValid;
  cases.push_back({"every row ignored", all, true, true});
  return cases;
}

std::vector<float> loss_labels(const LossCase& c, int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> labels =
      labels_for(rows, cols, seed, c.with_ignored, c.options.ignore_label);
  if (c.all_ignored) labels.assign(rows, static_cast<float>(c.options.ignore_label));
  return labels;
}

TEST_F(CudaBackendTest, SoftmaxCrossEntropy) {
  // Batches of at most 64 rows of at most 1024 classes (and 65536 scores) run in one launch
  // (a warp per row), larger ones as a block per row: both against the Native backend.
  const struct {
    int64_t rows, cols;
  } shapes[] = {{13, 10}, {4, 1000}, {64, 10}, {65, 10}, {1024, 64}, {1025, 10}, {70, 1000},
                {3, 100000}};
  for (const auto& s : shapes) {
    for (const LossCase& c : loss_cases()) {
      SCOPED_TRACE(::testing::Message() << "rows " << s.rows << " cols " << s.cols << " "
                                        << c.name << " ignore " << c.options.has_ignore_label);
      const int64_t n = s.rows * s.cols;
      expect_same([&](Backend& be) -> Outputs {
        Floats x(be, random_values(n, 40, -8, 8));
        Floats labels(be, loss_labels(c, s.rows, s.cols, 41));
        Floats prob(be, n), loss(be, 1), norm(be, 1), dx(be, n);
        Floats dloss(be, std::vector<float>{1.7f});
        be.softmax_cross_entropy_forward(s.rows, s.cols, x.get(), labels.get(), c.options,
                                         prob.get(), loss.get(), norm.get());
        be.softmax_cross_entropy_backward(s.rows, s.cols, prob.get(), labels.get(), c.options,
                                          norm.get(), dloss.get(), dx.get());
        return {{"prob", prob.host()}, {"loss", loss.host()}, {"norm", norm.host()},
                {"dx", dx.host()}};
      });
    }
  }
}

TEST_F(CudaBackendTest, NegativeLogLikelihood) {
  const int64_t rows = 29, cols = 12, n = rows * cols;
  for (const LossCase& c : loss_cases()) {
    SCOPED_TRACE(::testing::Message() << c.name << " ignore " << c.options.has_ignore_label);
    expect_same([&](Backend& be) -> Outputs {
      Floats logp(be, random_values(n, 50, -6, -0.01f));
      Floats labels(be, loss_labels(c, rows, cols, 51));
      Floats loss(be, 1), norm(be, 1), dx(be, n, 9.0f);
      Floats dloss(be, std::vector<float>{0.8f});
      be.nll_loss_forward(rows, cols, logp.get(), labels.get(), c.options, loss.get(),
                          norm.get());
      be.nll_loss_backward(rows, cols, labels.get(), c.options, norm.get(), dloss.get(),
                           dx.get());
      return {{"loss", loss.host()}, {"norm", norm.host()}, {"dx", dx.host()}};
    });
  }
}

TEST_F(CudaBackendTest, Euclidean) {
  const struct {
    int64_t rows, cols;
  } shapes[] = {{17, 9}, {1000, 300}, {1, 1}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "rows " << s.rows << " cols " << s.cols);
    const int64_t n = s.rows * s.cols;
    expect_same([&](Backend& be) -> Outputs {
      Floats a(be, random_values(n, 60)), b(be, random_values(n, 61));
      Floats diff(be, n), loss(be, 1), da(be, n), db(be, n);
      Floats dloss(be, std::vector<float>{0.7f});
      be.euclidean_loss_forward(s.rows, s.cols, a.get(), b.get(), diff.get(), loss.get());
      be.euclidean_loss_backward(s.rows, s.cols, 1.0f, diff.get(), dloss.get(), da.get());
      be.euclidean_loss_backward(s.rows, s.cols, -1.0f, diff.get(), dloss.get(), db.get());
      return {{"diff", diff.host()}, {"loss", loss.host()}, {"da", da.host()},
              {"db", db.host()}};
    });
  }
}

TEST_F(CudaBackendTest, Accuracy) {
  const int64_t rows = 50, cols = 10, n = rows * cols;
  std::vector<float> scores = random_values(n, 70, 0, 5);
  for (float& v : scores) v = std::floor(v);  // many ties with the label's score
  for (int top_k : {1, 3, 10}) {
    for (const LossCase& c : loss_cases()) {
      if (c.options.normalization != Normalization::kValid) continue;
      SCOPED_TRACE(::testing::Message() << "top " << top_k << " " << c.name << " ignore "
                                        << c.options.has_ignore_label);
      expect_same([&](Backend& be) -> Outputs {
        Floats x(be, scores), labels(be, loss_labels(c, rows, cols, 71)), out(be, 1);
        be.accuracy(rows, cols, top_k, x.get(), labels.get(), c.options, out.get());
        return {{"accuracy", out.host()}};
      }, -1);
    }
  }
}

// Found by tests/fuzz on the Native backend (which now throws): a label past the scores'
// classes was used as an index. The kernels must not use it either: the loss is NaN and the
// row counts as wrong.
TEST_F(CudaBackendTest, LabelsThatNameNoClassGiveANanLossNotAnOutOfBoundsRead) {
  const int64_t rows = 4, cols = 3, n = rows * cols;
  for (float bad : {3.0f, 1e30f, -1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    Backend& be = *cuda_;
    Floats x(be, random_values(n, 80)), labels(be, std::vector<float>{0, bad, 2, 1});
    Floats prob(be, n), loss(be, 1), norm(be, 1), dx(be, n), accuracy(be, 1);
    Floats dloss(be, std::vector<float>{1.0f});
    const LossOptions options;
    be.softmax_cross_entropy_forward(rows, cols, x.get(), labels.get(), options, prob.get(),
                                     loss.get(), norm.get());
    EXPECT_TRUE(std::isnan(loss.host()[0]));
    be.softmax_cross_entropy_backward(rows, cols, prob.get(), labels.get(), options,
                                      norm.get(), dloss.get(), dx.get());
    be.nll_loss_forward(rows, cols, x.get(), labels.get(), options, loss.get(), norm.get());
    EXPECT_TRUE(std::isnan(loss.host()[0]));
    be.nll_loss_backward(rows, cols, labels.get(), options, norm.get(), dloss.get(), dx.get());
    be.accuracy(rows, cols, cols, x.get(), labels.get(), options, accuracy.get());
    EXPECT_EQ(accuracy.host()[0], 0.75f);  // top 3 of 3 classes: every row but the bad one
    be.synchronize();
  }
}

// Two passes on one counter: the second draws the numbers after the first's (offset + n).
TEST_F(CudaBackendTest, DropoutMasksAreBitIdentical) {
  const int64_t n = 100003;
  for (float ratio : {0.3f, 0.5f}) {
    SCOPED_TRACE(::testing::Message() << "ratio " << ratio);
    expect_same([&](Backend& be) -> Outputs {
      Floats x(be, random_values(n, 80)), mask(be, n), y(be, n);
      Array<PassCounter> counter(be, 1);
      be.dropout_forward(n, ratio, 1234567, 89, counter.get(), x.get(), mask.get(), y.get());
      const std::vector<float> first_mask = mask.host();
      be.dropout_forward(n, ratio, 1234567, 89, counter.get(), x.get(), mask.get(), x.get());
      const PassCounter after = counter.host()[0];
      return {{"first mask", first_mask}, {"y", y.host()}, {"second mask", mask.host()},
              {"y in place", x.host()},
              {"passes, blocks", {float(after.passes), float(after.blocks_done)}}};
    }, -1);
  }
  Floats x(*cuda_, n, 1.0f), mask(*cuda_, n), y(*cuda_, n);
  Array<PassCounter> counter(*cuda_, 1);
  cuda_->dropout_forward(n, 0.3f, 5, 0, counter.get(), x.get(), mask.get(), y.get());
  int64_t kept = 0;
  for (float m : mask.host()) kept += m != 0;
  EXPECT_NEAR(double(kept) / n, 0.7, 0.01);
  EXPECT_EQ(counter.host()[0].passes, 1);
}

// Batches of 3 from 7 samples: without shuffle they wrap around the files; with shuffle an
// epoch is 2 batches (the 7th sample is skipped) and pass 2 starts epoch 1, in order[1].
// Every row is checked against the sample BatchOrder names, on both backends.
TEST_F(CudaBackendTest, GatherBatchFollowsTheCounter) {
  const int64_t samples = 7, cols = 13, batch = 3, passes = 5;
  std::vector<uint8_t> images(samples * cols), labels(samples);
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<uint8_t>((i * 37) % 256);
  for (int64_t i = 0; i < samples; ++i) labels[i] = static_cast<uint8_t>(i % 10);
  const std::vector<int32_t> epoch0 = {6, 2, 0, 5, 1, 3, 4}, epoch1 = {3, 1, 4, 0, 6, 5, 2};
  for (bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffle" : "in order");
    const int64_t first = shuffle ? 1 : 5;  // batch 1 of epoch 0; sample 5
    std::vector<float> expected_images, expected_labels;
    BatchOrder host;
    host.first = first, host.batch = batch, host.samples = samples, host.shuffle = shuffle;
    host.order[0] = epoch0.data(), host.order[1] = epoch1.data();
    for (int64_t p = 0; p < passes; ++p) {
      for (int64_t r = 0; r < batch; ++r) {
        const int64_t sample = host.sample(p, r);
        for (int64_t j = 0; j < cols; ++j)
          expected_images.push_back(0.5f * float(images[sample * cols + j]));
        expected_labels.push_back(float(labels[sample]));
      }
    }
    for (Backend* be : {static_cast<Backend*>(&native_), cuda_.get()}) {
      SCOPED_TRACE(be->name());
      Array<uint8_t> image_src(*be, images), label_src(*be, labels);
      Array<int32_t> order0(*be, epoch0), order1(*be, epoch1);
      Array<PassCounter> counter(*be, 1);
      Floats data(*be, batch * cols), label(*be, batch);
      BatchOrder order = host;
      order.counter = counter.get();
      order.order[0] = order0.get(), order.order[1] = order1.get();
      std::vector<float> got_images, got_labels;
      for (int64_t p = 0; p < passes; ++p) {
        // Epoch 2 (passes 3 and 4) reads slot 0 again, still holding epoch0's order.
        be->gather_batch(order, GatherTop{image_src.get(), cols, 0.5f, data.get()},
                         GatherTop{label_src.get(), 1, 1.0f, label.get()});
        const std::vector<float> d = data.host(), l = label.host();
        got_images.insert(got_images.end(), d.begin(), d.end());
        got_labels.insert(got_labels.end(), l.begin(), l.end());
      }
      EXPECT_EQ(compare_bits(got_images, expected_images), "");
      EXPECT_EQ(compare_bits(got_labels, expected_labels), "");
      EXPECT_EQ(counter.host()[0].passes, passes);
      EXPECT_EQ(counter.host()[0].blocks_done, 0u);
    }
  }
}

TEST_F(CudaBackendTest, UpdateEveryRule) {
  // Two segments with padding after each: [0, 37), [64, 114) in 128 floats.
  const int64_t n = 128;
  const std::vector<ParamSegment> segments = {{0, 37, 1.0f, 1.0f}, {64, 50, 2.0f, 0.5f}};
  std::vector<float> w0 = random_values(n, 90);
  w0[5] = 0.0f;  // sign(0) = 0 under L1
  const UpdateRule rules[] = {UpdateRule::kSGD,     UpdateRule::kNesterov,
                              UpdateRule::kAdam,    UpdateRule::kAdamW,
                              UpdateRule::kRMSProp, UpdateRule::kAdaGrad,
                              UpdateRule::kAdaDelta};
  // Arrays one float past an aligned address take the kernels' one-float path.
  for (int64_t offset : {0, 1}) {
    for (UpdateRule rule : rules) {
      for (Regularization reg : {Regularization::kL2, Regularization::kL1}) {
        SCOPED_TRACE(::testing::Message() << solver_type_name(rule) << " "
                                          << (reg == Regularization::kL1 ? "L1" : "L2")
                                          << " offset " << offset);
        std::vector<float> cuda_weights;
        std::vector<float> padded_w0(offset, 0.0f);
        padded_w0.insert(padded_w0.end(), w0.begin(), w0.end());
        expect_same([&](Backend& be) -> Outputs {
          Floats w(be, padded_w0), g(be, n + offset), h(be, n + offset), h2(be, n + offset);
          const DeviceLayout layout(be, segments, n);
          UpdateArgs args;
          args.rule = rule;
          args.momentum = 0.9f;
          args.momentum2 = rule == UpdateRule::kRMSProp ? 0.98f : 0.999f;
          // AdaDelta as Caffe's examples run it (delta 1e-6, rate 1), so that it moves.
          const bool adadelta = rule == UpdateRule::kAdaDelta;
          args.delta = adadelta ? 1e-6f : 1e-8f;
          args.weight_decay = 5e-3f;
          args.regularization = reg;
          TestStep t;
          t.lr = adadelta ? 1.0f : 0.01f;
          t.grad_scale = 0.5f;
          DeviceStep state(be);
          for (int step = 1; step <= 3; ++step) {
            std::vector<float> grads = random_values(n, 100 + step);
            be.copy_from_host(sizeof(float) * n, grads.data(), g.get() + offset);
            t.step = step;
            be.update(args, state.set(args, t), layout.layout, w.get() + offset,
                      g.get() + offset, h.get() + offset, h2.get() + offset);
          }
          if (&be != &native_) cuda_weights = w.host();
          return {{"weights", w.host()}, {"history", h.host()}, {"history2", h2.host()}};
        });
        ASSERT_EQ(cuda_weights.size(), size_t(n + offset));
        for (int64_t i : {37, 40, 63, 114, 127}) {  // padding: untouched
          EXPECT_EQ(cuda_weights[i + offset], w0[i]) << "padding element " << i << " was changed";
        }
      }
    }
  }
}

// advance_step on the device: the same rates, bias corrections and clipped gradient scales
// as the Native backend's, iteration after iteration, for every policy (multistep reading its
// stepvalues from device memory). The schedules evaluate in double on both, so the floats
// agree to the last bit or one ulp (the device's pow and exp against the host's).
TEST_F(CudaBackendTest, AdvanceStepMatchesNative) {
  const std::vector<int32_t> stepvalues = {3, 7, 20};
  for (LrPolicy policy : {LrPolicy::kFixed, LrPolicy::kStep, LrPolicy::kMultistep,
                          LrPolicy::kExp, LrPolicy::kInv, LrPolicy::kPoly, LrPolicy::kSigmoid,
                          LrPolicy::kCosine}) {
    SCOPED_TRACE(int(policy));
    expect_same([&](Backend& be) -> Outputs {
      Array<int32_t> steps(be, stepvalues);
      StepSchedule schedule;
      schedule.lr = {policy, 0.05, 0.9, 0.75, 5, 30, int(stepvalues.size()), steps.get()};
      schedule.iter_scale = 0.5f;
      schedule.clip = 3.0f;
      schedule.adam = true;
      schedule.beta1 = 0.9f;
      schedule.beta2 = 0.999f;
      Floats loss(be, 1), ring(be, 7, -1.0f), loss_sum(be, 1);
      schedule.loss = loss.get();
      schedule.ring = ring.get();
      schedule.ring_len = 7;
      schedule.loss_sum = loss_sum.get();
      DeviceStep state(be);
      state.set(UpdateArgs{}, TestStep{});
      std::vector<float> lr, correction, scale, iter;
      for (int i = 0; i < 40; ++i) {
        const float sumsq = float(i * i);  // norms 0 to 19.5: below and above the threshold
        be.copy_from_host(sizeof(float), &sumsq, &state.get()->grad_sumsq);
        const float value = 0.25f * float(i);
        be.copy_from_host(sizeof(float), &value, loss.get());
        be.advance_step(schedule, state.get());
        StepState host;
        be.copy_to_host(sizeof(StepState), state.get(), &host);
        lr.push_back(host.lr);
        correction.push_back(host.correction);
        scale.push_back(host.grad_scale);
        iter.push_back(float(host.iter));
      }
      return {{"lr", lr},     {"correction", correction}, {"grad_scale", scale},
              {"iter", iter}, {"ring", ring.host()},      {"loss_sum", loss_sum.host()}};
    }, 2.4e-7);
  }
}

// 320 parameters of varied sizes in a 1.3M-float arena, in one pass, and in three parts the
// last first (as a data-parallel job updates its gradient buckets), one starting inside a
// parameter: the same weights and histories as Native's one pass, no padding element
// changes, and the parts give the one pass's bits.
TEST_F(CudaBackendTest, UpdateOfManySegments) {
  const std::vector<ParamSegment> segments = varied_segments(320, 1500, 40000, 91);
  const int64_t n = arena_size(segments);
  const std::vector<float> w0 = random_values(n, 92);
  const std::vector<int64_t> whole = {0, n};
  const std::vector<int64_t> parts = {0, segments[90].offset, segments[200].offset + kArenaBlock,
                                      n};
  for (UpdateRule rule : {UpdateRule::kSGD, UpdateRule::kAdam}) {
    std::vector<float> one_pass;  // CUDA's weights after whole-arena updates
    for (const std::vector<int64_t>& cuts : {whole, parts}) {
      SCOPED_TRACE(std::string(solver_type_name(rule)) + ", parts " +
                   std::to_string(cuts.size() - 1));
      std::vector<float> cuda_weights;
      expect_same([&](Backend& be) -> Outputs {
        Floats w(be, w0), g(be, random_values(n, 93)), h(be, n), h2(be, n);
        const DeviceLayout layout(be, segments, n);
        UpdateArgs args;
        args.rule = rule;
        args.momentum = 0.9f;
        args.weight_decay = 5e-3f;
        TestStep t;
        t.lr = 0.01f;
        DeviceStep state(be);
        for (int step = 1; step <= 2; ++step) {
          t.step = step;
          const StepState* s = state.set(args, t);
          if (&be == &native_) {
            be.update(args, s, layout.layout, w.get(), g.get(), h.get(), h2.get());
            continue;
          }
          for (size_t k = cuts.size() - 1; k-- > 0;) {
            UpdateLayout part = layout.layout;
            part.first = cuts[k];
            part.n = cuts[k + 1] - cuts[k];
            be.update(args, s, part, w.get(), g.get(), h.get(), h2.get());
          }
        }
        if (&be != &native_) cuda_weights = w.host();
        return {{"weights", w.host()}, {"history", h.host()}, {"history2", h2.host()}};
      });
      ASSERT_EQ(cuda_weights.size(), size_t(n));
      int64_t checked = 0;
      for (const ParamSegment& s : segments) {
        const int64_t end = (s.offset + s.count + kArenaBlock - 1) / kArenaBlock * kArenaBlock;
        for (int64_t i = s.offset + s.count; i < end; ++i, ++checked) {
          ASSERT_EQ(cuda_weights[i], w0[i]) << "padding element " << i << " was changed";
        }
      }
      EXPECT_GT(checked, 0);
      if (cuts.size() == 2)
        one_pass = cuda_weights;
      else
        EXPECT_EQ(compare_bits(cuda_weights, one_pass), "");
    }
  }
}

// ---------------------------------------------------------------------------------------
// Determinism, transfers, contexts, errors
// ---------------------------------------------------------------------------------------

TEST_F(CudaBackendTest, ScalarReductionsAreBitIdenticalRunToRun) {
  const int64_t rows = 4096, cols = 100, n = rows * cols;
  Floats x(*cuda_, random_values(n, 110, -8, 8));
  Floats labels(*cuda_, labels_for(rows, cols, 111, true, -1));
  Floats prob(*cuda_, n), loss(*cuda_, 1), norm(*cuda_, 1), diff(*cuda_, n);
  LossOptions options;
  options.has_ignore_label = true;
  options.ignore_label = -1;
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    cuda_->softmax_cross_entropy_forward(rows, cols, x.get(), labels.get(), options,
                                         prob.get(), loss.get(), norm.get());
    std::vector<float> results = loss.host();
    cuda_->euclidean_loss_forward(rows, cols, x.get(), prob.get(), diff.get(), loss.get());
    results.push_back(loss.host()[0]);
    cuda_->dot(n, x.get(), prob.get(), norm.get());
    results.push_back(norm.host()[0]);
    if (run == 0) {
      first = results;
    } else {
      EXPECT_EQ(compare_bits(results, first), "") << "run " << run;
    }
  }
}

TEST_F(CudaBackendTest, KernelsAloneMakeNoTransfers) {
  CountingBackend be(*cuda_);
  const int64_t rows = 64, cols = 10, in = 50, n = rows * cols;
  const int64_t arena = 512;  // the cols * in weights, padded to whole blocks
  Floats x(be, random_values(rows * in, 120)), w(be, random_values(arena, 121));
  Floats gw(be, arena), h(be, arena), y(be, n), prob(be, n), dx(be, n), mask(be, n);
  Floats labels(be, labels_for(rows, cols, 122, false, 0));
  Floats loss(be, 1), norm(be, 1), acc(be, 1), dloss(be, std::vector<float>{1.0f});
  const DeviceLayout layout(be, {{0, cols * in, 1.0f, 1.0f}}, arena);
  Array<uint8_t> data(be, std::vector<uint8_t>(rows * in, 7));
  Array<PassCounter> data_counter(be, 1), dropout_counter(be, 1);
  be.synchronize();

  UpdateArgs args;
  args.momentum = 0.9f;
  StepSchedule schedule;  // lr 0.1 fixed, clipping at norm 1
  schedule.lr.base_lr = 0.1;
  schedule.clip = 1.0f;
  DeviceStep state(be);
  state.set(args, TestStep{});
  be.synchronize();

  const CountingBackend::Transfers before = be.transfers();
  LossOptions options;
  for (int step = 1; step <= 3; ++step) {
    BatchOrder order;
    order.counter = data_counter.get(), order.batch = rows, order.samples = rows;
    be.gather_batch(order, GatherTop{data.get(), in, 1.0f / 255, x.get()}, GatherTop{});
    be.gemm(Transpose::kNo, Transpose::kYes, rows, cols, in, 1.0f, x.get(), w.get(), 0.0f,
            y.get());
    be.activation_forward(Activation::kReLU, n, 0.0f, y.get(), y.get());
    be.dropout_forward(n, 0.5f, 1, 0, dropout_counter.get(), y.get(), mask.get(), y.get());
    be.softmax_cross_entropy_forward(rows, cols, y.get(), labels.get(), options, prob.get(),
                                     loss.get(), norm.get());
    be.accuracy(rows, cols, 1, y.get(), labels.get(), options, acc.get());
    be.softmax_cross_entropy_backward(rows, cols, prob.get(), labels.get(), options,
                                      norm.get(), dloss.get(), dx.get());
    be.mul(n, dx.get(), mask.get(), dx.get());
    be.activation_backward(Activation::kReLU, n, 0.0f, y.get(), dx.get(), dx.get());
    be.zero(sizeof(float) * cols * in, gw.get());
    be.gemm(Transpose::kYes, Transpose::kNo, cols, in, rows, 1.0f, dx.get(), x.get(), 1.0f,
            gw.get());
    be.dot(cols * in, gw.get(), gw.get(), &state.get()->grad_sumsq);
    be.advance_step(schedule, state.get());
    be.update(args, state.get(), layout.layout, w.get(), gw.get(), h.get(), nullptr);
    be.dot(cols * in, w.get(), gw.get(), loss.get());
  }
  be.synchronize();
  EXPECT_EQ(be.transfers().to_host, before.to_host);
  EXPECT_EQ(be.transfers().from_host, before.from_host);
  EXPECT_EQ(be.transfers().bytes, before.bytes);

  std::vector<float> host(1);
  be.copy_to_host(sizeof(float), loss.get(), host.data());
  EXPECT_EQ(be.transfers().to_host, before.to_host + 1);
  EXPECT_EQ(be.transfers().from_host, before.from_host);
  EXPECT_EQ(be.transfers().bytes, before.bytes + int64_t(sizeof(float)));
  EXPECT_TRUE(std::isfinite(host[0]));
}

TEST_F(CudaBackendTest, OneContextPerDevice) {
  std::vector<std::unique_ptr<Backend>> backends;
  for (int i = 0; i < 4; ++i) backends.push_back(make_cuda_backend(0));
  for (auto& be : backends) {
    Floats a(*be, 100, 1.0f);
    be->scal(100, 2.0f, a.get());
    EXPECT_EQ(compare_bits(a.host(), std::vector<float>(100, 2.0f)), "");
  }
  const CudaDiagnostics d = cuda_diagnostics();
  // This test binary only uses device 0.
  EXPECT_EQ(d.contexts_created, 1);
  EXPECT_EQ(d.streams_created, 3) << "main, side lane, collective lane";
  EXPECT_EQ(d.blas_handles_created, 2) << "one per stream";
  EXPECT_LE(d.dnn_handles_created, 2) << "one per stream";
}

TEST_F(CudaBackendTest, OutOfMemoryNamesTheRequest) {
  const size_t pebibyte = size_t{1} << 50;
  try {
    cuda_->allocate(pebibyte);
    FAIL() << "allocating 1 PiB did not throw";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(std::to_string(pebibyte)), std::string::npos) << message;
    EXPECT_NE(message.find("free"), std::string::npos) << message;
  }
  // The failure must not poison later work.
  Floats a(*cuda_, 10, 1.0f);
  cuda_->axpby(10, 2.0f, a.get(), 1.0f, a.get());
  EXPECT_EQ(compare_bits(a.host(), std::vector<float>(10, 3.0f)), "");
}

TEST(CudaBackendErrors, MissingDeviceSaysWhatWasFound) {
  if (!cuda_compiled()) GTEST_SKIP() << "built without CUDA";
  // Runs with or without a GPU: this is what a user asking for a missing GPU sees.
  const std::string count = std::to_string(cuda_device_count());
  for (int device : {99, -1}) {
    try {
      make_cuda_backend(device);
      FAIL() << "make_cuda_backend(" << device << ") did not throw";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(count + " CUDA device"), std::string::npos) << message;
      // The way to the CPU, in the library's terms: no tool's flag the user may not have given.
      EXPECT_NE(message.find("on the CPU (backend \"cpu\")"), std::string::npos) << message;
      EXPECT_EQ(message.find("--gpu"), std::string::npos) << message;
      EXPECT_NE(message.find("GPU " + std::to_string(device)), std::string::npos) << message;
    }
  }
}

TEST(CudaBackendErrors, DeviceQueryReportsVersions) {
  if (!cuda_compiled()) GTEST_SKIP() << "built without CUDA";
  const std::string report = cuda_device_query();
  EXPECT_NE(report.find("CUDA runtime"), std::string::npos) << report;
  EXPECT_NE(report.find("cuBLAS"), std::string::npos) << report;
  if (cuda_device_count() > 0) {
    EXPECT_NE(report.find("Device 0"), std::string::npos) << report;
    EXPECT_NE(report.find("compute capability"), std::string::npos) << report;
  }
}

}  // namespace
}  // namespace lamina::testing
