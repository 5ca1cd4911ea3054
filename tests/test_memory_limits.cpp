// A net that cannot fit in host memory is refused with the figures, before anything is
// allocated, instead of meeting the OOM killer; a net that fits is unaffected. The available
// memory comes from /proc/meminfo and the cgroup limits (read here from made-up trees).
// The refusals do not depend on the machine's size: their tensors need far more than any
// machine has, or a multiple of what this one reports available.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lamina/host_memory.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using testing::error_of;

constexpr uint64_t kMiB = uint64_t{1} << 20, kGiB = uint64_t{1} << 30;

NativeBackend& native() {
  static NativeBackend backend;
  return backend;
}

// The file is this process's own: ctest runs the tests of this binary in parallel processes.
std::unique_ptr<Net> build(const std::string& text) {
  static const testing::TempDir dir;
  const std::string path = dir.write("memory.prototxt", text);
  return std::make_unique<Net>(parse_net_parameter(read_text_file(path), path), TRAIN, native(),
                               1, nullptr, path);
}

TEST(MemoryLimits, ReadableBytes) {
  EXPECT_EQ(readable_bytes(0), "0 bytes");
  EXPECT_EQ(readable_bytes(1023), "1023 bytes");
  EXPECT_EQ(readable_bytes(1024), "1.0 KiB");
  EXPECT_EQ(readable_bytes(64 * kMiB), "64.0 MiB");
  EXPECT_EQ(readable_bytes(uint64_t(37.3 * kGiB)), "37.3 GiB");
  EXPECT_EQ(readable_bytes(uint64_t{1} << 49), "512.0 TiB");
  EXPECT_EQ(readable_bytes(UINT64_MAX), "16.0 EiB");
}

// A made-up root with /proc and /sys/fs/cgroup files.
class FakeSystem {
 public:
  FakeSystem() {
    write("proc/meminfo", "MemTotal:       24684084 kB\nMemFree:        22989196 kB\n"
                          "MemAvailable:   20971520 kB\nBuffers:            7136 kB\n");
  }
  void write(const std::string& path, const std::string& text) { dir_.write(path, text); }
  std::string root() const { return dir_.path().string(); }

 private:
  testing::TempDir dir_;
};

// Small allocations are not checked one by one but together: the one that brings their sum
// to kHostMemoryCheckBytes is refused when the sum does not fit.
TEST(MemoryLimits, SmallAllocationsAreCheckedTogether) {
  FakeSystem scarce;  // 20 GiB available at first
  require_host_memory(kHostMemoryCheckBytes, "a checked allocation", scarce.root());  // resets
  scarce.write("proc/meminfo", "MemTotal: 24684084 kB\nMemAvailable: 512 kB\n");
  const uint64_t part = kHostMemoryCheckBytes * 6 / 10;
  require_host_memory(part, "tensor 'a'", scarce.root());  // not checked yet: no error
  EXPECT_THAT(error_of([&] { require_host_memory(part, "tensor 'b'", scarce.root()); }),
              AllOf(HasSubstr("could not allocate tensor 'b'"), HasSubstr("1.2 MiB"),
                    HasSubstr("512.0 KiB is available")));
  // A single allocation at the threshold is checked on its own.
  EXPECT_THAT(error_of([&] { require_host_memory(kHostMemoryCheckBytes, "c", scarce.root()); }),
              HasSubstr("it needs 1.0 MiB"));
}

TEST(MemoryLimits, AvailableIsMemAvailable) {
  FakeSystem system;
  EXPECT_EQ(available_host_memory(system.root()), 20 * kGiB);  // 20971520 kB
  // A cgroup without a limit changes nothing (v2 "max", v1 a number near 2^63).
  system.write("proc/self/cgroup", "0::/user.slice/session\n4:memory:/job\n");
  system.write("sys/fs/cgroup/user.slice/session/memory.max", "max\n");
  system.write("sys/fs/cgroup/user.slice/session/memory.current", "1000\n");
  system.write("sys/fs/cgroup/memory/job/memory.limit_in_bytes", "9223372036854771712\n");
  system.write("sys/fs/cgroup/memory/job/memory.usage_in_bytes", "1000\n");
  EXPECT_EQ(available_host_memory(system.root()), 20 * kGiB);
}

TEST(MemoryLimits, AvailableIsLoweredByACgroupLimit) {
  FakeSystem system;
  // v2: the room under the tightest limit of the cgroup and its ancestors, with inactive
  // file cache counted as room.
  system.write("proc/self/cgroup", "0::/a/b\n");
  system.write("sys/fs/cgroup/a/b/memory.max", std::to_string(8 * kGiB));
  system.write("sys/fs/cgroup/a/b/memory.current", std::to_string(3 * kGiB));
  system.write("sys/fs/cgroup/a/b/memory.stat", "anon 123\ninactive_file " +
                                                    std::to_string(1 * kGiB) + "\n");
  EXPECT_EQ(available_host_memory(system.root()), 6 * kGiB);
  system.write("sys/fs/cgroup/a/memory.max", std::to_string(5 * kGiB));
  system.write("sys/fs/cgroup/a/memory.current", std::to_string(4 * kGiB));
  EXPECT_EQ(available_host_memory(system.root()), 1 * kGiB);
  // Over its limit: nothing is available.
  system.write("sys/fs/cgroup/a/memory.current", std::to_string(6 * kGiB));
  EXPECT_EQ(available_host_memory(system.root()), 0u);
}

