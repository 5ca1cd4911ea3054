// Caffe's shape and indexing layers: Slice, Silence, Crop, Tile, Reduction, ArgMax, Embed,
// BatchReindex and Parameter.
//   - every layer and its options in one LayerCase table: a gradient check on Native,
//     HostAsDevice and CUDA, and the same forward and backward on each device as on Native;
//   - forward values (and gradients where the meaning is subtle) against references
//     computed here, on every device: the windows of Slice and Crop, Tile's sums, the four
//     reductions, ArgMax's layouts and tie order, Embed's and BatchReindex's repeated rows;
//   - indices that name no row: an Error naming the layer on Native, NaN rows on CUDA;
//   - every invalid parameter an Error naming the layer and saying what to fix;
//   - the layers in a net, trained through, and replayed as a captured step where the
//     backend captures;
//   - the operations (kTensorOps) called directly, on the paths these layers do not reach
//     and at sizes that split the Native backend's loops between threads or take CUDA's
//     other kernels: box copies that add or hold no axis, reductions with positions after
//     the reduced axis and long ones to few outputs, ArgMax on many ties, over long slices,
//     along a short axis at many positions and with NaN, gathers and scatter-adds of many
//     rows (up to 200000 picks, also replayed as a captured step), of few columns or of wide
//     rows, fractional indices, indices that name no row; each against a reference computed
//     here, bit for bit (CUDA's long sums to few outputs within a rounding).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "lamina/io.hpp"
#include "layer_cases.hpp"

namespace lamina::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---------------------------------------------------------------- the layer cases

std::vector<LayerCase> reduction_cases() {
  std::vector<LayerCase> cases;
  const std::pair<const char*, const char*> ops[] = {
      {"SUM", "Sum"}, {"ASUM", "AbsSum"}, {"SUMSQ", "SumSquares"}, {"MEAN", "Mean"}};
  const std::pair<const char*, const char*> axes[] = {{"0", "0"}, {"1", "1"}, {"-1", "Last"}};
  for (const auto& op : ops) {
    for (const auto& axis : axes) {
      LayerCase c(std::string("Reduction") + op.second + "Axis" + axis.second,
                  std::string("type: 'Reduction' reduction_param { operation: ") + op.first +
                      " axis: " + axis.first + " coeff: -1.5 }",
                  {{2, 3, 4}});
      if (std::string(op.first) == "ASUM") c.kink(0.011f);  // |x| has a kink at 0
      cases.push_back(c);
    }
  }
  // Long reductions to few outputs, which CUDA splits between blocks (reduce_kernels.cu):
  // 3000 values to a scalar, 2500 per sample.
  cases.push_back(LayerCase("ReductionSumAxis0Long", "type: 'Reduction' reduction_param { "
                            "operation: SUM coeff: -1.5 }", {{3, 40, 25}}));
  cases.push_back(LayerCase("ReductionMeanAxis1Long", "type: 'Reduction' reduction_param { "
                            "operation: MEAN axis: 1 }", {{2, 50, 50}}));
  return cases;
}

std::vector<LayerCase> shape_cases() {
  std::vector<LayerCase> cases = {
      // Slice: x (2, 5, 3) at 1 and 3 along the channels; equal parts on axes 0 and -1.
      LayerCase("SliceAxis1Points", "type: 'Slice' slice_param { slice_point: 1 "
                "slice_point: 3 }", {{2, 5, 3}}).with_tops(3),
      LayerCase("SliceAxis1Equal", "type: 'Slice'", {{2, 4, 3}}).with_tops(2),
      LayerCase("SliceAxis0Equal", "type: 'Slice' slice_param { axis: 0 }", {{4, 3}})
          .with_tops(2),
      LayerCase("SliceAxis0Points", "type: 'Slice' slice_param { axis: 0 slice_point: 2 }",
                {{3, 2, 2}}).with_tops(2),
      LayerCase("SliceLastAxisEqual", "type: 'Slice' slice_param { axis: -1 }", {{2, 3, 6}})
          .with_tops(3),
      LayerCase("SliceLastAxisPoints", "type: 'Slice' slice_param { axis: -1 slice_point: 1 "
                "slice_point: 4 }", {{2, 3, 5}}).with_tops(3),
      LayerCase("SliceDim", "type: 'Slice' slice_param { slice_dim: 1 slice_point: 2 }",
                {{3, 4}}).with_tops(2),
      LayerCase("SliceOneTop", "type: 'Slice'", {{2, 3}}),
      // Silence: two bottoms, no tops; zero gradients.
      LayerCase("Silence", "type: 'Silence'", {{2, 3}, {4}}).with_tops(0),
      // Crop: x (2, 3, 5, 6) to ref (., ., 3, 2) at offset 1; per-axis offsets from axis 1.
      LayerCase("CropOneOffset", "type: 'Crop' crop_param { offset: 1 }",
                {{2, 3, 5, 6}, {2, 1, 3, 2}}),
      LayerCase("CropPerAxisOffsets", "type: 'Crop' crop_param { axis: 1 offset: 1 offset: 2 "
                "offset: 0 }", {{2, 4, 5, 3}, {5, 2, 3, 3}}),
      LayerCase("CropAxis0", "type: 'Crop' crop_param { axis: 0 offset: 1 }", {{4, 3}, {2, 2}}),
      LayerCase("CropNoOffset", "type: 'Crop' crop_param { axis: -1 }", {{2, 3, 5}, {1, 1, 2}}),
      // Tile: before the first axis, in the middle, on the last.
      LayerCase("TileAxis0", "type: 'Tile' tile_param { axis: 0 tiles: 2 }", {{2, 3}}),
      LayerCase("TileAxis1", "type: 'Tile' tile_param { tiles: 3 }", {{2, 3, 2}}),
      LayerCase("TileLastAxis", "type: 'Tile' tile_param { axis: -1 tiles: 4 }", {{2, 2, 3}}),
      LayerCase("TileOnce", "type: 'Tile' tile_param { tiles: 1 }", {{2, 3}}),
      // 3000 copies of 3 values: the backward sums 3000 terms for each of 3 outputs.
      LayerCase("TileManyCopies", "type: 'Tile' tile_param { axis: 0 tiles: 3000 }", {{1, 3}}),
      // ArgMax: no gradient. Without axis over (N, rest); with an axis along it.
      LayerCase("ArgMaxTop1", "type: 'ArgMax'", {{3, 5}}).no_gradient(),
      LayerCase("ArgMaxTop3MaxVal", "type: 'ArgMax' argmax_param { top_k: 3 "
                "out_max_val: true }", {{3, 2, 3}}).no_gradient(),
      LayerCase("ArgMaxAxis1Top2", "type: 'ArgMax' argmax_param { axis: 1 top_k: 2 }",
                {{2, 4, 3}}).no_gradient(),
      LayerCase("ArgMaxLastAxisMaxVal", "type: 'ArgMax' argmax_param { axis: -1 top_k: 2 "
                "out_max_val: true }", {{2, 3, 4}}).no_gradient(),
      // Over 3000 values per sample, as CUDA's blocks share them.
      LayerCase("ArgMaxTop1LongSlice", "type: 'ArgMax'", {{2, 3, 40, 25}}).no_gradient(),
      LayerCase("ArgMaxTop3LongSliceMaxVal", "type: 'ArgMax' argmax_param { top_k: 3 "
                "out_max_val: true }", {{3, 3000}}).no_gradient(),
      // Embed: 8 indices into 5 rows (some repeat), with and without the bias.
      LayerCase("EmbedBias", "type: 'Embed' embed_param { num_output: 3 input_dim: 5 "
                "weight_filler { type: 'gaussian' } bias_filler { type: 'uniform' } }",
                {{4, 2}}).labels(0, 5),
      LayerCase("EmbedNoBias", "type: 'Embed' embed_param { num_output: 4 input_dim: 3 "
                "bias_term: false weight_filler { type: 'uniform' } }", {{6}}).labels(0, 3),
      // One column, 600 indices into 7 rows: each row's gradient sums about 86 in order.
      LayerCase("EmbedOneColumnManyIndices", "type: 'Embed' embed_param { num_output: 1 "
                "input_dim: 7 weight_filler { type: 'uniform' } }", {{3, 200}}).labels(0, 7),
      // BatchReindex: 6 picks of 4 rows, so rows repeat; and rows of 600 values.
      LayerCase("BatchReindex", "type: 'BatchReindex'", {{4, 3, 2}, {6}}).labels(1, 4),
      LayerCase("BatchReindexWideRows", "type: 'BatchReindex'", {{5, 2, 15, 20}, {7}})
          .labels(1, 5),
      LayerCase("Parameter", "type: 'Parameter' parameter_param { shape { dim: 2 dim: 3 } }",
                {}),
  };
  for (const LayerCase& c : reduction_cases()) cases.push_back(c);
  return cases;
}

