// The gradient all-reduce of a data-parallel job in buckets (gradient_buckets.hpp), on the
// Native backend, with a communicator that records what it is asked to sum and the values
// the range holds at that moment (the Native backend has finished every operation issued).
// A bucket issued before its gradients were final would record other values than the
// finished backward pass leaves: that is the test. The sums themselves are NCCL's and MPI's
// (test_data_parallel.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "lamina/communicator.hpp"
#include "lamina/gradient_buckets.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/registry.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::HasSubstr;

NativeBackend& native() {
  static NativeBackend backend;
  return backend;
}

// One worker (the sums leave the values as they are) that records every sum.
class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(bool beside) : Communicator(0, 1), beside_(beside) {}
  struct Call {
    int64_t offset, count;  // in the arena
    bool beside;
    std::vector<float> values;  // the whole gradient arena when the sum was asked for
  };
  std::vector<Call> calls;
  int joins = 0;
  int prepared = 0;               // prepare_beside's sums
  std::vector<std::string> log;  // "sum", "wait k", "join" in the order asked
  // The arena whose ranges the sums are asked for.
  void watch(const ParamArena& arena) { arena_ = &arena; }

  std::string description() const override { return "recording"; }
  bool reduces_beside() const override { return beside_; }
  void all_reduce_sum(float* data, int64_t count) override { record(data, count, false); }
  void all_reduce_sum_beside(float* data, int64_t count) override {
    record(data, count, true);
  }
  void join_beside() override {
    ++joins;
    log.push_back("join");
  }
  void prepare_beside(int sums) override { prepared = sums; }
  void wait_beside(int k) override { log.push_back("wait " + std::to_string(k)); }
  void broadcast(float*, int64_t, int) override {}
  void all_reduce_sum_host(double*, int64_t) override {}
  void broadcast_host(void*, int64_t, int) override {}

 private:
  void record(float* data, int64_t count, bool beside) {
    if (!arena_) return;  // the solver's start-up
    calls.push_back({data - arena_->diff(), count, beside, arena_->to_host(arena_->diff())});
    log.push_back("sum");
  }
  bool beside_;
  const ParamArena* arena_ = nullptr;
};

// x (8 x 12) -> fc1 (16) -> ReLU -> fc2 (16, sharing its weight with fc3) -> fc3 -> fc4 (3)
// -> loss. The shared weight "w" is declared by fc2 and used again by fc3.
const char* kNet = R"(
layer { name: "data" type: "Input" top: "x" top: "label"
        input_param { shape { dim: 8 dim: 12 } shape { dim: 8 } } }
layer { name: "fc1" type: "Linear" bottom: "x" top: "h1"
        inner_product_param { num_output: 16 weight_filler { type: "xavier" }
                              bias_filler { type: "uniform" min: -0.1 max: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "h1" top: "h1" }
layer { name: "fc2" type: "Linear" bottom: "h1" top: "h2" param { name: "w" }
        inner_product_param { num_output: 16 bias_term: false weight_filler { type: "xavier" } } }
layer { name: "fc3" type: "Linear" bottom: "h2" top: "h3" param { name: "w" }
        inner_product_param { num_output: 16 bias_term: false weight_filler { type: "xavier" } } }
layer { name: "fc4" type: "Linear" bottom: "h3" top: "scores"
        inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "scores" bottom: "label" top: "loss" }
)";

std::unique_ptr<Net> make_net() {
  auto net = std::make_unique<Net>(parse_net_parameter(kNet, "buckets.prototxt"), TRAIN,
                                   native(), 3);
  net->blob("x").copy_data_from_host(testing::random_values(8 * 12, 5));
  net->blob("label").copy_data_from_host({0, 1, 2, 0, 1, 2, 2, 1});
  return net;
}

// One backward pass with the buckets as the solver runs them.
void backward_with(Net& net, GradientBuckets& buckets) {
  net.arena().zero_diff();
  net.forward();
  buckets.start();
  net.backward([&](int layer) { buckets.params_done(layer); });
  buckets.finish();
}

int layer_index(Net& net, const std::string& name) {
  for (int i = 0; i < net.num_layers(); ++i)
    if (net.layer(i).name() == name) return i;
  ADD_FAILURE() << "no layer '" << name << "'";
  return -1;
}

// The calls cover the arena once, from its end to its start, each with the gradients the
// finished backward pass leaves there.
void expect_final_gradients_cover_the_arena(Net& net, const RecordingCommunicator& comm) {
  const std::vector<float> final_diff = net.arena().to_host(net.arena().diff());
  int64_t end = net.arena().count();
  for (const auto& call : comm.calls) {
    EXPECT_EQ(call.offset + call.count, end) << "buckets are contiguous, from the end";
    auto range = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + call.offset, v.begin() + call.offset + call.count);
    };
    EXPECT_EQ(range(call.values), range(final_diff))
        << "the bucket at " << call.offset << " was summed before its gradients were final";
    end = call.offset;
  }
  EXPECT_EQ(end, 0);
}

