// The CUDA backend's side lane (Backend::to_side_lane): operations issued there wait for
// everything issued before, the main lane waits for them after close_side_lane, the lane has
// its own scratch memory and refuses host transfers, it does nothing outside a backward
// pass, and it records into CUDA graphs as a branch and its merge. The training tests
// (CPU/GPU parity, replayed against direct steps bit for bit) cover its use by Linear and
// Convolution.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/cuda.hpp"
#include "lamina/tensor.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

using ::testing::HasSubstr;

// A square product large enough (17 GFLOP) that work issued after it would overtake it
// were it not ordered: a = ones (n, n), so every element of a a is exactly n.
constexpr int64_t kN = 2048;

int64_t count_not_equal(const std::vector<float>& values, float expected) {
  int64_t wrong = 0;
  for (float v : values) wrong += v != expected;
  return wrong;
}

// a = ones (kN, kN), and c, d of the same size for a a and a copy of it.
struct Squares {
  explicit Squares(Backend& backend)
      : be(backend), a(be, kCount, 1.0f), c(be, kCount), d(be, kCount) {}
  void product() {  // c = a a, every element exactly kN
    be.gemm(Transpose::kNo, Transpose::kNo, kN, kN, kN, 1.0f, a.get(), a.get(),
            0.0f, c.get());
  }
  // Elements of d not kN.
  int64_t wrong_copies() { return count_not_equal(d.host(), float(kN)); }

  static constexpr int64_t kCount = kN * kN;
  Backend& be;
  Floats a, c, d;
};

TEST(CudaSideLane, TheMainLaneWaitsForTheSideLaneAfterClose) {
  LAMINA_CUDA_BACKEND_OR_SKIP(be);
  Squares m(*be);
  for (int round = 0; round < 3; ++round) {
    be->fill(Squares::kCount, 0.0f, m.c.get());
    be->synchronize();
    be->open_side_lane();
    be->to_side_lane();
    m.product();
    be->to_main_lane();
    be->close_side_lane();
    be->copy(sizeof(float) * Squares::kCount, m.c.get(), m.d.get());  // must see the product
    EXPECT_EQ(m.wrong_copies(), 0) << "round " << round;
  }
}

TEST(CudaSideLane, TheSideLaneWaitsForWhatWasIssuedBefore) {
  LAMINA_CUDA_BACKEND_OR_SKIP(be);
  Squares m(*be);
  be->fill(Squares::kCount, 0.0f, m.d.get());
  be->fill(Squares::kCount, -1.0f, m.c.get());  // not a leftover kN
  be->synchronize();
  be->open_side_lane();
  m.product();  // main lane: a long product into c; then the side lane reads c
  {
    SideLane lane(*be, true);
    be->axpy(Squares::kCount, 1.0f, m.c.get(), m.d.get());
  }
  be->close_side_lane();
  EXPECT_EQ(m.wrong_copies(), 0);
}

TEST(CudaSideLane, ScratchMemoryWorksThereAndHostTransfersAreRefused) {
  LAMINA_CUDA_BACKEND_OR_SKIP(be);
  Floats x(*be, 8), labels(*be, 2), out(*be, 1), main_out(*be, 1);
  be->fill(8, 0.5f, x.get());
  be->fill(2, 1.0f, labels.get());
  auto accuracy = [&](float* result) {  // sums per-row results in the lane's workspace
    be->accuracy(2, 4, 4, x.get(), labels.get(), LossOptions(), result);
  };
  be->open_side_lane();
  {
    SideLane lane(*be, true);
    accuracy(out.get());
    EXPECT_THAT(error_of([&] { be->synchronize(); }), HasSubstr("side lane"));
    float host = 0;
    EXPECT_THAT(error_of([&] { be->copy_to_host(sizeof(float), x.get(), &host); }),
                HasSubstr("side lane"));
    EXPECT_THAT(error_of([&] { be->copy_from_host(sizeof(float), &host, x.get()); }),
                HasSubstr("side lane"));
  }
  accuracy(main_out.get());  // the main lane's workspace at the same time
  be->close_side_lane();
  // All four scores tie: with top_k 4 every row counts as right (3 others tie, fewer than 4).
  EXPECT_EQ(out.host()[0], 1.0f);
  EXPECT_EQ(main_out.host()[0], 1.0f);
}