LAMINA_LAYER_CASES(Shape, shape_cases);

// ---------------------------------------------------------------- running one layer

struct Input {
  Shape shape;
  std::vector<float> values;  // empty: random in [-1, 1]
};

// One layer named 'layer' on inputs, set up (parameters from their fillers, seed 3).
struct LayerRun {
  std::unique_ptr<Layer> layer;
  std::vector<std::unique_ptr<Tensor>> owned;
  Tensors bottom, top;

  LayerRun(Backend& backend, const std::string& prototxt, const std::vector<Input>& inputs,
      int tops = 1) {
    LayerParameter p;
    const std::string text = "name: 'layer' " + prototxt;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
    layer = LayerRegistry::create(p, LayerContext{backend, TRAIN, 1});
    for (size_t i = 0; i < inputs.size(); ++i) {
      owned.push_back(std::make_unique<Tensor>(backend, inputs[i].shape, "b" +
                                               std::to_string(i)));
      const int64_t n = owned.back()->count();
      owned.back()->copy_data_from_host(inputs[i].values.empty() ? random_values(n, 50 + i)
                                                                 : inputs[i].values);
      bottom.push_back(owned.back().get());
    }
    for (int i = 0; i < tops; ++i) {
      owned.push_back(std::make_unique<Tensor>(backend, Shape{1}, "t" + std::to_string(i)));
      top.push_back(owned.back().get());
    }
    setup_standalone(*layer, bottom, top, 3);
  }
  // Forward; returns top i's values (none without tops).
  std::vector<float> forward(size_t i = 0) {
    layer->forward(bottom, top);
    return i < top.size() ? top[i]->copy_data_to_host() : std::vector<float>();
  }
  // Backward from top diffs dy (one per top) into bottom diffs that held 7s; returns them.
  std::vector<std::vector<float>> backward(const std::vector<std::vector<float>>& dy) {
    std::vector<bool> propagate;
    for (Tensor* b : bottom) {
      propagate.push_back(layer->accepts_gradient(int(propagate.size())));
      b->copy_diff_from_host(std::vector<float>(b->count(), 7.0f));
    }
    for (size_t i = 0; i < top.size(); ++i) top[i]->copy_diff_from_host(dy[i]);
    layer->backward_params(top, bottom);
    layer->backward_input(top, propagate, bottom);
    std::vector<std::vector<float>> dx;
    for (Tensor* b : bottom) dx.push_back(b->copy_diff_to_host());
    return dx;
  }
};

class ShapeOnDevice : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { open_backend(GetParam(), backend_); }
  bool is_cuda() const { return GetParam() == Device::kCuda; }
  std::unique_ptr<Backend> backend_;
};

INSTANTIATE_TEST_SUITE_P(Devices, ShapeOnDevice,
                         ::testing::Values(Device::kNative, Device::kHostAsDevice, Device::kCuda),
                         [](const auto& info) { return device_name(info.param); });

// The values of x (shape) at index + offset, for every index of `window` in row-major order.
std::vector<float> window_of(const std::vector<float>& x, const Shape& shape,
                             const Shape& offset, const Shape& window) {
  std::vector<float> out;
  const int axes = int(shape.size());
  for (int64_t e = 0; e < shape_count(window); ++e) {
    int64_t rest = e, at = 0, stride = 1;
    for (int a = axes - 1; a >= 0; --a) {
      at += (rest % window[a] + offset[a]) * stride;
      rest /= window[a];
      stride *= shape[a];
    }
    out.push_back(x[at]);
  }
  return out;
}

// ---------------------------------------------------------------- Slice, Crop, Tile

// x (2, 5, 3) sliced at 1 and 3 along axis 1: tops (2, 1, 3), (2, 2, 3), (2, 2, 3); the
// backward puts each top's diff back where it came from.
TEST_P(ShapeOnDevice, SliceCutsAtThePointsAndItsGradientIsTheTopsJoined) {
  const Shape shape{2, 5, 3};
  const std::vector<float> x = random_values(30, 1);
  LayerRun run(*backend_, "type: 'Slice' slice_param { slice_point: 1 slice_point: 3 }",
          {{shape, x}}, 3);
  run.forward();
  const int64_t starts[] = {0, 1, 3}, sizes[] = {1, 2, 2};
  std::vector<std::vector<float>> dy;
  std::vector<float> expected_dx(30);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(run.top[j]->shape(), (Shape{2, sizes[j], 3}));
    EXPECT_EQ(run.top[j]->copy_data_to_host(),
              window_of(x, shape, {0, starts[j], 0}, {2, sizes[j], 3})) << "top " << j;
    dy.push_back(random_values(6 * sizes[j], 10 + j));
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < sizes[j]; ++c)
        for (int64_t w = 0; w < 3; ++w)
          expected_dx[(n * 5 + starts[j] + c) * 3 + w] = dy[j][(n * sizes[j] + c) * 3 + w];
  }
  EXPECT_EQ(run.backward(dy)[0], expected_dx);
}

// x (2, 3, 5, 6) cropped to (2, 3, 3, 2) at offset (1, 4) with one offset per axis from 2;
// dx is zero outside the window.
TEST_P(ShapeOnDevice, CropTakesTheWindowAtTheOffsetsAndZeroesTheRestOfTheGradient) {
  const Shape shape{2, 3, 5, 6};
  const std::vector<float> x = random_values(180, 2);
  LayerRun run(*backend_, "type: 'Crop' crop_param { axis: 2 offset: 1 offset: 4 }",
          {{shape, x}, {{1, 1, 3, 2}, {}}});
  EXPECT_EQ(run.forward(), window_of(x, shape, {0, 0, 1, 4}, {2, 3, 3, 2}));
  EXPECT_EQ(run.top[0]->shape(), (Shape{2, 3, 3, 2}));
  const std::vector<float> dy = random_values(36, 3);
  const std::vector<float> dx = run.backward({dy})[0];
  std::vector<float> expected(180, 0.0f);
  for (int64_t e = 0; e < 36; ++e) {
    const int64_t w = e % 2, h = e / 2 % 3, nc = e / 6;
    expected[(nc * 5 + h + 1) * 6 + w + 4] = dy[e];
  }
  EXPECT_EQ(dx, expected);
  EXPECT_EQ(run.bottom[1]->copy_diff_to_host(), std::vector<float>(6, 7.0f))
      << "the reference bottom gets no gradient";
}

// x (2, 3) tiled 3 times along axis 1: (2, 9) = each row three times; dx = the sum of the
// three copies' gradients (in double, rounded once).
TEST_P(ShapeOnDevice, TileRepeatsAlongTheAxisAndSumsTheGradientOfTheCopies) {
  const std::vector<float> x = random_values(6, 4);
  LayerRun run(*backend_, "type: 'Tile' tile_param { axis: 1 tiles: 3 }", {{{2, 3}, x}});
  std::vector<float> expected;
  for (int n = 0; n < 2; ++n)
    for (int t = 0; t < 3; ++t)
      for (int c = 0; c < 3; ++c) expected.push_back(x[n * 3 + c]);
  EXPECT_EQ(run.forward(), expected);
  const std::vector<float> dy = random_values(18, 5);
  std::vector<float> dx;
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 3; ++c) {
      double sum = 0;
      for (int t = 0; t < 3; ++t) sum += dy[n * 9 + t * 3 + c];
      dx.push_back(float(sum));
    }
  }
  EXPECT_EQ(run.backward({dy})[0], dx);
}

