// The CUDA backend's per-channel operations, axpby, mul, Dropout, Eltwise's maxima and row
// copies in 16 bits (backend.hpp) against the Native backend's (tier 2), in BF16 and FP16,
// then the residual net of residual_net.hpp trained in 16 bits on both (tier 3). Inputs are
// random values already in the format. The shapes take each kernel path: a block per
// channel, the elementwise path of short rows, and channels split into parts (fewer channels
// than SMs, many elements each). What each comparison allows:
//  - statistics and per-channel sums: FP32 results of double sums added in different orders
//    and rounded once (then added to out's FP32 value), so an FP32 ulp of the sum's terms
//    and an ulp of the result apart at most.
//  - normalisation from the same statistics, axpby, mul and Dropout (the same masks from the
//    same counter-based numbers): the same FP32 operations on the same values, rounded once:
//    the same values, and so is the affine map (a product and a sum, each rounded in FP32).
//    Row copies and maxima: the same bits (NaNs included).
//  - the backward pass: its means of dy and dy y come from double sums (each up to an FP32
//    ulp apart), so dx within an ulp, or, where dy - mean(dy) - y mean(dy y) cancels,
//    inv_std times two FP32 ulps of those terms plus an ulp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "half_compare.hpp"
#include "lamina/pass_counter_buffer.hpp"
#include "lamina/precision.hpp"
#include "lamina/solver.hpp"
#include "residual_net.hpp"