TEST(CudaSideLane, OutsideABackwardPassEverythingStaysOnTheMainLane) {
  LAMINA_CUDA_BACKEND_OR_SKIP(be);
  Floats x(*be, 8), labels(*be, 2), out(*be, 1);
  be->fill(8, 0.5f, x.get());
  be->fill(2, 1.0f, labels.get());
  SideLane lane(*be, true);  // not opened: does nothing, so host transfers may be made
  be->accuracy(2, 4, 4, x.get(), labels.get(), LossOptions(), out.get());
  EXPECT_EQ(out.host()[0], 1.0f);  // all tie: with top_k 4 every row is right
}

TEST(CudaSideLane, ABranchAndItsMergeAreCapturedAndReplayed) {
  LAMINA_CUDA_BACKEND_OR_SKIP(be);
  const int64_t count = 1000;
  Floats x(*be, count), y(*be, count), z(*be, count);
  be->fill(count, 0.0f, y.get());
  std::unique_ptr<CapturedOps> ops = be->capture([&] {
    be->open_side_lane();
    be->fill(count, 2.0f, x.get());
    {
      SideLane lane(*be, true);
      be->axpy(count, 1.0f, x.get(), y.get());  // y += 2
    }
    be->close_side_lane();
    be->copy(sizeof(float) * count, y.get(), z.get());  // after the merge: sees y
  });
  ASSERT_NE(ops, nullptr);
  EXPECT_EQ(ops->operations(), 3);  // fill, axpy, copy: the fork and join are edges
  for (int i = 1; i <= 3; ++i) {
    ops->launch();
    EXPECT_EQ(count_not_equal(z.host(), 2.0f * i), 0) << "replay " << i;
  }
}

TEST(CudaSideLane, AScopeLeftByAnExceptionClosesTheLane) {
  LAMINA_CUDA_BACKEND_OR_SKIP(be);
  Squares m(*be);
  be->fill(Squares::kCount, -1.0f, m.c.get());
  try {
    SideLaneScope lanes(*be);
    SideLane lane(*be, true);
    m.product();
    fail("a layer's error");
  } catch (const Error&) {
  }
  // Closed and joined: a capture may begin, and the main lane sees the product.
  std::unique_ptr<CapturedOps> ops = be->capture([&] {
    be->copy(sizeof(float) * Squares::kCount, m.c.get(), m.d.get());
  });
  ops->launch();
  EXPECT_EQ(m.wrong_copies(), 0);
  be->open_side_lane();
  EXPECT_THAT(error_of([&] { be->capture([] {}); }), HasSubstr("side lane is open"));
  be->close_side_lane();
}

TEST(CudaSideLane, OpeningNestsAndMisuseIsNamed) {
  LAMINA_CUDA_BACKEND_OR_SKIP(be);
  Squares m(*be);
  be->fill(Squares::kCount, -1.0f, m.c.get());  // not a leftover kN
  be->synchronize();
  be->open_side_lane();
  be->open_side_lane();  // a backward pass inside a solver's step
  be->to_side_lane();
  EXPECT_THAT(error_of([&] { be->to_side_lane(); }), HasSubstr("side lane already"));
  EXPECT_THAT(error_of([&] { be->open_side_lane(); }), HasSubstr("on the side lane"));
  m.product();
  be->to_main_lane();
  be->close_side_lane();
  be->close_side_lane();  // the outermost: joins
  be->copy(sizeof(float) * Squares::kCount, m.c.get(), m.d.get());
  EXPECT_EQ(m.wrong_copies(), 0);
  EXPECT_THAT(error_of([&] { be->close_side_lane(); }), HasSubstr("without open_side_lane"));
}

}  // namespace
}  // namespace lamina::testing