// ---------------------------------------------------------------- Reduction

// Every operation on axes 0, 1 and -1 of x (2, 3, 4) with coeff -1.5: the sums in double in
// order and rounded once, as the reference here computes them, so the bits agree.
TEST_P(ShapeOnDevice, ReductionSumsTheTailAxesAsCaffeDoes) {
  const Shape shape{2, 3, 4};
  const std::vector<float> x = random_values(24, 6);
  for (const char* op : {"SUM", "ASUM", "SUMSQ", "MEAN"}) {
    for (int axis : {0, 1, -1}) {
      SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis));
      LayerRun run(*backend_, std::string("type: 'Reduction' reduction_param { operation: ") + op +
                             " axis: " + std::to_string(axis) + " coeff: -1.5 }",
              {{shape, x}});
      const int a = axis < 0 ? axis + 3 : axis;
      const Shape top_shape(shape.begin(), shape.begin() + a);
      const int64_t num = shape_count(top_shape), dim = 24 / num;
      EXPECT_EQ(run.top[0]->shape(), top_shape);
      const std::string o = op;
      const float coeff = o == "MEAN" ? -1.5f / float(dim) : -1.5f;
      std::vector<float> y(num);
      for (int64_t r = 0; r < num; ++r) {
        double sum = 0;
        for (int64_t k = 0; k < dim; ++k) {
          const double v = x[r * dim + k];
          sum += o == "ASUM" ? std::fabs(v) : o == "SUMSQ" ? v * v : v;
        }
        y[r] = float(double(coeff) * sum);
      }
      EXPECT_EQ(run.forward(), y);
      const std::vector<float> dy = random_values(num, 7);
      std::vector<float> dx(24);
      for (int64_t e = 0; e < 24; ++e) {
        const float g = coeff * dy[e / dim];
        const float v = x[e];
        dx[e] = o == "ASUM" ? g * float((v > 0) - (v < 0)) : o == "SUMSQ" ? g * (2 * v) : g;
      }
      EXPECT_EQ(run.backward({dy})[0], dx);
    }
  }
}

// ---------------------------------------------------------------- ArgMax