// Whether the arena's parameter k holds a non-zero gradient in `diff`.
bool has_gradient(const Net& net, int k, const std::vector<float>& diff) {
  const ParamInfo& p = net.arena().table()[k];
  return std::any_of(diff.begin() + p.offset, diff.begin() + p.offset + p.count,
                     [](float v) { return v != 0; });
}

TEST(GradientBuckets, EachIsIssuedAfterTheFirstLayerThatUsesItsParameters) {
  auto net = make_net();
  RecordingCommunicator comm(true);
  comm.watch(net->arena());
  GradientBuckets buckets(*net, comm, 1);  // one byte: a bucket per parameter
  // Parameters in arena order: fc1 weight, fc1 bias, w (fc2, fc3), fc4 weight, fc4 bias.
  ASSERT_EQ(buckets.buckets().size(), 5u);
  const std::vector<int> first = {layer_index(*net, "fc4"), layer_index(*net, "fc4"),
                                  layer_index(*net, "fc2"), layer_index(*net, "fc1"),
                                  layer_index(*net, "fc1")};
  for (size_t i = 0; i < first.size(); ++i)
    EXPECT_EQ(buckets.buckets()[i].first_layer, first[i]) << "bucket " << i;

  backward_with(*net, buckets);
  ASSERT_EQ(comm.calls.size(), 5u);
  for (const auto& call : comm.calls) EXPECT_TRUE(call.beside);
  EXPECT_EQ(comm.joins, 1);
  expect_final_gradients_cover_the_arena(*net, comm);
  // Issued early: when fc4's buckets went, fc1's gradient was not computed yet.
  EXPECT_TRUE(has_gradient(*net, 3, comm.calls.front().values));
  EXPECT_FALSE(has_gradient(*net, 0, comm.calls.front().values));
  EXPECT_TRUE(has_gradient(*net, 0, comm.calls.back().values));

  // The next pass issues them again, as many, in the same order.
  comm.calls.clear();
  backward_with(*net, buckets);
  EXPECT_EQ(comm.calls.size(), 5u);
  expect_final_gradients_cover_the_arena(*net, comm);
}

TEST(GradientBuckets, ABucketClosesOnceItHoldsBucketBytes) {
  auto net = make_net();
  RecordingCommunicator comm(true);
  comm.watch(net->arena());
  // fc4's weight and bias (3 x 16 + 3 floats, each parameter padded to a block) and w
  // (16 x 16): 300 floats close a bucket at w, and fc1's go together.
  GradientBuckets buckets(*net, comm, 300 * sizeof(float));
  ASSERT_EQ(buckets.buckets().size(), 2u);
  EXPECT_EQ(buckets.buckets()[0].params, 3);
  EXPECT_EQ(buckets.buckets()[0].first_layer, layer_index(*net, "fc2"));
  EXPECT_EQ(buckets.buckets()[1].params, 2);
  EXPECT_THAT(buckets.summary(), HasSubstr("2 all-reduces per iteration ("));
  EXPECT_THAT(buckets.summary(), HasSubstr("beside the backward pass"));
  backward_with(*net, buckets);
  expect_final_gradients_cover_the_arena(*net, comm);
}