namespace lamina::testing {
namespace {

class CudaHalfNorm : public CudaHalfTest {};

struct ChannelShape {
  int64_t outer, channels, inner;
  int64_t count() const { return outer * channels * inner; }
};
// Rows of 37 and 9 values are walked one value at a time, rows of 64 and 256 in groups of
// eight (channel_groups.cuh): 8 groups a row (a grid-stride loop) and 32 (a block a row).
const ChannelShape kShapes[] = {{3, 5, 37}, {4, 6, 9}, {6, 5, 64}, {64, 8, 256}};

std::vector<double> relative_bounds(const std::vector<float>& v, int ulps) {
  std::vector<double> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = std::ldexp(std::abs(double(v[i])), ulps - 24);
  return b;
}

TEST_P(CudaHalfNorm, BatchNormGivesNativesStatisticsValuesAndGradients) {
  const Half f = format();
  const float eps = 1e-5f;
  for (const ChannelShape& s : kShapes) {
    SCOPED_TRACE(std::to_string(s.outer) + "x" + std::to_string(s.channels) + "x" +
                 std::to_string(s.inner));
    const int64_t n = s.count(), c = s.channels;
    const Bits x = random_bits(f, n, 31, -2, 3), dy = random_bits(f, n, 32);
    Backend* backends[2] = {cuda_.get(), &native_};
    std::vector<float> mean[2], var[2], inv[2];
    for (int b = 0; b < 2; ++b) {
      Halves xs(*backends[b], x);
      Floats m(*backends[b], c, -1.0f), v(*backends[b], c, -1.0f);
      backends[b]->channel_moments(f, s.outer, c, s.inner, xs.get(), m.get(), v.get());
      mean[b] = m.host();
      var[b] = v.host();
    }
    expect_floats_close(mean[0], mean[1], relative_bounds(mean[1], 1));
    expect_floats_close(var[0], var[1], relative_bounds(var[1], 2));

    // From Native's statistics on both: the same inv_std and y.
    Bits y[2], dx[2], dx_in_place;
    for (int b = 0; b < 2; ++b) {
      Halves xs(*backends[b], x), ys(*backends[b], n, uint16_t{0x7fc0});
      Halves kept(*backends[b], n, uint16_t{0x7fc0});
      Floats m(*backends[b], mean[1]), v(*backends[b], var[1]), is(*backends[b], c, 0.0f);
      backends[b]->batch_norm_forward(f, s.outer, c, s.inner, eps, xs.get(), m.get(), v.get(),
                                      ys.get(), is.get(), kept.get());
      y[b] = ys.host();
      EXPECT_EQ(kept.host(), y[b]);
      inv[b] = is.host();
    }
    EXPECT_EQ(inv[0], inv[1]);
    expect_same_values(f, y[0], y[1]);

    // Backward from Native's y and inv_std on both; on CUDA also in place (dx over dy).
    for (int b = 0; b < 2; ++b) {
      Halves ys(*backends[b], y[1]), dys(*backends[b], dy), dxs(*backends[b], n, uint16_t{0x7fc0});
      Floats is(*backends[b], inv[1]);
      backends[b]->batch_norm_backward(f, s.outer, c, s.inner, ys.get(), dys.get(), is.get(),
                                       dxs.get());
      dx[b] = dxs.host();
      if (b == 0) {
        backends[b]->batch_norm_backward(f, s.outer, c, s.inner, ys.get(), dys.get(), is.get(),
                                         dys.get());
        dx_in_place = dys.host();
      }
    }
    const std::vector<float> yv = values(f, y[1]), dyv = values(f, dy);
    std::vector<double> mean_dy(c), mean_dyy(c);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = (i / s.inner) % c;
      mean_dy[k] += dyv[i] / double(s.outer * s.inner);
      mean_dyy[k] += double(dyv[i]) * yv[i] / double(s.outer * s.inner);
    }
    std::vector<double> bound(n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = (i / s.inner) % c;
      bound[i] = std::ldexp(inv[1][k] * (std::abs(mean_dy[k]) + std::abs(yv[i] * mean_dyy[k])),
                            -22);
    }
    expect_half_close(f, dx[0], dx[1], bound);
    expect_same_values(f, dx_in_place, dx[0]);

    // Running statistics: the same mean, inv_std and y.
    const std::vector<float> mean_sum = random_values(c, 33), var_sum = random_values(c, 34, 1, 2);
    Bits y_run[2];
    std::vector<float> run_mean[2], run_inv[2];
    for (int b = 0; b < 2; ++b) {
      Halves xs(*backends[b], x), ys(*backends[b], n, uint16_t{0x7fc0});
      Floats ms(*backends[b], mean_sum), vs(*backends[b], var_sum), fa(*backends[b], 1, 2.5f);
      Floats m(*backends[b], c, 0.0f), is(*backends[b], c, 0.0f);
      backends[b]->batch_norm_inference(f, s.outer, c, s.inner, eps, xs.get(), ms.get(),
                                        vs.get(), fa.get(), ys.get(), m.get(), is.get());
      y_run[b] = ys.host();
      run_mean[b] = m.host();
      run_inv[b] = is.host();
    }
    EXPECT_EQ(run_mean[0], run_mean[1]);
    EXPECT_EQ(run_inv[0], run_inv[1]);
    expect_same_values(f, y_run[0], y_run[1]);
  }
}

// Batch normalisation with the Scale (and ReLU) it absorbed (batch_norm_scale_*) gives, on
// each backend, the bits of the layers' 16-bit operations one after the other (in place where
// the layer runs it so: y over x, dx over dy).
TEST_P(CudaHalfNorm, BatchNormWithScaleIsBatchNormThenScaleToTheBit) {
  const Half f = format();
  for (const ChannelShape& s : kShapes) {
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(std::to_string(s.outer) + "x" + std::to_string(s.channels) + "x" +
                   std::to_string(s.inner) + (relu ? " with ReLU" : ""));
      const int64_t n = s.count(), c = s.channels, o = s.outer, in = s.inner;
      const Bits x = random_bits(f, n, 41, -2, 3), dy = random_bits(f, n, 42);
      const std::vector<float> scale = random_values(c, 43), bias = random_values(c, 44);
      const std::vector<float> grads = random_values(c, 45);
      Backend* backends[2] = {cuda_.get(), &native_};
      for (Backend* be : backends) {
        SCOPED_TRACE(be->name());
        Halves xs(*be, x), dys(*be, dy);
        Floats m(*be, c, 0.0f), v(*be, c, 0.0f), sc(*be, scale), bi(*be, bias);
        be->channel_moments(f, o, c, in, xs.get(), m.get(), v.get());
        // The two layers.
        Halves y(*be, n, uint16_t{0x7fc0}), z(*be, n, uint16_t{0x7fc0});
        Halves g(*be, n, uint16_t{0x7fc0}), dx(*be, n, uint16_t{0x7fc0});
        Floats inv(*be, c, 0.0f), ds(*be, grads), db(*be, grads);
        be->batch_norm_forward(f, o, c, in, 1e-5f, xs.get(), m.get(), v.get(), y.get(), inv.get(),
                               nullptr);
        be->channel_affine(f, o, c, in, y.get(), sc.get(), bi.get(), z.get());
        Halves d(*be, dy);  // the ReLU's input gradient
        if (relu) {
          be->activation_forward(f, Activation::kReLU, n, 0.0f, z.get(), z.get());
          be->activation_backward(f, Activation::kReLU, n, 0.0f, z.get(), dys.get(), d.get());
        }
        be->scale_gradients(f, o, c, in, d.get(), y.get(), ds.get(), db.get());
        be->channel_affine(f, o, c, in, d.get(), sc.get(), nullptr, g.get());
        be->batch_norm_backward(f, o, c, in, y.get(), g.get(), inv.get(), dx.get());
        // Fused.
        Halves kept(*be, n, uint16_t{0x7fc0});
        Floats inv2(*be, c, 0.0f), means(*be, 2 * c, 0.0f), means2(*be, 2 * c, 0.0f);
        Floats ds2(*be, grads), db2(*be, grads);
        be->batch_norm_scale_forward(f, o, c, in, 1e-5f, xs.get(), m.get(), v.get(), sc.get(),
                                     bi.get(), relu, xs.get(), inv2.get(), kept.get());
        be->batch_norm_scale_sums(f, o, c, in, kept.get(), dys.get(), sc.get(), bi.get(), relu,
                                  means.get(), ds2.get(), db2.get());
        be->batch_norm_scale_sums(f, o, c, in, kept.get(), dys.get(), sc.get(), bi.get(), relu,
                                  means2.get(), nullptr, nullptr);
        be->batch_norm_scale_backward(f, o, c, in, kept.get(), dys.get(), inv2.get(), sc.get(),
                                      bi.get(), relu, means.get(), dys.get());
        EXPECT_EQ(kept.host(), y.host());
        EXPECT_EQ(xs.host(), z.host());
        EXPECT_EQ(inv2.host(), inv.host());
        EXPECT_EQ(ds2.host(), ds.host());
        EXPECT_EQ(db2.host(), db.host());
        EXPECT_EQ(means2.host(), means.host());
        EXPECT_EQ(dys.host(), dx.host());
      }
    }
  }
}