// Ties: equal values come out the larger index first, as Caffe's sort of (value, index)
// pairs gives them. Without axis, with out_max_val: (N, 2, top_k), indices then values.
TEST_P(ShapeOnDevice, ArgMaxOrdersTiesByTheLargerIndexFirst) {
  const std::vector<float> x = {1, 3, 3, 2, 3, 0,  -1, -1, 5, -1, 5, 4};
  LayerRun run(*backend_, "type: 'ArgMax' argmax_param { top_k: 4 out_max_val: true }",
          {{{2, 6}, x}});
  EXPECT_EQ(run.top[0]->shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(run.forward(), (std::vector<float>{4, 2, 1, 3, 3, 3, 3, 2,  //
                                               4, 2, 5, 3, 5, 5, 4, -1}));
  LayerRun all(*backend_, "type: 'ArgMax' argmax_param { top_k: 6 }", {{{2, 6}, x}});
  EXPECT_EQ(all.forward(), (std::vector<float>{4, 2, 1, 3, 0, 5,  4, 2, 5, 3, 1, 0}));
}

// With an axis, the top is x's shape with top_k along it: indices, or the values alone.
// x (1, 4, 2) along axis 1: position 0 holds 1, 2, 2, 0 and position 1 four 7s.
TEST_P(ShapeOnDevice, ArgMaxAlongAnAxisWritesIndicesOrValuesInPlaceOfTheAxis) {
  const std::vector<float> x = {1, 7, 2, 7, 2, 7, 0, 7};
  LayerRun index(*backend_, "type: 'ArgMax' argmax_param { axis: 1 top_k: 2 }", {{{1, 4, 2}, x}});
  EXPECT_EQ(index.top[0]->shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(index.forward(), (std::vector<float>{2, 3, 1, 2}));
  LayerRun value(*backend_, "type: 'ArgMax' argmax_param { axis: -2 top_k: 2 out_max_val: true }",
            {{{1, 4, 2}, x}});
  EXPECT_EQ(value.forward(), (std::vector<float>{2, 7, 2, 7}));
}

// Without axis, over everything after the first axis, the top has as many axes as x (at
// least 3): x (2, 3, 2, 2) gives (2, 1, top_k, 1).
TEST_P(ShapeOnDevice, ArgMaxWithoutAxisKeepsCaffesTopShape) {
  const std::vector<float> x = random_values(24, 8);
  LayerRun run(*backend_, "type: 'ArgMax' argmax_param { top_k: 2 }", {{{2, 3, 2, 2}, x}});
  EXPECT_EQ(run.top[0]->shape(), (Shape{2, 1, 2, 1}));
  const std::vector<float> y = run.forward();
  for (int n = 0; n < 2; ++n) {
    std::vector<std::pair<float, int>> pairs;
    for (int k = 0; k < 12; ++k) pairs.push_back({x[n * 12 + k], k});
    std::sort(pairs.begin(), pairs.end(), std::greater<std::pair<float, int>>());
    EXPECT_EQ(y[n * 2], float(pairs[0].second));
    EXPECT_EQ(y[n * 2 + 1], float(pairs[1].second));
  }
  EXPECT_FALSE(run.layer->accepts_gradient(0));
}

// ---------------------------------------------------------------- Embed, BatchReindex

// Indices (2, 2) = 2, 0, 2, 4 into W (5, 3): top (2, 2, 3) rows W[i] + b; dW adds the rows
// of dy in order (row 2 twice), db their column sums.
TEST_P(ShapeOnDevice, EmbedLooksUpRowsAndAddsTheGradientsOfRepeatedIndices) {
  LayerRun run(*backend_, "type: 'Embed' embed_param { num_output: 3 input_dim: 5 }",
          {{{2, 2}, {2, 0, 2, 4}}});
  const std::vector<float> w = random_values(15, 9), b = random_values(3, 10);
  run.layer->params()[0].tensor->copy_data_from_host(w);
  run.layer->params()[1].tensor->copy_data_from_host(b);
  const int idx[] = {2, 0, 2, 4};
  std::vector<float> y;
  for (int m = 0; m < 4; ++m)
    for (int j = 0; j < 3; ++j) y.push_back(w[idx[m] * 3 + j] + b[j]);
  EXPECT_EQ(run.top[0]->shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(run.forward(), y);
  const std::vector<float> dy = random_values(12, 11);
  for (Param& p : run.layer->params())
    p.tensor->copy_diff_from_host(std::vector<float>(p.tensor->count(), 0.0f));
  const std::vector<float> dx = run.backward({dy})[0];
  std::vector<float> dw(15, 0.0f), db(3);
  for (int m = 0; m < 4; ++m)
    for (int j = 0; j < 3; ++j) dw[idx[m] * 3 + j] += dy[m * 3 + j];
  for (int j = 0; j < 3; ++j) {
    double sum = 0;
    for (int m = 0; m < 4; ++m) sum += dy[m * 3 + j];
    db[j] = float(sum);
  }
  EXPECT_EQ(run.layer->params()[0].tensor->copy_diff_to_host(), dw);
  EXPECT_EQ(compare(run.layer->params()[1].tensor->copy_diff_to_host(), db, 1e-6), "");
  EXPECT_EQ(dx, std::vector<float>(4, 7.0f)) << "the indices get no gradient";
}

// x (3, 2) picked by 2, 0, 2, 2, 1: top (5, 2); dx row 2 is the sum of three rows of dy.
TEST_P(ShapeOnDevice, BatchReindexPicksRowsAndSumsTheGradientOfRepeatedPicks) {
  const std::vector<float> x = random_values(6, 12);
  const std::vector<float> picks = {2, 0, 2, 2, 1};
  LayerRun run(*backend_, "type: 'BatchReindex'", {{{3, 2}, x}, {{5}, picks}});
  std::vector<float> y;
  for (float p : picks)
    for (int j = 0; j < 2; ++j) y.push_back(x[int(p) * 2 + j]);
  EXPECT_EQ(run.top[0]->shape(), (Shape{5, 2}));
  EXPECT_EQ(run.forward(), y);
  const std::vector<float> dy = random_values(10, 13);
  std::vector<float> dx(6, 0.0f);
  for (int k = 0; k < 5; ++k)
    for (int j = 0; j < 2; ++j) dx[int(picks[k]) * 2 + j] += dy[k * 2 + j];
  const std::vector<std::vector<float>> d = run.backward({dy});
  EXPECT_EQ(d[0], dx);
  EXPECT_EQ(d[1], std::vector<float>(5, 7.0f)) << "the indices get no gradient";
}

// An index outside [0, input_dim): an Error naming the layer and the index on the Native
// backend (nothing is read with it); on CUDA, which cannot stop a kernel, a row of NaN.
TEST_P(ShapeOnDevice, AnIndexThatNamesNoRowIsAnErrorOnNativeAndNanOnCuda) {
  for (const float bad : {5.0f, -1.0f, NAN}) {
    SCOPED_TRACE(bad);
    LayerRun embed(*backend_, "type: 'Embed' embed_param { num_output: 2 input_dim: 5 }",
              {{{3}, {1, bad, 4}}});
    LayerRun reindex(*backend_, "type: 'BatchReindex'", {{{5, 2}, {}}, {{3}, {1, bad, 4}}});
    if (is_cuda()) {
      const std::vector<float> y = embed.forward();
      EXPECT_TRUE(std::isnan(y[2]) && std::isnan(y[3]) && !std::isnan(y[0]));
      const std::vector<float> z = reindex.forward();
      EXPECT_TRUE(std::isnan(z[2]) && std::isnan(z[3]) && !std::isnan(z[4]));
      continue;
    }
    const std::string e = error_of([&] { embed.forward(); });
    EXPECT_THAT(e, StartsWith("layer 'layer' (Embed): bottom 'b0': gather_rows: index "));
    EXPECT_THAT(e, HasSubstr("(entry 1) names no row: there are 5 (0..4)"));
    EXPECT_THAT(error_of([&] { reindex.forward(); }),
                StartsWith("layer 'layer' (BatchReindex): bottom 'b1': gather_rows: index "));
  }
}

// ---------------------------------------------------------------- Parameter, Silence

TEST_P(ShapeOnDevice, ParameterGivesItsValuesAndAddsTheTopGradientToItsOwn) {
  LayerRun run(*backend_, "type: 'Parameter' parameter_param { shape { dim: 2 dim: 3 } }", {});
  Tensor& p = *run.layer->params()[0].tensor;
  EXPECT_EQ(p.copy_data_to_host(), std::vector<float>(6, 0.0f)) << "starts at zero, as Caffe";
  const std::vector<float> v = random_values(6, 14), dy = random_values(6, 15);
  p.copy_data_from_host(v);
  EXPECT_EQ(run.top[0]->shape(), (Shape{2, 3}));
  EXPECT_EQ(run.forward(), v);
  p.copy_diff_from_host(std::vector<float>(6, 1.0f));
  run.backward({dy});
  std::vector<float> expected;
  for (float d : dy) expected.push_back(1.0f + d);
  EXPECT_EQ(p.copy_diff_to_host(), expected);
  EXPECT_TRUE(run.layer->set_worker(1, 2)) << "every worker holds the same parameter";
}

TEST_P(ShapeOnDevice, SilenceWritesZeroGradientsToTheBottomsThatNeedThem) {
  LayerRun run(*backend_, "type: 'Silence'", {{{2, 3}, {}}, {{4}, {}}}, 0);
  run.forward();
  const std::vector<std::vector<float>> dx = run.backward({});
  EXPECT_EQ(dx[0], std::vector<float>(6, 0.0f));
  EXPECT_EQ(dx[1], std::vector<float>(4, 0.0f));
  run.bottom[0]->copy_diff_from_host(std::vector<float>(6, 7.0f));
  run.layer->backward_input({}, {false, true}, run.bottom);
  EXPECT_EQ(run.bottom[0]->copy_diff_to_host(), std::vector<float>(6, 7.0f));
}

// ---------------------------------------------------------------- 16 bits

// Slice and Silence store 16-bit values as they come: the parts are the bottom's bits, and
// the gradient the tops' bits put back.
TEST_P(ShapeOnDevice, SliceAndSilenceCopy16BitValuesExactly) {
  if (!backend_->supports_half(Half::kBF16)) GTEST_SKIP() << "no BF16 storage";
  LayerParameter p;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "name: 's' type: 'Slice' slice_param { axis: -1 slice_point: 3 }", &p));
  auto slice = LayerRegistry::create(p, LayerContext{*backend_, TRAIN, 1});
  EXPECT_EQ(slice->half_support(), Layer::HalfSupport::kHalf);
  Tensor x(*backend_, {2, 5}, "x", DType::kBF16), a(*backend_, {1}, "a", DType::kBF16),
      b(*backend_, {1}, "b", DType::kBF16);
  x.copy_data_from_host(random_values(10, 16));
  const std::vector<float> xs = x.copy_data_to_host();  // the values as stored
  slice->setup({&x}, {&a, &b});
  slice->forward({&x}, {&a, &b});
  EXPECT_EQ(a.copy_data_to_host(), window_of(xs, {2, 5}, {0, 0}, {2, 3}));
  EXPECT_EQ(b.copy_data_to_host(), window_of(xs, {2, 5}, {0, 3}, {2, 2}));
  a.copy_diff_from_host(window_of(xs, {2, 5}, {0, 0}, {2, 3}));
  b.copy_diff_from_host(window_of(xs, {2, 5}, {0, 3}, {2, 2}));
  slice->backward_input({&a, &b}, {true}, {&x});
  EXPECT_EQ(x.copy_diff_to_host(), xs);

  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString("name: 'q' type: 'Silence'", &p));
  auto silence = LayerRegistry::create(p, LayerContext{*backend_, TRAIN, 1});
  silence->setup({&x}, {});
  silence->backward_input({}, {true}, {&x});
  EXPECT_EQ(x.copy_diff_to_host(), std::vector<float>(10, 0.0f));
}

// ---------------------------------------------------------------- errors