TEST(MemoryLimits, CgroupV1AndAContainerSeeingItsOwnCgroupAsTheRoot) {
  FakeSystem system;
  // The path names a cgroup the container does not see: its own is the mount's root.
  system.write("proc/self/cgroup", "5:cpu,cpuacct:/docker/abc\n4:blkio,memory:/docker/abc\n");
  system.write("sys/fs/cgroup/memory/memory.limit_in_bytes", std::to_string(2 * kGiB));
  system.write("sys/fs/cgroup/memory/memory.usage_in_bytes", std::to_string(kGiB + 512 * kMiB));
  system.write("sys/fs/cgroup/memory/memory.stat", "cache 1\ntotal_inactive_file " +
                                                       std::to_string(256 * kMiB) + "\n");
  EXPECT_EQ(available_host_memory(system.root()), 768 * kMiB);
}

TEST(MemoryLimits, UnknownWithoutMeminfo) {
  EXPECT_FALSE(available_host_memory(::testing::TempDir() + "no_such_root").has_value());
}

TEST(MemoryLimits, ThisMachineReportsItsMemory) {
  const auto available = available_host_memory();
  ASSERT_TRUE(available.has_value()) << "/proc/meminfo could not be read";
  EXPECT_GT(*available, 0u);
}

// Input's top alone needs 2^46 values: 512 TiB with its gradient.
TEST(MemoryLimits, HugeInputIsRefusedWithTheFigures) {
  const std::string message = error_of([] {
    build("name: 'huge'\n"
          "layer { name: 'data' type: 'Input' top: 'data'\n"
          "        input_param { shape { dim: 1048576 dim: 1048576 dim: 64 } } }\n");
  });
  EXPECT_THAT(message, MatchesRegex(".*memory.prototxt:2: layer 'data' \\(Input\\): could not "
                                    "allocate tensor 'data' \\(1048576, 1048576, 64\\) with its "
                                    "gradient: it needs 512.0 TiB of memory, but [0-9.]+ [KMGT]iB "
                                    "is available \\(.*\\); reduce the batch size.*"));
}

// Linear's top (64, 2^32 - 1) needs 2.0 TiB with its gradient.
TEST(MemoryLimits, HugeLinearIsRefusedNamingTheLayer) {
  const std::string message = error_of([] {
    build("layer { name: 'data' type: 'Input' top: 'data'\n"
          "        input_param { shape { dim: 64 dim: 10 } } }\n"
          "layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip'\n"
          "        inner_product_param { num_output: 4294967295 } }\n");
  });
  EXPECT_THAT(message, HasSubstr("memory.prototxt:3: layer 'ip' (InnerProduct): could not "
                                 "allocate tensor 'ip' (64, 4294967295) with its gradient: it "
                                 "needs 2.0 TiB of memory, "
                                 "but "));
}

// Weights of 2^19 x 2^19 (1 TiB) behind small blobs: the parameter arena is refused.
TEST(MemoryLimits, HugeParameterArenaIsRefused) {
  const std::string message = error_of([] {
    build("layer { name: 'data' type: 'Input' top: 'data'\n"
          "        input_param { shape { dim: 1 dim: 524288 } } }\n"
          "layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip'\n"
          "        inner_product_param { num_output: 524288 } }\n");
  });
  EXPECT_THAT(message, AllOf(HasSubstr("could not allocate the parameter arena ("),
                             HasSubstr("3.0 TiB of memory"), HasSubstr("'ip/weight' (524288, 524288)")));
}

// Each of data and gradient would fit in what is available, both together not: refused
// before either is allocated.
TEST(MemoryLimits, TensorNeedingMoreThanAvailableIsRefused) {
  const auto available = available_host_memory();
  ASSERT_TRUE(available.has_value());
  const int64_t count = int64_t(*available * 3 / 4 / sizeof(float));  // 1.5x with gradient
  const std::string message = error_of([&] {
    build("layer { name: 'data' type: 'Input' top: 'data'\n"
          "        input_param { shape { dim: " + std::to_string(count) + " } } }\n");
  });
  EXPECT_THAT(message, HasSubstr("layer 'data' (Input): could not allocate tensor 'data' (" +
                                 std::to_string(count) + ") with its gradient: it needs " +
                                 readable_bytes(uint64_t(count) * 8) + " of memory, but "));
}

// Tensors over the checked size (64 MiB) that fit: the net builds and runs.
TEST(MemoryLimits, NetThatFitsIsUnaffected) {
  const auto available = available_host_memory();
  ASSERT_TRUE(available.has_value());
  if (*available < 2 * kGiB) GTEST_SKIP() << "less than 2 GiB available";
  auto net = build("layer { name: 'data' type: 'Input' top: 'data'\n"
                   "        input_param { shape { dim: 16 dim: 1024 dim: 1024 } } }\n"
                   "layer { name: 'relu' type: 'ReLU' bottom: 'data' top: 'relu' }\n");
  std::vector<float> values(16 << 20, -1.0f);
  values[12345] = 2.0f;
  net->blob("data").copy_data_from_host(values);
  net->forward();
  const std::vector<float> out = net->blob("relu").copy_data_to_host();
  EXPECT_EQ(out[12345], 2.0f);
  EXPECT_EQ(out[0], 0.0f);
}

}  // namespace
}  // namespace lamina