// The fused ReLU's mask is decided on the Scale's FP32 output against half the format's
// smallest positive value (batch_norm_scale_kernels.cu). With scale 0 each channel's output
// is its bias, set at and around that boundary and at 0, -0, inf and NaN: the units the
// mask lets through are those whose stored output is > 0, and only their channels' Scale
// gradients move.
TEST_P(CudaHalfNorm, TheFusedReluMaskIsTheStoredOutputsSignAtTheBoundary) {
  const Half f = format();
  const float half_min = f == Half::kBF16 ? 0x1p-134f : 0x1p-25f;
  const std::vector<float> bias = {half_min,
                                   std::nextafter(half_min, 1.0f),  // rounds up: > 0
                                   std::nextafter(half_min, 0.0f),
                                   0.0f,
                                   -0.0f,
                                   std::numeric_limits<float>::infinity(),  // > 0
                                   std::nanf(""),
                                   -half_min};
  const std::vector<bool> passes = {false, true, false, false, false, true, false, false};
  const int64_t c = int64_t(bias.size()), o = 2, in = 8, n = o * c * in;
  const Bits x = random_bits(f, n, 51, -2, 3), dy = random_bits(f, n, 52);
  Backend* backends[2] = {cuda_.get(), &native_};
  for (Backend* be : backends) {
    SCOPED_TRACE(be->name());
    Halves xs(*be, x), dys(*be, dy), kept(*be, n, uint16_t{0}), y(*be, n, uint16_t{0});
    Floats m(*be, c, 0.0f), v(*be, c, 0.0f), sc(*be, std::vector<float>(c, 0.0f)),
        bi(*be, bias), inv(*be, c, 0.0f), means(*be, 2 * c, 0.0f), ds(*be, c, 0.0f),
        db(*be, c, 0.0f);
    be->channel_moments(f, o, c, in, xs.get(), m.get(), v.get());
    be->batch_norm_scale_forward(f, o, c, in, 1e-5f, xs.get(), m.get(), v.get(), sc.get(),
                                 bi.get(), true, y.get(), inv.get(), kept.get());
    be->batch_norm_scale_sums(f, o, c, in, kept.get(), dys.get(), sc.get(), bi.get(), true,
                              means.get(), ds.get(), db.get());
    const std::vector<float> yv = values(f, y.host()), dbias = db.host();
    for (int64_t k = 0; k < c; ++k) {
      SCOPED_TRACE("bias " + std::to_string(bias[k]));
      EXPECT_EQ(yv[k * in] > 0, passes[k]);
      EXPECT_EQ(dbias[k] != 0, passes[k]);
    }
  }
}