// The Error setting the layer up on bottoms of these shapes gives ("" when none).
std::string setup_error(const std::string& prototxt, const std::vector<Shape>& bottoms,
                        int tops = 1) {
  NativeBackend backend;
  std::vector<Input> inputs;
  for (const Shape& s : bottoms) inputs.push_back({s, {}});
  try {
    LayerRun run(backend, prototxt, inputs, tops);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

struct ErrorCase {
  const char* prototxt;
  std::vector<Shape> bottoms;
  int tops;
  const char* type;
  const char* says;
};

TEST(ShapeLayerErrors, NameTheLayerAndSayWhatToFix) {
  const ErrorCase cases[] = {
      {"type: 'Slice' slice_param { slice_point: 3 slice_point: 2 }", {{2, 5}}, 3, "Slice",
       "slice_point 2 is not greater than the one before it, 3; slice points must be "
       "strictly increasing"},
      {"type: 'Slice' slice_param { slice_point: 2 slice_point: 2 }", {{2, 5}}, 3, "Slice",
       "slice_point 2 is not greater than the one before it, 2"},
      {"type: 'Slice' slice_param { slice_point: 5 }", {{2, 5}}, 2, "Slice",
       "slice_point 5 is not inside axis 1 of bottom 'b0' (2, 5), which has 5; every point "
       "must be less than 5"},
      {"type: 'Slice' slice_param { slice_point: 0 }", {{2, 5}}, 2, "Slice",
       "slice_point 0 would make the first top empty"},
      {"type: 'Slice' slice_param { slice_point: 1 }", {{2, 5}}, 3, "Slice",
       "slice_param has 1 slice_point(s) for 3 tops; give one fewer than the tops"},
      {"type: 'Slice'", {{2, 5}}, 2, "Slice",
       "bottom 'b0' (2, 5) has 5 along axis 1, which does not divide into 2 equal parts"},
      {"type: 'Slice' slice_param { axis: 2 }", {{2, 5}}, 2, "Slice",
       "slice_param.axis 2 is out of range for bottom 'b0' of shape (2, 5)"},
      {"type: 'Slice' slice_param { axis: 0 slice_dim: 1 }", {{2, 4}}, 2, "Slice",
       "slice_param sets both axis and slice_dim (its older name); keep one"},
      {"type: 'Crop' crop_param { offset: 3 }", {{1, 2, 5, 5}, {1, 2, 3, 2}}, 1, "Crop",
       "the crop runs past bottom 'b0' (1, 2, 5, 5) along axis 2: offset 3 + size 3 (of "
       "'b1') > 5"},
      {"type: 'Crop' crop_param { offset: 0 offset: 4 }", {{1, 2, 5, 5}, {1, 2, 3, 2}}, 1,
       "Crop", "along axis 3: offset 4 + size 2 (of 'b1') > 5"},
      {"type: 'Crop' crop_param { axis: 1 offset: 0 offset: 1 }",
       {{1, 2, 5, 5}, {1, 2, 3, 2}}, 1, "Crop",
       "crop_param has 2 offsets; give one for all cropped axes or one per cropped axis (3: "
       "axes 1 to 3)"},
      {"type: 'Crop' crop_param { axis: 4 }", {{1, 2, 5, 5}, {1, 2, 3, 2}}, 1, "Crop",
       "crop_param.axis 4 is out of range"},
      {"type: 'Crop'", {{1, 2, 5, 5}, {3, 2}}, 1, "Crop",
       "bottom 'b1' (3, 2) gives the shape to crop to and must have as many axes as bottom "
       "'b0' (1, 2, 5, 5)"},
      {"type: 'Tile' tile_param { tiles: 0 }", {{2, 3}}, 1, "Tile",
       "tile_param.tiles must be at least 1, got 0"},
      {"type: 'Tile' tile_param { tiles: -2 }", {{2, 3}}, 1, "Tile",
       "tile_param.tiles must be at least 1, got -2"},
      {"type: 'Tile'", {{2, 3}}, 1, "Tile", "tile_param.tiles is required"},
      {"type: 'Tile' tile_param { axis: -3 tiles: 2 }", {{2, 3}}, 1, "Tile",
       "tile_param.axis -3 is out of range"},
      {"type: 'Reduction' reduction_param { axis: 3 }", {{2, 3, 4}}, 1, "Reduction",
       "reduction_param.axis 3 is out of range for bottom 'b0' of shape (2, 3, 4) (axes -3 "
       "to 2)"},
      {"type: 'Reduction' reduction_param { axis: -4 }", {{2, 3, 4}}, 1, "Reduction",
       "reduction_param.axis -4 is out of range"},
      {"type: 'ArgMax' argmax_param { axis: 1 top_k: 4 }", {{2, 3, 4}}, 1, "ArgMax",
       "argmax_param.top_k 4 is larger than the 3 values it chooses from (bottom 'b0' "
       "(2, 3, 4) along the axis)"},
      {"type: 'ArgMax' argmax_param { top_k: 13 }", {{2, 3, 4}}, 1, "ArgMax",
       "argmax_param.top_k 13 is larger than the 12 values it chooses from (bottom 'b0' "
       "(2, 3, 4) after the first axis)"},
      {"type: 'ArgMax' argmax_param { top_k: 0 }", {{2, 3}}, 1, "ArgMax",
       "argmax_param.top_k must be at least 1"},
      {"type: 'ArgMax' argmax_param { axis: 2 }", {{2, 3}}, 1, "ArgMax",
       "argmax_param.axis 2 is out of range"},
      {"type: 'Embed' embed_param { num_output: 4 }", {{3}}, 1, "Embed",
       "embed_param.input_dim is required and must be positive"},
      {"type: 'Embed' embed_param { input_dim: 4 }", {{3}}, 1, "Embed",
       "embed_param.num_output is required and must be positive"},
      {"type: 'BatchReindex'", {{4, 2}, {3, 1}}, 1, "BatchReindex",
       "bottom 'b1' holds the row indices and must have one axis, but is (3, 1)"},
      {"type: 'Parameter'", {}, 1, "Parameter", "parameter_param.shape is required"},
      {"type: 'Parameter' parameter_param { shape { dim: 2 dim: 0 } }", {}, 1, "Parameter",
       "parameter_param.shape (2, 0) has a dimension <= 0"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.prototxt);
    const std::string e = setup_error(c.prototxt, c.bottoms, c.tops);
    EXPECT_THAT(e, StartsWith(std::string("layer 'layer' (") + c.type + "): "));
    EXPECT_THAT(e, HasSubstr(c.says));
  }
}

// ---------------------------------------------------------------- in a net

// Parameter p plus the first half of x's channels (Slice; the rest Silenced), tiled along
// the batch, cropped back (offset 1 on the batch), picked by BatchReindex, and reduced to
// the loss (SUMSQ); an Embed of the tokens adds a second loss, an ArgMax an output.
constexpr const char* kShapeNet = R"(
layer { name: "data" type: "Input" top: "x" top: "picks" top: "tokens"
        input_param { shape { dim: 2 dim: 6 dim: 4 } shape { dim: 3 } shape { dim: 2 dim: 3 } } }
layer { name: "p" type: "Parameter" top: "p" parameter_param { shape { dim: 2 dim: 3 dim: 4 } }
        param { lr_mult: 1 } }
layer { name: "slice" type: "Slice" bottom: "x" top: "a" top: "b" }
layer { name: "silence" type: "Silence" bottom: "b" }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "p" top: "s" }
layer { name: "tile" type: "Tile" bottom: "s" top: "t" tile_param { axis: 0 tiles: 2 } }
layer { name: "crop" type: "Crop" bottom: "t" bottom: "a" top: "c"
        crop_param { axis: 0 offset: 1 offset: 0 offset: 0 } }
layer { name: "reindex" type: "BatchReindex" bottom: "c" bottom: "picks" top: "r" }
layer { name: "argmax" type: "ArgMax" bottom: "r" top: "best" argmax_param { axis: 1 } }
layer { name: "loss" type: "Reduction" bottom: "r" top: "loss" loss_weight: 1
        reduction_param { operation: SUMSQ } }
layer { name: "embed" type: "Embed" bottom: "tokens" top: "e"
        embed_param { num_output: 4 input_dim: 5 weight_filler { type: "gaussian" } } }
layer { name: "eloss" type: "Reduction" bottom: "e" top: "eloss" loss_weight: 0.5
        reduction_param { operation: ASUM } }
)";

struct NetRun {
  float loss;
  std::vector<float> best, dp, dembed;
};

// One forward and backward of kShapeNet on fixed inputs; where capture is true, the second
// of two passes replayed from a recording of the first.
NetRun run_shape_net(Backend& backend, bool capture) {
  Net net(parse_net_parameter(kShapeNet, "shape net"), TRAIN, backend, 5);
  net.blob("x").copy_data_from_host(random_values(48, 17));
  net.blob("picks").copy_data_from_host({1, 0, 1});
  net.blob("tokens").copy_data_from_host({4, 0, 4, 2, 1, 4});
  auto pass = [&] {
    net.arena().zero_diff();
    net.forward();
    net.backward();
  };
  pass();
  if (capture) {
    std::unique_ptr<CapturedOps> step = backend.capture(pass);
    step->launch();
    net.replayed(1);
  }
  NetRun out;
  out.loss = net.loss();
  out.best = net.blob("best").copy_data_to_host();
  out.dp = net.layer(layer_index(net, "p")).params()[0].tensor->copy_diff_to_host();
  out.dembed = net.layer(layer_index(net, "embed")).params()[0].tensor->copy_diff_to_host();
  EXPECT_EQ(net.output_names(), (std::vector<std::string>{"best", "loss", "eloss"}));
  return out;
}