// finish_each: every bucket's turn waits for its own sum only, in the order they were issued,
// and the whole lane is joined after the last.
TEST(GradientBuckets, FinishEachWaitsForEachBucketsSumBeforeItsTurn) {
  auto net = make_net();
  RecordingCommunicator comm(true);
  comm.watch(net->arena());
  GradientBuckets buckets(*net, comm, 1);  // a bucket per parameter
  ASSERT_EQ(buckets.buckets().size(), 5u);
  EXPECT_EQ(comm.prepared, 5);
  net->arena().zero_diff();
  net->forward();
  buckets.start();
  net->backward([&](int layer) { buckets.params_done(layer); });
  buckets.issue_rest();
  EXPECT_EQ(comm.calls.size(), 5u);
  EXPECT_EQ(comm.joins, 0);
  comm.log.clear();
  std::vector<int64_t> offsets;
  buckets.finish_each([&](const GradientBucket& bucket) {
    comm.log.push_back("turn " + std::to_string(offsets.size()));
    offsets.push_back(bucket.offset);
  });
  EXPECT_EQ(comm.log, (std::vector<std::string>{"wait 0", "turn 0", "wait 1", "turn 1",
                                                "wait 2", "turn 2", "wait 3", "turn 3",
                                                "wait 4", "turn 4", "join"}));
  ASSERT_EQ(offsets.size(), 5u);
  for (size_t k = 0; k < offsets.size(); ++k) {
    EXPECT_EQ(offsets[k], buckets.buckets()[k].offset);
    EXPECT_EQ(offsets[k], comm.calls[k].offset) << "the order the sums were issued in";
  }
}

TEST(GradientBuckets, ASmallArenaIsOneAllReduceAfterBackward) {
  auto net = make_net();
  RecordingCommunicator comm(true);
  comm.watch(net->arena());
  GradientBuckets buckets(*net, comm, 25e6);
  ASSERT_EQ(buckets.buckets().size(), 1u);
  EXPECT_EQ(buckets.buckets()[0].first_layer, -1);
  EXPECT_EQ(buckets.buckets()[0].count, net->arena().count());
  EXPECT_THAT(buckets.summary(), HasSubstr("1 all-reduce per iteration"));
  EXPECT_THAT(buckets.summary(), HasSubstr("after the backward pass"));
  backward_with(*net, buckets);
  ASSERT_EQ(comm.calls.size(), 1u);
  EXPECT_FALSE(comm.calls[0].beside) << "in stream order, after backward";
  expect_final_gradients_cover_the_arena(*net, comm);
}

TEST(GradientBuckets, ACommunicatorThatWaitsSumsTheArenaOnceAfterBackward) {
  auto net = make_net();
  RecordingCommunicator comm(false);  // MPI's all-reduce waits
  comm.watch(net->arena());
  GradientBuckets buckets(*net, comm, 1);
  ASSERT_EQ(buckets.buckets().size(), 1u);
  backward_with(*net, buckets);
  ASSERT_EQ(comm.calls.size(), 1u);
  EXPECT_FALSE(comm.calls[0].beside);
  expect_final_gradients_cover_the_arena(*net, comm);
}

// The solver's iteration with buckets: the same weights as training alone, bit for bit, and
// the buckets summed once per iteration, in the last of iter_size passes.
SolverParameter sgd(int iter_size) {
  SolverParameter p;
  p.set_base_lr(0.05f);
  p.set_momentum(0.9f);
  p.set_max_iter(20);
  p.set_random_seed(11);
  p.set_iter_size(iter_size);
  p.set_gradient_bucket_mb(1e-6f);  // one byte: a bucket per parameter
  return p;
}

NetParameter mnist_mlp() {
  const std::string dir = testing::mnist_dir();
  return parse_net_parameter(R"(
    layer { name: "mnist" type: "MnistData" top: "data" top: "label"
            transform_param { scale: 0.00390625 }
            mnist_data_param { images: ")" + dir + R"(/train-images-idx3-ubyte"
                               labels: ")" + dir + R"(/train-labels-idx1-ubyte"
                               batch_size: 16 shuffle: true } }
    layer { name: "fc1" type: "Linear" inner_product_param { num_output: 32
            weight_filler { type: "xavier" } } }
    layer { name: "relu1" type: "ReLU" }
    layer { name: "fc2" type: "Linear" inner_product_param { num_output: 10
            weight_filler { type: "xavier" } } }
    layer { name: "loss" type: "SoftmaxWithLoss" })", "mlp.prototxt");
}

