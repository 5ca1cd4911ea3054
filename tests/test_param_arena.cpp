// The parameter arena on its own (layout, optimizer state, host copies, the update's segment
// table) and as nets use it: one arena per trained net, shared by its TEST net through the
// handle, read and written by snapshots in one place.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/param_arena.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using testing::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

ParamInfo param(const std::string& name, Shape shape, float lr_mult = 1, float decay_mult = 1) {
  ParamInfo info;
  info.name = name;
  info.shape = std::move(shape);
  info.lr_mult = lr_mult;
  info.decay_mult = decay_mult;
  info.layer = name.substr(0, name.find('/'));
  return info;
}

TEST(ParamArena, LaysParametersOutOnBlockBoundaries) {
  NativeBackend backend;
  ParamArena arena(backend, {param("a/w", {3, 5}), param("a/b", {3}), param("c/w", {64}, 2, 0)});
  ASSERT_EQ(arena.table().size(), 3u);
  EXPECT_EQ(arena.table()[0].offset, 0);
  EXPECT_EQ(arena.table()[0].count, 15);
  EXPECT_EQ(arena.table()[1].offset, 64);
  EXPECT_EQ(arena.table()[2].offset, 128);
  EXPECT_EQ(arena.count(), 192);
  EXPECT_EQ(arena.find("a/b"), &arena.table()[1]);
  EXPECT_EQ(arena.find("nope"), nullptr);
  // Weights and gradients start zeroed, padding included.
  EXPECT_EQ(arena.to_host(arena.data()), std::vector<float>(192, 0.0f));
  EXPECT_EQ(arena.to_host(arena.diff()), std::vector<float>(192, 0.0f));
  // The update's layout: the segment table mirrors the parameter table, and the block
  // table names each 64-float block's parameter.
  const UpdateLayout& layout = arena.layout();
  EXPECT_EQ(layout.n, 192);
  ASSERT_EQ(layout.num_segments, 3);
  std::vector<ParamSegment> segments(3);
  backend.copy_to_host(sizeof(ParamSegment) * 3, layout.segments, segments.data());
  EXPECT_EQ(segments[2].offset, 128);
  EXPECT_EQ(segments[2].count, 64);
  EXPECT_EQ(segments[2].lr_mult, 2.0f);
  EXPECT_EQ(segments[2].decay_mult, 0.0f);
  std::vector<int32_t> blocks(3);
  backend.copy_to_host(sizeof(int32_t) * 3, layout.block_segment, blocks.data());
  EXPECT_EQ(blocks, (std::vector<int32_t>{0, 1, 2}));
}

TEST(ParamArena, OptimizerStateHasTheArenasLayoutAndStaysUntilTheCountChanges) {
  NativeBackend backend;
  ParamArena arena(backend, {param("a/w", {10})});
  EXPECT_EQ(arena.num_state(), 0);
  arena.allocate_state(2);
  ASSERT_EQ(arena.num_state(), 2);
  std::vector<float> values(arena.count(), 0.0f);
  values[3] = 7;
  arena.from_host(values, arena.state(1));
  arena.allocate_state(2);  // the same number: kept
  EXPECT_EQ(arena.to_host(arena.state(1))[3], 7.0f);
  EXPECT_EQ(arena.to_host(arena.state(0))[3], 0.0f);
  arena.allocate_state(1);
  EXPECT_EQ(arena.num_state(), 1);
  EXPECT_EQ(arena.to_host(arena.state(0)), std::vector<float>(arena.count(), 0.0f));
}

TEST(ParamArena, ZeroDiffClearsEveryGradient) {
  NativeBackend backend;
  ParamArena arena(backend, {param("a/w", {10}), param("b/w", {70})});
  arena.from_host(std::vector<float>(arena.count(), 3.0f), arena.diff());
  arena.zero_diff();
  EXPECT_EQ(arena.to_host(arena.diff()), std::vector<float>(arena.count(), 0.0f));
}