TEST_P(CudaHalfNorm, ChannelAffineInPlaceAndChannelSums) {
  const Half f = format();
  for (const ChannelShape& s : kShapes) {
    const int64_t count = s.count(), channels = s.channels, inner = s.inner;
    const Bits x = random_bits(f, count, 21), other = random_bits(f, count, 24);
    const std::vector<float> scale = random_values(channels, 22);
    const std::vector<float> bias = random_values(channels, 23);
    Bits y[2];
    std::vector<float> sums[2], products[2];
    Backend* backends[2] = {cuda_.get(), &native_};
    for (int b = 0; b < 2; ++b) {
      Halves data(*backends[b], x), o(*backends[b], other);
      Floats sc(*backends[b], scale), bi(*backends[b], bias), out(*backends[b], bias),
          prod(*backends[b], bias);
      backends[b]->channel_reduce(f, s.outer, channels, inner, data.get(), nullptr, out.get());
      backends[b]->channel_reduce(f, s.outer, channels, inner, data.get(), o.get(), prod.get());
      // Scale's two gradients in one call: the same bits as the two sums above.
      Floats dscale(*backends[b], bias), dbias(*backends[b], bias);
      backends[b]->scale_gradients(f, s.outer, channels, inner, data.get(), o.get(),
                                   dscale.get(), dbias.get());
      EXPECT_EQ(dscale.host(), prod.host());
      EXPECT_EQ(dbias.host(), out.host());
      backends[b]->channel_affine(f, s.outer, channels, inner, data.get(), sc.get(), bi.get(),
                                  data.get());
      y[b] = data.host();
      sums[b] = out.host();
      products[b] = prod.host();
    }
    // One multiplication and one addition, each rounded in FP32, then one 16-bit rounding.
    expect_same_values(f, y[0], y[1]);
    std::vector<double> bound(channels), product_bound(channels);
    const std::vector<float> v = values(f, x), w = values(f, other);
    for (int64_t i = 0; i < count; ++i) {
      bound[(i / inner) % channels] += std::ldexp(std::abs(v[i]), -23);
      product_bound[(i / inner) % channels] += std::ldexp(std::abs(double(v[i]) * w[i]), -23);
    }
    for (int64_t c = 0; c < channels; ++c) {
      bound[c] += std::ldexp(std::abs(sums[1][c]), -23);
      product_bound[c] += std::ldexp(std::abs(products[1][c]), -23);
    }
    expect_floats_close(sums[0], sums[1], bound);
    expect_floats_close(products[0], products[1], product_bound);
  }
}

// Eight values per load where x and y are 16-byte aligned, then the last n % 8 one by one;
// value by value from an odd offset.
TEST_P(CudaHalfNorm, AxpbyGivesNativesValues) {
  const Half f = format();
  const int64_t n = 5003;
  const Bits x = random_bits(f, n, 41, -3, 3), y0 = random_bits(f, n, 42);
  const Bits nans(n, bits_of(f, std::numeric_limits<float>::quiet_NaN()));
  for (int64_t offset : {0, 1}) {
    for (const auto& [alpha, beta] :
         {std::pair{1.5f, -0.75f}, {1.0f, 1.0f}, {0.3f, 0.0f}, {0.0f, 2.0f}}) {
      SCOPED_TRACE(std::to_string(alpha) + " x + " + std::to_string(beta) + " y, offset " +
                   std::to_string(offset));
      Bits y[2];
      Backend* backends[2] = {cuda_.get(), &native_};
      for (int b = 0; b < 2; ++b) {
        Halves xs(*backends[b], x), ys(*backends[b], beta == 0 ? nans : y0);
        backends[b]->axpby(f, n - offset, alpha, xs.get() + offset, beta, ys.get() + offset);
        y[b] = ys.host();
      }
      expect_same_values(f, y[0], y[1]);
      const std::vector<float> result = values(f, y[0]);
      for (int64_t i = offset; i < n; ++i) ASSERT_TRUE(std::isfinite(result[size_t(i)]));
    }
  }
}