TEST(GradientBuckets, TheSolverSumsThemOncePerIterationAndTrainsAsAlone) {
  for (int iter_size : {1, 2}) {
    for (float clip : {0.0f, 0.5f}) {
      SCOPED_TRACE("iter_size " + std::to_string(iter_size) + ", clip_gradients " +
                   std::to_string(clip));
      SolverParameter p = sgd(iter_size);
      p.set_clip_gradients(clip);
      RecordingCommunicator comm(true);
      Solver job(p, mnist_mlp(), native(), {}, &comm);
      comm.watch(job.net().arena());
      job.step(20);
      EXPECT_EQ(comm.calls.size(), 4u * 20) << "fc2 bias, fc2 weight, fc1 bias, fc1 weight";
      EXPECT_EQ(comm.joins, 20);
      // Each bucket's part of the update waits for that bucket's sum; clipping's norm needs
      // every sum before any update.
      EXPECT_EQ(std::count(comm.log.begin(), comm.log.end(), "wait 3"), clip > 0 ? 0 : 20);
      Solver alone(p, mnist_mlp(), native());
      alone.step(20);
      EXPECT_EQ(job.net().arena().to_host(job.net().arena().data()),
                alone.net().arena().to_host(alone.net().arena().data()));
    }
  }
}

// Passes values and gradients through; its backward throws while g_throw is set.
bool g_throw = false;
class ThrowingLayer : public Layer {
 public:
  using Layer::Layer;
  void setup(const Tensors& bottom, const Tensors& top) override {
    top[0]->reshape(bottom[0]->shape());
  }
  void forward(const Tensors& bottom, const Tensors& top) override {
    backend().copy(sizeof(float) * bottom[0]->count(), bottom[0]->data(), top[0]->mutable_data());
  }
  void backward_input(const Tensors& top, const std::vector<bool>&,
                      const Tensors& bottom) override {
    LAMINA_REQUIRE(!g_throw, "backward failed on purpose");
    backend().copy(sizeof(float) * top[0]->count(), top[0]->diff(), bottom[0]->mutable_diff());
  }
};

// A backward pass that fails after some buckets were issued joins them, and the next
// iteration issues every bucket again.
TEST(GradientBuckets, ABackwardPassThatFailsJoinsTheBucketsItIssued) {
  static const bool registered = [] {
    register_layer<ThrowingLayer>("TestThrowingPass");
    return true;
  }();
  (void)registered;
  NetParameter net = mnist_mlp();
  LayerParameter pass;
  pass.set_name("pass");
  pass.set_type("TestThrowingPass");
  // data, fc1, relu1, pass, fc2, loss: fc2's buckets go before the pass fails.
  *net.mutable_layer()->Add() = pass;
  for (int i = net.layer_size() - 1; i > 3; --i) net.mutable_layer()->SwapElements(i, i - 1);
  RecordingCommunicator comm(true);
  Solver job(sgd(1), net, native(), {}, &comm);
  comm.watch(job.net().arena());
  g_throw = true;
  EXPECT_THAT(testing::error_of([&] { job.step(1); }), HasSubstr("failed on purpose"));
  g_throw = false;
  EXPECT_EQ(comm.calls.size(), 2u) << "fc2's bias and weight";
  EXPECT_EQ(comm.joins, 1);
  comm.calls.clear();
  job.step(1);
  EXPECT_EQ(comm.calls.size(), 4u);
  EXPECT_EQ(comm.joins, 2);
}

TEST(GradientBuckets, ASizeOfZeroOrLessIsRefused) {
  for (float mb : {0.0f, -1.0f}) {
    SolverParameter p = sgd(1);
    p.set_gradient_bucket_mb(mb);
    const std::string message =
        testing::error_of([&] { Solver solver(p, mnist_mlp(), native()); });
    EXPECT_THAT(message, HasSubstr("gradient_bucket_mb is"));
    EXPECT_THAT(message, HasSubstr("give the size in megabytes (> 0)"));
  }
}

}  // namespace
}  // namespace lamina