TEST(ParamArena, TooManyValuesAreRefusedNamingTheParameter) {
  NativeBackend backend;
  EXPECT_THAT(error_of([&] {
                ParamArena(backend, {param("big/w", {int64_t(1) << 30, int64_t(1) << 25}),
                                    param("big/b", {int64_t(1) << 30, int64_t(1) << 25}),
                                    param("big/c", {int64_t(1) << 30, int64_t(1) << 25})});
              }),
              AllOf(HasSubstr("layer 'big'"), HasSubstr("'big/c'"), HasSubstr("exceed")));
}

const char* kNet = R"(
name: "two"
layer { name: "x" type: "Input" top: "x" top: "t"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } }
layer { name: "ip" type: "Linear" bottom: "x" top: "y" inner_product_param { num_output: 2 } }
layer { name: "extra" type: "Linear" bottom: "y" top: "z" inner_product_param { num_output: 2 }
        include { phase: TRAIN } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" include { phase: TEST } }
layer { name: "loss2" type: "EuclideanLoss" bottom: "z" bottom: "t" include { phase: TRAIN } }
)";

TEST(ParamArena, ATestNetSharesItsTrainNetsArenaThroughTheHandle) {
  NativeBackend backend;
  const NetParameter p = parse_net_parameter(kNet, "two.prototxt");
  Net train(p, TRAIN, backend, 1);
  Net test(p, TEST, backend, 2, train.arena_handle());
  EXPECT_EQ(&test.arena(), &train.arena());
  EXPECT_EQ(train.arena_handle().use_count(), 2);
  // The arena outlives the net that built it while another net holds it.
  std::shared_ptr<ParamArena> handle = train.arena_handle();
  EXPECT_EQ(handle->table().size(), 4u);  // ip and extra; the TEST net uses ip only
}

TEST(ParamArena, ATestNetWhoseParameterIsNotInTheArenaIsRefusedSayingTest) {
  NativeBackend backend;
  Net train(parse_net_parameter(kNet, "two.prototxt"), TRAIN, backend, 1);
  std::string other = kNet;
  other.replace(other.find("name: \"ip\""), 10, "name: \"ip9\"");
  const std::string message = error_of([&] {
    Net(parse_net_parameter(other, "two.prototxt"), TEST, backend, 2, train.arena_handle());
  });
  EXPECT_THAT(message, AllOf(HasSubstr("TEST net"), HasSubstr("'ip9/weight'"),
                             HasSubstr("does not exist in the TRAIN net")));
}

TEST(ParamArena, WeightsAndOptimizerStateGoThroughTheSameRecords) {
  NativeBackend backend;
  ParamArena arena(backend, {param("a/w", {2, 3}), param("a/b", {2})});
  arena.allocate_state(1);
  std::vector<float> values(arena.count(), 0.0f);
  for (int i = 0; i < 6; ++i) values[i] = float(i + 1);
  values[64] = -1;
  values[65] = -2;
  arena.from_host(values, arena.state(0));
  SnapshotFile file;
  file.kind = SnapshotKind::kSolverState;
  file.records = arena_records(arena, arena.state(0), "history/");
  ASSERT_EQ(file.records.size(), 2u);
  EXPECT_EQ(file.records[0].name, "history/a/w");
  EXPECT_EQ(file.records[0].shape, (Shape{2, 3}));
  EXPECT_EQ(arena_from_records(arena, file, "s", "history/", WeightsMatch::kExact), values);
  // A record of another shape names the layer and both shapes.
  file.records[1] = SnapshotRecord::of_floats("history/a/b", {3}, {1, 2, 3});
  EXPECT_THAT(error_of([&] {
                arena_from_records(arena, file, "s.solverstate", "history/", WeightsMatch::kExact);
              }),
              AllOf(HasSubstr("s.solverstate"), HasSubstr("the history of parameter 'a/b'"),
                    HasSubstr("(2) in the net"), HasSubstr("(3) in the file")));
}

}  // namespace
}  // namespace lamina