TEST_P(ShapeOnDevice, TheLayersTrainInANetAsOnNativeAndReplayAsACapturedStep) {
  NativeBackend native;
  const NetRun expected = run_shape_net(native, false);
  EXPECT_GT(expected.loss, 0);
  for (const bool capture : {false, true}) {
    if (capture && !backend_->can_capture()) continue;
    SCOPED_TRACE(capture ? "captured" : "direct");
    const NetRun r = run_shape_net(*backend_, capture);
    EXPECT_NEAR(r.loss, expected.loss, 1e-5 * expected.loss);
    EXPECT_EQ(r.best, expected.best);
    EXPECT_EQ(compare(r.dp, expected.dp, 1e-6), "");
    EXPECT_EQ(compare(r.dembed, expected.dembed, 1e-6), "");
  }
}

// The gradient of p by hand: t = (s0, s1, s0, s1) cropped from row 1 is c = (s1, s0), so the
// picks (1, 0, 1) are r = (s0, s1, s0) and loss = sum r^2 with s = a + p, a = x's first 3
// channels, p = 0: dp row n = 2 a[n] * (the number of picks of s_n: 2 for s0, 1 for s1).
TEST(ShapeNet, TheParameterGradientIsTheLossGradientThroughEveryLayer) {
  NativeBackend native;
  const NetRun r = run_shape_net(native, false);
  const std::vector<float> x = random_values(48, 17);
  std::vector<float> dp;
  double loss = 0;
  for (int n = 0; n < 2; ++n) {
    for (int k = 0; k < 12; ++k) {
      const float a = x[n * 24 + k];
      const int picks = n == 0 ? 2 : 1;
      dp.push_back(2 * a * float(picks));
      loss += picks * double(a) * a;
    }
  }
  EXPECT_EQ(compare(r.dp, dp, 1e-6), "");
  EXPECT_GT(r.loss, float(loss));  // plus the Embed's loss, which is positive
}

// ================================================================ the operations directly

// A tensor of the backend's memory holding values.
std::unique_ptr<Tensor> on(Backend& backend, const std::vector<float>& values) {
  auto t = std::make_unique<Tensor>(backend, Shape{int64_t(values.size())}, "t");
  t->copy_data_from_host(values);
  return t;
}

class TensorOps : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { open_backend(GetParam(), backend_); }
  bool is_cuda() const { return GetParam() == Device::kCuda; }
  std::unique_ptr<Tensor> tensor(const std::vector<float>& values) {
    return on(*backend_, values);
  }
  std::unique_ptr<Backend> backend_;
};

INSTANTIATE_TEST_SUITE_P(Devices, TensorOps,
                         ::testing::Values(Device::kNative, Device::kHostAsDevice, Device::kCuda),
                         [](const auto& info) { return device_name(info.param); });

// Integers 0..levels-1 in a shuffled order with many repeats (ties for ArgMax).
std::vector<float> small_integers(int64_t n, int levels, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = float(rng() % levels);
  return v;
}

// ---------------------------------------------------------------- copy_block

// dst (4, 5) of ones += src (3, 4) into the window from (1, 1); a box of no axes copies one
// element.
TEST_P(TensorOps, CopyBlockAddsIntoTheWindowAndCopiesOneElementWithoutAxes) {
  const std::vector<float> src = random_values(12, 1);
  auto s = tensor(src);
  auto d = tensor(std::vector<float>(20, 1.0f));
  BlockCopy box;
  box.axes = 2;
  box.shape[0] = 3, box.shape[1] = 4;
  box.src_stride[0] = 4, box.src_stride[1] = 1;
  box.dst_stride[0] = 5, box.dst_stride[1] = 1;
  backend_->copy_block(box, s->data(), d->mutable_data() + 6, true);
  std::vector<float> expected(20, 1.0f);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) expected[(r + 1) * 5 + c + 1] += src[r * 4 + c];
  EXPECT_EQ(d->copy_data_to_host(), expected);

  BlockCopy one;
  backend_->copy_block(one, s->data() + 5, d->mutable_data(), false);
  expected[0] = src[5];
  EXPECT_EQ(d->copy_data_to_host(), expected);
}

// A box (40, 30, 50) read with a repeated middle axis (stride 0) and a column stride of 2,
// written transposed: every element where the strides put it.
TEST_P(TensorOps, CopyBlockOfALargeStridedBoxPutsEveryElementWhereItsStridesSay) {
  const int64_t a = 40, b = 30, c = 50;
  const std::vector<float> src = random_values(a * 2 * c, 2);
  auto s = tensor(src);
  auto d = tensor(std::vector<float>(a * b * c, 0.0f));
  BlockCopy box;
  box.axes = 3;
  box.shape[0] = a, box.shape[1] = b, box.shape[2] = c;
  box.src_stride[0] = 2 * c, box.src_stride[1] = 0, box.src_stride[2] = 2;
  box.dst_stride[0] = 1, box.dst_stride[1] = a * c, box.dst_stride[2] = a;
  backend_->copy_block(box, s->data(), d->mutable_data(), false);
  std::vector<float> expected(a * b * c);
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t k = 0; k < c; ++k) expected[i + j * a * c + k * a] = src[i * 2 * c + k * 2];
  EXPECT_EQ(d->copy_data_to_host(), expected);
}

// ---------------------------------------------------------------- reduce_middle

// Whether each of got is want's float, or (within_an_ulp) one of its two neighbours.
void expect_floats(const std::vector<float>& got, const std::vector<float>& want,
                   bool within_an_ulp) {
  ASSERT_EQ(got.size(), want.size());
  int shown = 0;
  for (size_t i = 0; i < got.size() && shown < 5; ++i) {
    const bool near = got[i] == std::nextafter(want[i], INFINITY) ||
                      got[i] == std::nextafter(want[i], -INFINITY);
    if (got[i] == want[i] || (within_an_ulp && near)) continue;
    ADD_FAILURE() << "at " << i << ": " << got[i] << " vs " << want[i];
    ++shown;
  }
}

// y (outer, inner) = coeff * the double sum over m in order, rounded once; and the backward.
// CUDA splits long sums with few outputs between threads (a fixed order of its own): within
// a rounding of the in-order sum there, the same bits elsewhere.
void expect_reduction(Backend& backend, ReduceOp op, int64_t outer, int64_t mid,
                      int64_t inner, bool split = false) {
  const std::vector<float> x = random_values(outer * mid * inner, 3);
  const std::vector<float> dy = random_values(outer * inner, 4);
  const float coeff = 0.75f;
  std::vector<float> y(outer * inner), dx(outer * mid * inner);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double sum = 0;
      for (int64_t m = 0; m < mid; ++m) {
        const double v = x[(o * mid + m) * inner + i];
        sum += op == ReduceOp::kAbsSum ? std::fabs(v) : op == ReduceOp::kSumSquares ? v * v : v;
      }
      y[o * inner + i] = float(double(coeff) * sum);
      for (int64_t m = 0; m < mid; ++m) {
        const int64_t e = (o * mid + m) * inner + i;
        const float g = coeff * dy[o * inner + i], v = x[e];
        dx[e] = op == ReduceOp::kAbsSum       ? g * float((v > 0) - (v < 0))
                : op == ReduceOp::kSumSquares ? g * (2 * v)
                                              : g;
      }
    }
  }
  auto xs = on(backend, x), dys = on(backend, dy);
  auto ys = on(backend, std::vector<float>(y.size(), 9.0f));
  auto dxs = on(backend, std::vector<float>(dx.size(), 9.0f));
  backend.reduce_middle(op, outer, mid, inner, coeff, xs->data(), ys->mutable_data());
  const std::vector<float> got = ys->copy_data_to_host();
  expect_floats(got, y, split);
  backend.reduce_middle(op, outer, mid, inner, coeff, xs->data(), ys->mutable_data());
  EXPECT_EQ(ys->copy_data_to_host(), got) << "the same bits every run";
  backend.reduce_middle_backward(op, outer, mid, inner, coeff, xs->data(), dys->data(),
                                 dxs->mutable_data());
  EXPECT_EQ(dxs->copy_data_to_host(), dx);
}