TEST_P(CudaHalfNorm, DropoutProductsMaximaAndRowCopiesGiveNativesValues) {
  const Half f = format();
  const int64_t n = 3000;
  const Bits x = random_bits(f, n, 51, -3, 3), dy = random_bits(f, n, 52);
  Bits with_nan = x;  // for the maxima: a NaN with a payload, which a copy keeps
  with_nan[5] = bits_of(f, std::numeric_limits<float>::quiet_NaN()) | 1;
  Bits y[2], dx[2], copied[2], product[2], max[2], max_dx[2];
  std::vector<float> mask[2];
  std::vector<int32_t> winners[2];
  Backend* backends[2] = {cuda_.get(), &native_};
  for (int b = 0; b < 2; ++b) {
    Backend& be = *backends[b];
    PassCounterBuffer counter(be);
    Halves xs(be, x), ys(be, n, uint16_t{0x7fc0}), dys(be, dy), dxs(be, n, uint16_t{0x7fc0});
    Floats m(be, n, -1.0f);
    for (int pass = 0; pass < 2; ++pass) {  // the second pass draws new masks
      be.dropout_forward(f, n, 0.3f, 17, 5, counter.device(), xs.get(), m.get(), ys.get());
    }
    be.mul(f, n, dys.get(), m.get(), dxs.get());
    y[b] = ys.host();
    dx[b] = dxs.host();
    mask[b] = m.host();
    // Rows 10 wide of a (30, 100) array into a (30, 40) one at column 7.
    Halves src(be, x), dst(be, 30 * 40, uint16_t{0x1234});
    be.copy_rows(30, 10, src.get() + 3, 100, dst.get() + 7, 40);
    copied[b] = dst.host();
    // x dy; the maximum of x and y, then its gradient to y's input (index 1).
    Halves p(be, n, uint16_t{0x7fc0}), mx(be, n, uint16_t{0x7fc0}), mdx(be, n, uint16_t{0x7fc0});
    Ints won(be, n, -1);
    be.mul(f, n, xs.get(), dys.get(), p.get());
    Halves xn(be, with_nan);
    be.eltwise_max_forward(f, n, 0, xn.get(), mx.get(), won.get());
    be.eltwise_max_forward(f, n, 1, ys.get(), mx.get(), won.get());
    be.eltwise_max_backward(f, n, 1, dys.get(), won.get(), mdx.get());
    product[b] = p.host();
    max[b] = mx.host();
    max_dx[b] = mdx.host();
    winners[b] = won.host();
  }
  expect_same_values(f, product[0], product[1]);
  EXPECT_EQ(max[0], max[1]);
  EXPECT_EQ(max[0][5], with_nan[5]) << "a NaN that no later input beats is copied";
  EXPECT_EQ(max_dx[0], max_dx[1]);
  EXPECT_EQ(winners[0], winners[1]);
  EXPECT_EQ(mask[0], mask[1]);
  expect_same_values(f, y[0], y[1]);
  expect_same_values(f, dx[0], dx[1]);
  EXPECT_EQ(copied[0], copied[1]);
  EXPECT_EQ(copied[0][7], x[3]);
  EXPECT_EQ(copied[0][29 * 40 + 16], x[29 * 100 + 12]);
  EXPECT_EQ(copied[0][6], 0x1234);
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaHalfNorm, ::testing::Values(Half::kBF16, Half::kFP16),
                         [](const auto& info) { return format_name(info.param); });

// The residual net trained for 100 iterations in BF16 and FP16 on both backends. As in
// LeNet's comparison (test_lenet_e2e.cpp), the backends' FP32 sums differ in order, so a
// stored value can land an ulp of the format apart and feed the next layers and iterations;
// batch statistics over 12 images then carry such differences into every element. The
// losses every 20 iterations within 5e-2 relative.
TEST(CudaHalfResidualNet, TrainingIn16BitsOnTheGpuMatchesTheCpu) {
  if (!cuda_compiled() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device present";
  std::unique_ptr<Backend> gpu = make_cuda_backend(0);
  for (Precision precision : half_precisions(*gpu)) {
    const std::string name = Precision_Name(precision);
    SCOPED_TRACE(name);
    SolverParameter sp = parse_solver_parameter(
        "base_lr: 0.05 momentum: 0.9 random_seed: 3 display: 20 average_loss: 1", "solver");
    sp.set_precision(precision);
    NativeBackend cpu;
    Solver on_cpu(sp, residual_net(), cpu);
    Solver on_gpu(sp, residual_net(), *gpu);
    set_residual_data(on_cpu.net());
    set_residual_data(on_gpu.net());
    on_cpu.step(100);
    on_gpu.step(100);
    ASSERT_NO_FATAL_FAILURE(expect_losses_close(on_cpu, on_gpu, 5, 5e-2, "residual net " + name));
    const auto& a = on_cpu.loss_history();
    EXPECT_LT(a.back().loss, 0.5 * a.front().loss) << "the residual net must have trained";
  }
}

}  // namespace
}  // namespace lamina::testing