// Inner 70 spans two of the Native backend's runs of 64 positions; (4, 200, 130) is split
// between threads. On CUDA, (3, 2, 40000) has enough outputs for a thread each (the Native
// backend's order), and so do the short axes of (3, 5, 70) and (4, 200, 130) and the 21
// classes at 2000 pixels of (2, 21, 2000); (1, 1000, 1) has a long axis to few outputs,
// and CUDA's blocks share its sums.
TEST_P(TensorOps, ReduceMiddleSumsEachPositionInOrderOfTheMiddleAxis) {
  const bool split = is_cuda();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAbsSum, ReduceOp::kSumSquares}) {
    SCOPED_TRACE(int(op));
    expect_reduction(*backend_, op, 3, 5, 70);
    expect_reduction(*backend_, op, 4, 200, 130);
    expect_reduction(*backend_, op, 1, 1000, 1, split);
    expect_reduction(*backend_, op, 3, 2, 40000);
    expect_reduction(*backend_, op, 2, 21, 2000);
  }
}

// Long middle axes to few outputs: to a scalar (300000 values), to three positions after the
// axis (blocks of 4 positions), to 40 (two tiles of 32) from 20000 values each, and to one
// value per sample.
TEST_P(TensorOps, ReduceMiddleOfLongAxesToFewOutputs) {
  const bool split = is_cuda();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAbsSum, ReduceOp::kSumSquares}) {
    SCOPED_TRACE(int(op));
    expect_reduction(*backend_, op, 1, 300000, 1, split);
    expect_reduction(*backend_, op, 2, 5000, 3, split);
    expect_reduction(*backend_, op, 1, 20000, 40, split);
    expect_reduction(*backend_, op, 5, 30000, 1, split);
  }
}

TEST_P(TensorOps, ReduceMiddleOverAnEmptyAxisIsZero) {
  auto x = tensor({1});
  auto y = tensor({5, 5, 5});
  backend_->reduce_middle(ReduceOp::kSumSquares, 1, 0, 3, 2.0f, x->data(), y->mutable_data());
  EXPECT_EQ(y->copy_data_to_host(), std::vector<float>(3, 0.0f));
}

// ---------------------------------------------------------------- argmax

// x (outer, channels, inner) of integers (ties everywhere), top k: Caffe's sort of
// (value, index) pairs, descending, gives every pick; each output may be left out.
void expect_argmax(Backend& backend, int64_t outer, int64_t channels, int64_t inner, int64_t k,
                   int levels) {
  const std::vector<float> x = small_integers(outer * channels * inner, levels, 5);
  std::vector<float> index(outer * k * inner), value(outer * k * inner);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<std::pair<float, int64_t>> pairs;
      for (int64_t c = 0; c < channels; ++c)
        pairs.push_back({x[(o * channels + c) * inner + i], c});
      std::partial_sort(pairs.begin(), pairs.begin() + k, pairs.end(),
                        std::greater<std::pair<float, int64_t>>());
      for (int64_t j = 0; j < k; ++j) {
        index[(o * k + j) * inner + i] = float(pairs[j].second);
        value[(o * k + j) * inner + i] = pairs[j].first;
      }
    }
  }
  auto xs = on(backend, x);
  auto is = on(backend, std::vector<float>(index.size(), -7.0f));
  auto vs = on(backend, std::vector<float>(value.size(), -7.0f));
  backend.argmax(outer, channels, inner, k, xs->data(), is->mutable_data(), vs->mutable_data());
  EXPECT_EQ(is->copy_data_to_host(), index);
  EXPECT_EQ(vs->copy_data_to_host(), value);
  auto only = on(backend, std::vector<float>(index.size(), -7.0f));
  backend.argmax(outer, channels, inner, k, xs->data(), nullptr, only->mutable_data());
  EXPECT_EQ(only->copy_data_to_host(), value);
  backend.argmax(outer, channels, inner, k, xs->data(), only->mutable_data(), nullptr);
  EXPECT_EQ(only->copy_data_to_host(), index);
}

// (30, 40, 7) with values 0..5; 3 samples of 5000 values 0..49 (a block each on CUDA);
// (2, 6, 40000), enough outputs for a thread each on CUDA; few outputs of 256 channels (a
// block each) and of 255 (a thread each).
TEST_P(TensorOps, ArgmaxPicksAsCaffesDescendingSortOfValueIndexPairs) {
  expect_argmax(*backend_, 30, 40, 7, 5, 6);
  expect_argmax(*backend_, 3, 5000, 1, 4, 50);
  expect_argmax(*backend_, 2, 6, 40000, 3, 4);
  expect_argmax(*backend_, 5, 256, 3, 2, 20);
  expect_argmax(*backend_, 5, 255, 3, 2, 20);
}

// ArgMax along the classes at each pixel, (2, 21, 50, 40): few outputs (4000) but a short
// axis, which CUDA gives a thread per output.
TEST_P(TensorOps, ArgmaxOfAShortAxisAtManyPositions) {
  expect_argmax(*backend_, 2, 21, 50 * 40, 3, 8);
}

// The floats' bits, so that NaN compares equal to itself.
std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  std::memcpy(bits.data(), v.data(), sizeof(float) * v.size());
  return bits;
}

// NaN, which Caffe's sort leaves undefined, as the scan of every backend treats it: a NaN
// after the first value is never picked; a NaN first value is the first pick (nothing
// ranks before it, nor after it: no second pick). Over 1000 channels per sample (on CUDA a
// block of 256 threads per sample, thread t taking channels t, t + 256, ...) and 3 channels
// at each of 70000 positions (a thread each). Sample 1 has NaN at channel 2, the first
// value of CUDA's thread 2, whose next one (channel 258) is the sample's largest: a thread
// that kept the NaN would lose it; and NaN at its last channel. Both picks as on Native.
TEST_P(TensorOps, ArgmaxSkipsNanButAFirstOne) {
  for (const Shape& shape : {Shape{2, 1000, 1}, Shape{2, 3, 70000}}) {
    const int64_t channels = shape[1], inner = shape[2];
    const int64_t best = channels > 258 ? 258 : 1;  // sample 1's largest
    std::vector<float> x = random_values(shape_count(shape), 11);
    for (int64_t i = 0; i < inner; ++i) {
      x[i] = NAN;                                      // sample 0: channel 0
      x[(channels + 2) * inner + i] = NAN;             // sample 1: channel 2
      x[(channels + channels - 1) * inner + i] = NAN;  // sample 1: the last channel
      x[(channels + best) * inner + i] = 5;
    }
    NativeBackend native;
    auto native_index = on(native, std::vector<float>(4 * inner, -7.0f));
    auto native_value = on(native, std::vector<float>(4 * inner, -7.0f));
    auto native_x = on(native, x);
    native.argmax(2, channels, inner, 2, native_x->data(), native_index->mutable_data(),
                  native_value->mutable_data());
    auto xs = tensor(x);
    auto is = tensor(std::vector<float>(4 * inner, -7.0f));
    auto vs = tensor(std::vector<float>(4 * inner, -7.0f));
    backend_->argmax(2, channels, inner, 2, xs->data(), is->mutable_data(), vs->mutable_data());
    const std::vector<float> index = is->copy_data_to_host(), value = vs->copy_data_to_host();
    EXPECT_EQ(index, native_index->copy_data_to_host());
    EXPECT_EQ(bits_of(value), bits_of(native_value->copy_data_to_host()));
    for (int64_t i = 0; i < inner; i += inner > 1 ? 997 : 1) {
      EXPECT_EQ(index[i], 0.0f);  // sample 0: the NaN, then no pick
      EXPECT_TRUE(std::isnan(value[i]));
      EXPECT_EQ(index[inner + i], -1.0f);
      EXPECT_EQ(value[inner + i], 0.0f);
      EXPECT_EQ(index[2 * inner + i], float(best));  // sample 1: its largest
      EXPECT_EQ(value[2 * inner + i], 5.0f);
    }
  }
}

// ---------------------------------------------------------------- gather and scatter

// 400 rows of 100 picked from 50 (each picked about 8 times), indices with fractions (the
// integer part counts): the gather copies rows, the scatter adds them in order of r.
TEST_P(TensorOps, GatherAndScatterAddManyRowsWithRepeatsInOrder) {
  const int64_t rows = 400, cols = 100, table = 50;
  std::vector<float> index = small_integers(rows, int(table), 6);
  for (size_t r = 0; r < index.size(); r += 3) index[r] += 0.75f;
  const std::vector<float> src = random_values(table * cols, 7);
  const std::vector<float> grad = random_values(rows * cols, 8);
  const std::vector<float> start = random_values(table * cols, 9);
  std::vector<float> gathered, added = start;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t from = int64_t(index[r]);
    for (int64_t j = 0; j < cols; ++j) {
      gathered.push_back(src[from * cols + j]);
      added[from * cols + j] += grad[r * cols + j];
    }
  }
  auto is = tensor(index), ss = tensor(src), gs = tensor(grad), as = tensor(start);
  auto out = tensor(std::vector<float>(rows * cols, 0.0f));
  backend_->gather_rows(rows, cols, is->data(), table, ss->data(), out->mutable_data());
  EXPECT_EQ(out->copy_data_to_host(), gathered);
  backend_->scatter_add_rows(rows, cols, is->data(), table, gs->data(), as->mutable_data());
  EXPECT_EQ(as->copy_data_to_host(), added);
}

// Row numbers 0..table-1 for rows picks (many repeats), every fifth with a fraction (the
// integer part counts); with `unnamed`, every seventh names no row instead: past the end,
// negative or NaN in turn (CUDA skips those rows; Native throws, as tested below).
std::vector<float> picks(int64_t rows, int64_t table, uint64_t seed, bool unnamed) {
  std::vector<float> index = small_integers(rows, int(table), seed);
  const float no_row[] = {float(table), -1.0f, NAN};
  for (int64_t r = 0; r < rows; ++r) {
    if (r % 5 == 1) index[r] += 0.25f;
    if (unnamed && r % 7 == 3) index[r] = no_row[(r / 7) % 3];
  }
  return index;
}

// dst (table, cols) row index[r] += src (rows, cols) row r, in order of r, rows whose index
// names none skipped: each destination row's additions in the order of its picks.
void scatter_reference(const std::vector<float>& index, int64_t cols, int64_t table,
                       const std::vector<float>& src, std::vector<float>& dst) {
  for (size_t r = 0; r < index.size(); ++r) {
    if (!(index[r] >= 0 && index[r] < float(table))) continue;
    const int64_t to = int64_t(index[r]);
    for (int64_t j = 0; j < cols; ++j) dst[to * cols + j] += src[r * cols + j];
  }
}

// scatter_add_rows against scatter_reference, bit for bit.
void expect_scatter(Backend& backend, int64_t rows, int64_t cols, int64_t table,
                    uint64_t seed, bool unnamed = false) {
  const std::vector<float> index = picks(rows, table, seed, unnamed);
  const std::vector<float> grad = random_values(rows * cols, seed + 1);
  const std::vector<float> start = random_values(table * cols, seed + 2);
  std::vector<float> added = start;
  scatter_reference(index, cols, table, grad, added);
  auto is = on(backend, index), gs = on(backend, grad), as = on(backend, start);
  backend.scatter_add_rows(rows, cols, is->data(), table, gs->data(), as->mutable_data());
  EXPECT_EQ(as->copy_data_to_host(), added);
}

// Embed's shapes: one to three columns from 3000 picks of 40 rows (75 picks a row), 500
// picks of 5000 rows (most rows untouched); BatchReindex's: 6 picks of 4 rows of 70000.
TEST_P(TensorOps, ScatterAddOfFewColumnsManyPicksOrWideRows) {
  expect_scatter(*backend_, 3000, 1, 40, 20);
  expect_scatter(*backend_, 3000, 3, 40, 21);
  expect_scatter(*backend_, 500, 2, 5000, 22);
  expect_scatter(*backend_, 6, 70000, 4, 23);
}

// Many picks, which CUDA sorts by destination row (tensor_kernels.cu): 200000 into 1000 rows
// of 4, 100 into 3 rows of 70000 (long runs of wide rows), 33 and 32 picks (CUDA's sort and
// its thread per column), into 1024 rows (row numbers of 10 bits, the skipped rows' key of
// 11) and into one row. On CUDA, also with picks that name no row.
TEST_P(TensorOps, ScatterAddOfManyPicksAddsEachRowsPicksInOrder) {
  for (int unnamed = 0; unnamed <= int(is_cuda()); ++unnamed) {
    SCOPED_TRACE(unnamed ? "with picks that name no row" : "every pick names a row");
    expect_scatter(*backend_, 200000, 4, 1000, 30, unnamed);
    expect_scatter(*backend_, 100, 70000, 3, 31, unnamed);
    expect_scatter(*backend_, 33, 5, 3, 32, unnamed);
    expect_scatter(*backend_, 32, 5, 3, 33, unnamed);
    expect_scatter(*backend_, 5000, 3, 1024, 34, unnamed);
    expect_scatter(*backend_, 300, 2, 1, 35, unnamed);
  }
}

// The sorted scatter in a captured step: run once (which grows the backend's workspace to
// what the sort needs), captured, replayed: two passes of additions, as the reference's.
TEST_P(TensorOps, ScatterAddOfManyPicksReplaysAsACapturedStep) {
  if (!backend_->can_capture()) GTEST_SKIP() << "the backend does not capture";
  const int64_t rows = 20000, cols = 6, table = 300;
  const std::vector<float> index = picks(rows, table, 40, true);
  const std::vector<float> grad = random_values(rows * cols, 41);
  std::vector<float> added = random_values(table * cols, 42);
  auto is = tensor(index), gs = tensor(grad), as = tensor(added);
  const auto scatter = [&] {
    backend_->scatter_add_rows(rows, cols, is->data(), table, gs->data(), as->mutable_data());
  };
  scatter();
  std::unique_ptr<CapturedOps> step = backend_->capture(scatter);
  step->launch();
  scatter_reference(index, cols, table, grad, added);
  scatter_reference(index, cols, table, grad, added);
  EXPECT_EQ(as->copy_data_to_host(), added);
}

// Indices that name no row (past the end, negative, NaN): the Native backend throws naming
// the operation and the index, having written nothing; CUDA gathers NaN and skips the row
// when adding.
TEST_P(TensorOps, IndicesThatNameNoRowAreNeverUsedAsRows) {
  const std::vector<float> src = random_values(8, 10);  // 4 rows of 2
  for (const float bad : {4.0f, -0.5f, NAN}) {
    SCOPED_TRACE(bad);
    auto is = tensor({3, bad, 0});
    auto ss = tensor(src);
    auto out = tensor(std::vector<float>(6, 1.0f));
    auto grad = tensor({1, 2, 3, 4, 5, 6});
    if (!is_cuda()) {
      EXPECT_THAT(error_of([&] {
                    backend_->gather_rows(3, 2, is->data(), 4, ss->data(), out->mutable_data());
                  }),
                  HasSubstr("gather_rows: index "));
      const std::string e = error_of([&] {
        backend_->scatter_add_rows(3, 2, is->data(), 4, grad->data(), ss->mutable_data());
      });
      EXPECT_THAT(e, HasSubstr("scatter_add_rows: index "));
      EXPECT_THAT(e, HasSubstr(" (entry 1) names no row: there are 4 (0..3)"));
      EXPECT_EQ(ss->copy_data_to_host(), src) << "nothing added before the error";
      EXPECT_EQ(out->copy_data_to_host(), std::vector<float>(6, 1.0f));
      continue;
    }
    backend_->gather_rows(3, 2, is->data(), 4, ss->data(), out->mutable_data());
    const std::vector<float> y = out->copy_data_to_host();
    EXPECT_EQ(y[0], src[6]);
    EXPECT_TRUE(std::isnan(y[2]) && std::isnan(y[3]));
    EXPECT_EQ(y[4], src[0]);
    backend_->scatter_add_rows(3, 2, is->data(), 4, grad->data(), ss->mutable_data());
    std::vector<float> added = src;
    added[6] += 1, added[7] += 2, added[0] += 5, added[1] += 6;
    EXPECT_EQ(ss->copy_data_to_host(), added);
  }
}

}  // namespace
}  // namespace lamina::testing
