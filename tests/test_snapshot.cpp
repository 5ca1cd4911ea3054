// Snapshots, resuming and the failures a long run must survive (docs/snapshots.md):
//   - the file format: every record type round-trips; truncated, corrupted, foreign,
//     newer-version and wrong-kind files are refused with a message naming the file;
//   - weights: bit-exact save/load, missing and misshapen parameters, fine-tuning;
//   - exact resume: N iterations straight and N/2 + snapshot + restore into a new solver +
//     N/2 give bit-identical weights and the same loss at every iteration (a small net
//     reading shuffled IDX files through Dropout, with SGD, Adam and AdaDelta; the MNIST MLP
//     over 200 iterations; both again on the GPU when there is one);
//   - atomic writes: a writer SIGKILLed at random moments leaves the last complete file;
//     `lamina train` SIGKILLed while snapshotting every iteration leaves loadable snapshots;
//   - write failures: a missing or non-directory snapshot directory, a full disk (/dev/full,
//     RLIMIT_FSIZE), under snapshot_failure STOP and CONTINUE;
//   - non-finite values: a diverging solver and a layer that emits NaN (forward or backward)
//     are stopped with the iteration and the layer named, and no bad snapshot is written;
//   - signals, through the real tool: SIGHUP snapshots and goes on, SIGINT and SIGTERM
//     snapshot and exit 0, the effect flags, and resuming with --snapshot; `lamina test`;
//   - sizes: zero, negative and overflowing dimensions are errors, not allocations.
#include <gmock/gmock.h>
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "../examples/mnist/mnist_model.hpp"
#include "lamina/cuda.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/precision.hpp"
#include "lamina/registry.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/snapshot_lock.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// ---------------------------------------------------------------------------------------
// Fixtures: a temporary directory with tiny IDX files and a small net.

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}
void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

void write_idx(const std::string& path, uint32_t magic, const std::vector<uint32_t>& dims,
               const std::vector<uint8_t>& values) {
  std::string bytes;
  auto be32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(char((v >> s) & 0xff));
  };
  be32(magic);
  for (uint32_t d : dims) be32(d);
  bytes.append(values.begin(), values.end());
  write_bytes(path, bytes);
}

// 50 training and 20 test images of 6x6 pixels, labels 0..9, in dir.
void write_tiny_data(const TempDir& dir) {
  std::mt19937 rng(7);
  for (const auto& [name, count] : {std::pair<const char*, uint32_t>{"train", 50}, {"test", 20}}) {
    std::vector<uint8_t> pixels(count * 36), labels(count);
    for (auto& p : pixels) p = uint8_t(rng() % 256);
    for (auto& l : labels) l = uint8_t(rng() % 10);
    write_idx(dir / (std::string(name) + "-images"), 0x803, {count, 6, 6}, pixels);
    write_idx(dir / (std::string(name) + "-labels"), 0x801, {count}, labels);
  }
}

// Shuffled data (batch 8 of 50: the last 2 samples of every epoch are dropped), Dropout, and
// a TEST phase reading the test files in order. `extra` goes after fc1 (top "h") and must
// produce `act`, the blob relu, dropout and fc2 work on.
std::string tiny_net(const TempDir& dir, int hidden = 16, const std::string& extra = "",
                     const std::string& fc2_name = "fc2", const std::string& act = "h") {
  auto data = [&](const char* phase, const char* set, int batch, bool shuffle) {
    return std::string("layer { name: \"data\" type: \"MnistData\" top: \"data\" top: \"label\"") +
           " include { phase: " + phase + " } transform_param { scale: 0.00390625 }" +
           " mnist_data_param { images: \"" + (dir / (std::string(set) + "-images")) +
           "\" labels: \"" + (dir / (std::string(set) + "-labels")) + "\" batch_size: " +
           std::to_string(batch) + (shuffle ? " shuffle: true" : "") + " } }\n";
  };
  const std::string a = "\"" + act + "\"";
  return "name: \"tiny\"\n" + data("TRAIN", "train", 8, true) + data("TEST", "test", 5, false) +
         "layer { name: \"fc1\" type: \"Linear\" bottom: \"data\" top: \"h\" "
         "inner_product_param { num_output: " + std::to_string(hidden) + " } }\n" + extra +
         "layer { name: \"relu\" type: \"ReLU\" bottom: " + a + " top: " + a + " }\n"
         "layer { name: \"drop\" type: \"Dropout\" bottom: " + a + " top: " + a +
         " dropout_param { dropout_ratio: 0.3 } }\n"
         "layer { name: \"" + fc2_name + "\" type: \"Linear\" bottom: " + a + " top: \"scores\" "
         "inner_product_param { num_output: 10 } }\n"
         "layer { name: \"loss\" type: \"SoftmaxWithLoss\" bottom: \"scores\" bottom: \"label\" "
         "top: \"loss\" }\n"
         "layer { name: \"accuracy\" type: \"Accuracy\" bottom: \"scores\" bottom: \"label\" "
         "top: \"accuracy\" include { phase: TEST } }\n";
}

const char* kSgd = "base_lr: 0.1 momentum: 0.9 weight_decay: 0.001 lr_policy: \"step\" "
                   "gamma: 0.5 stepsize: 7 ";
const char* kAdam = "type: \"Adam\" base_lr: 0.01 momentum: 0.9 momentum2: 0.99 ";
const char* kAdaDelta = "type: \"AdaDelta\" base_lr: 1 momentum: 0.95 delta: 1e-6 "
                        "weight_decay: 0.001 ";

// The settings with seed, display, loss smoothing and testing; `more` overrides any of them.
SolverParameter solver_param(const std::string& settings, const std::string& more = "") {
  SolverParameter param = parse_solver_parameter(
      settings + " random_seed: 3 display: 1 average_loss: 3 test_iter: 3 test_interval: 10",
      "solver");
  param.MergeFrom(parse_solver_parameter(more, "solver overrides"));
  return param;
}

std::vector<float> arena_of(Net& net) {
  std::vector<float> host(net.arena().count());
  net.backend().copy_to_host(sizeof(float) * host.size(), net.arena().data(), host.data());
  return host;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// "" when the losses of `resumed` (iterations from..) equal those of `straight`, bit for bit.
std::string compare_losses(const std::vector<LossRecord>& straight,
                           const std::vector<LossRecord>& first,
                           const std::vector<LossRecord>& resumed) {
  std::vector<LossRecord> joined = first;
  joined.insert(joined.end(), resumed.begin(), resumed.end());
  if (joined.size() != straight.size())
    return "displayed " + std::to_string(joined.size()) + " losses, straight " +
           std::to_string(straight.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    if (joined[i].iteration != straight[i].iteration ||
        std::memcmp(&joined[i].loss, &straight[i].loss, sizeof(float)) != 0) {
      std::ostringstream out;
      out.precision(9);
      out << "iteration " << straight[i].iteration << ": straight " << straight[i].loss
          << ", interrupted and resumed " << joined[i].loss << " (iteration "
          << joined[i].iteration << ")";
      return out.str();
    }
  }
  return {};
}

// ---------------------------------------------------------------------------------------
// The container

std::vector<SnapshotRecord> sample_records() {
  return {SnapshotRecord::of_floats("fc/weight", {2, 3}, {1, -2, 3.5f, 0, 1e-30f, -1e30f}),
          SnapshotRecord::of_floats("scalar", {}, {42}),
          SnapshotRecord::of_floats("empty", {0, 4}, {}),
          SnapshotRecord::of_ints("ints", {0, -1, INT64_MAX, INT64_MIN}),
          SnapshotRecord::of_bytes("text", std::string("a\0b", 3))};
}

TEST(SnapshotFormat, EveryRecordTypeRoundTrips) {
  uint32_t crc = 0;
  const std::string bytes = encode_snapshot(SnapshotKind::kWeights, sample_records(), &crc);
  EXPECT_EQ(bytes.substr(0, 8), std::string("LAMINAW\0", 8));
  const SnapshotFile file = decode_snapshot(bytes, SnapshotKind::kWeights, "mem");
  EXPECT_EQ(file.checksum, crc);
  EXPECT_EQ(file.version, kSnapshotFormatVersion);
  const std::vector<SnapshotRecord> expected = sample_records();
  ASSERT_EQ(file.records.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(file.records[i].name, expected[i].name);
    EXPECT_EQ(file.records[i].type, expected[i].type);
    EXPECT_EQ(file.records[i].shape, expected[i].shape);
    EXPECT_TRUE(same_bits(file.records[i].floats, expected[i].floats)) << expected[i].name;
    EXPECT_EQ(file.records[i].ints, expected[i].ints);
    EXPECT_EQ(file.records[i].bytes, expected[i].bytes);
  }
  EXPECT_EQ(file.find("ints")->ints[2], INT64_MAX);
  EXPECT_EQ(file.find("absent"), nullptr);
  // The solver-state magic differs.
  EXPECT_EQ(encode_snapshot(SnapshotKind::kSolverState, {}).substr(0, 8),
            std::string("LAMINAS\0", 8));
}

struct Damage {
  const char* name;
  std::function<void(std::string&)> apply;
  std::vector<const char*> message_has;
};

void set_u32(std::string& bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = char((v >> (8 * i)) & 0xff);
}

class SnapshotDamage : public ::testing::TestWithParam<Damage> {};

// Each damaged file is refused with the file's path and what is wrong; never a crash or a
// quietly wrong value.
TEST_P(SnapshotDamage, IsRefusedNamingTheFileAndTheProblem) {
  TempDir dir;
  std::string bytes = encode_snapshot(SnapshotKind::kWeights, sample_records());
  GetParam().apply(bytes);
  const std::string path = dir / "damaged.lamina";
  write_bytes(path, bytes);
  const std::string message = error_of([&] { read_snapshot_file(path, SnapshotKind::kWeights); });
  EXPECT_THAT(message, HasSubstr("weights file '" + path + "'"));
  for (const char* part : GetParam().message_has) EXPECT_THAT(message, HasSubstr(part));
}

std::function<void(std::string&)> truncate_to(long size) {
  return [size](std::string& b) { b.resize(size < 0 ? b.size() + size : size_t(size)); };
}

INSTANTIATE_TEST_SUITE_P(
    Snapshot, SnapshotDamage,
    ::testing::Values(
        Damage{"Empty", truncate_to(0), {"empty"}},
        Damage{"TruncatedInMagic", truncate_to(5), {"truncated"}},
        Damage{"TruncatedInHeader", truncate_to(20), {"truncated"}},
        Damage{"TruncatedAfterHeader", truncate_to(27), {"truncated"}},
        Damage{"TruncatedInPayload", truncate_to(60), {"truncated", "header announces"}},
        Damage{"TruncatedChecksum", truncate_to(-2), {"truncated"}},
        Damage{"TrailingBytes", [](std::string& b) { b += "xyz"; }, {"unexpected bytes"}},
        Damage{"FlippedPayloadByte", [](std::string& b) { b[40] ^= 0x10; },
               {"checksum mismatch", "corrupt"}},
        Damage{"FlippedChecksum", [](std::string& b) { b[b.size() - 1] ^= 1; },
               {"checksum mismatch"}},
        Damage{"BadMagic", [](std::string& b) { b.replace(0, 8, "PK\x03\x04zip!"); },
               {"bad magic", "not a Lamina weights file"}},
        Damage{"ForeignText", [](std::string& b) { b = "name: \"caffemodel?\"\nlayer {}\n"; },
               {"bad magic"}},
        Damage{"SolverStateAsWeights",
               [](std::string& b) { b = encode_snapshot(SnapshotKind::kSolverState, {}); },
               {"solver state file, not a weights file", "resuming reads a .solverstate"}},
        Damage{"NewerVersion", [](std::string& b) { set_u32(b, 8, 2); },
               {"version 2 is newer than this Lamina reads (1)"}},
        Damage{"VersionZero", [](std::string& b) { set_u32(b, 8, 0); }, {"version 0"}},
        Damage{"UnknownFlags", [](std::string& b) { set_u32(b, 12, 4); }, {"flags"}}),
    [](const ::testing::TestParamInfo<Damage>& info) { return std::string(info.param.name); });

// With the checksum check off (as a fuzzer would run it), damaged records are still caught
// by the bounds checks.
TEST(SnapshotFormat, DamagedRecordsAreCaughtWithoutTheChecksum) {
  const std::string good = encode_snapshot(SnapshotKind::kWeights, sample_records());
  struct Case {
    size_t at;
    uint32_t value;
    const char* message;
  };
  // The first record starts at 24: name length (4), "fc/weight" (9), type, dims, reserved.
  for (const Case& c : {Case{24, 0, "name of 0 bytes"}, Case{24, 1u << 30, "name of"},
                        Case{37, 9, "unknown type 9"}, Case{38, 200, "dimensions"},
                        Case{41, 0x7fffffff, "needs"}}) {
    std::string bytes = good;
    if (c.at == 37 || c.at == 38)
      bytes[c.at] = char(c.value);
    else
      set_u32(bytes, c.at, c.value);
    EXPECT_THAT(error_of([&] { decode_snapshot(bytes, SnapshotKind::kWeights, "fuzz", false); }),
                AllOf(HasSubstr("fuzz"), HasSubstr(c.message)))
        << "byte " << c.at;
  }
  // A duplicated record name.
  std::vector<SnapshotRecord> twice = {SnapshotRecord::of_ints("a", {1}),
                                       SnapshotRecord::of_ints("a", {2})};
  EXPECT_THAT(error_of([&] {
                decode_snapshot(encode_snapshot(SnapshotKind::kWeights, twice),
                                SnapshotKind::kWeights, "dup");
              }),
              HasSubstr("appears twice"));
}

TEST(SnapshotFormat, MissingFileAndDirectoryAreNamed) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { read_snapshot_file(dir / "none.lamina", SnapshotKind::kWeights); }),
              AllOf(HasSubstr(dir / "none.lamina"), HasSubstr("No such file")));
  EXPECT_THAT(error_of([&] { read_snapshot_file(dir.path().string(), SnapshotKind::kSolverState); }),
              AllOf(HasSubstr("solver state file"), HasSubstr("is a directory")));
}

// ---------------------------------------------------------------------------------------
// Weights

TEST(Weights, SaveAndLoadAreBitExact) {
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  const NetParameter param = parse_net_parameter(tiny_net(dir), "tiny");
  Net a(param, TRAIN, backend, 1);
  Net b(param, TRAIN, backend, 2);  // another seed: other filler values
  ASSERT_FALSE(same_bits(arena_of(a), arena_of(b)));
  const uint32_t crc = save_weights(a, dir / "a.lamina");
  EXPECT_EQ(read_snapshot_file(dir / "a.lamina", SnapshotKind::kWeights).checksum, crc);
  const WeightsLoadReport report = load_weights(b, dir / "a.lamina", WeightsMatch::kExact);
  EXPECT_EQ(report.loaded.size(), 4u);
  EXPECT_TRUE(same_bits(arena_of(a), arena_of(b)));
  // A TEST net (own arena) scores the same weights.
  Net test(param, TEST, backend, 5);
  load_weights(test, dir / "a.lamina", WeightsMatch::kRequireAll);
  EXPECT_TRUE(same_bits(arena_of(a), arena_of(test)));
}

// A file lacking a parameter or holding it in another shape is refused, naming the layer,
// and the net keeps every value it had.
TEST(Weights, MissingOrMisshapenParametersChangeNothing) {
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  Net net(parse_net_parameter(tiny_net(dir), "tiny"), TRAIN, backend, 1);
  const std::vector<float> before = arena_of(net);

  std::vector<SnapshotRecord> records = arena_records(net.arena(), net.arena().data(), "");
  records.erase(records.begin() + 2);  // fc2/weight
  write_bytes(dir / "missing.lamina", encode_snapshot(SnapshotKind::kWeights, records));
  for (WeightsMatch match : {WeightsMatch::kExact, WeightsMatch::kRequireAll}) {
    EXPECT_THAT(error_of([&] { load_weights(net, dir / "missing.lamina", match); }),
                AllOf(HasSubstr(dir / "missing.lamina"), HasSubstr("missing parameter 'fc2/weight'"),
                      HasSubstr("layer 'fc2'")));
  }
  records = arena_records(net.arena(), net.arena().data(), "");
  records[0] = SnapshotRecord::of_floats("fc1/weight", {16, 35}, std::vector<float>(16 * 35, 1));
  write_bytes(dir / "misshapen.lamina", encode_snapshot(SnapshotKind::kWeights, records));
  EXPECT_THAT(error_of([&] { load_weights(net, dir / "misshapen.lamina", WeightsMatch::kFineTune); }),
              AllOf(HasSubstr("layer 'fc1'"), HasSubstr("(16, 36) in the net"),
                    HasSubstr("(16, 35) in the file"), HasSubstr("rename the layer")));
  // Resuming wants exactly this net's parameters, nothing more.
  records = arena_records(net.arena(), net.arena().data(), "");
  records.push_back(SnapshotRecord::of_floats("fc9/weight", {2}, {1, 2}));
  write_bytes(dir / "extra.lamina", encode_snapshot(SnapshotKind::kWeights, records));
  EXPECT_THAT(error_of([&] { load_weights(net, dir / "extra.lamina", WeightsMatch::kExact); }),
              AllOf(HasSubstr("'fc9/weight'"), HasSubstr("different net")));
  EXPECT_EQ(load_weights(net, dir / "extra.lamina", WeightsMatch::kRequireAll).ignored,
            std::vector<std::string>{"fc9/weight"});
  EXPECT_TRUE(same_bits(arena_of(net), before));
}

// A run fine-tuned from PREFIX_iter_N.lamina, with the same prefix, would overwrite that
// file at iteration N: refused before training, naming it, whether N comes from `snapshot`
// or is the final iteration. Another prefix trains, and a file it will not reach is fine.
TEST(Weights, FineTuningNeverOverwritesTheFileItStartedFrom) {
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  const NetParameter net = parse_net_parameter(tiny_net(dir), "tiny");
  const std::string prefix = dir / "run";
  Solver first(solver_param(kSgd, "max_iter: 4 snapshot: 2 snapshot_prefix: \"" + prefix + "\""),
               net, backend);
  first.solve();
  const std::string source = prefix + "_iter_4.lamina";
  for (const char* settings : {"max_iter: 6 snapshot: 2", "max_iter: 4 snapshot: 0"}) {
    Solver again(solver_param(kSgd, std::string(settings) + " snapshot_prefix: \"" + prefix + "\""),
                 net, backend);
    load_weights(again.net(), source, WeightsMatch::kFineTune);
    again.protect_file(source);
    const auto before = fs::last_write_time(source);
    EXPECT_THAT(error_of([&] { again.solve(); }),
                AllOf(HasSubstr("iteration 4"), HasSubstr(source),
                      HasSubstr("training did not start"))) << settings;
    EXPECT_EQ(again.iter(), 0);
    EXPECT_EQ(fs::last_write_time(source), before);
  }
  Solver elsewhere(solver_param(kSgd, "max_iter: 4 snapshot: 2 snapshot_prefix: \"" +
                                          (dir / "tuned") + "\""),
                   net, backend);
  elsewhere.protect_file(source);
  elsewhere.solve();
  EXPECT_EQ(elsewhere.iter(), 4);
  // snapshot() itself refuses to write over a protected file.
  Solver direct(solver_param(kSgd, "max_iter: 4 snapshot_prefix: \"" + prefix + "\""), net, backend);
  direct.protect_file(prefix + "_iter_0.solverstate");
  EXPECT_THAT(error_of([&] { direct.snapshot(); }),
              AllOf(HasSubstr("would overwrite"), HasSubstr(prefix + "_iter_0.solverstate")));
}

// Two runs cannot write the same snapshot prefix at once: the second refuses before
// training, naming the prefix and the process that holds it; once the first ends, it may.
TEST(SnapshotLock, ASecondRunOnTheSamePrefixRefusesNamingTheFirst) {
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  const NetParameter net = parse_net_parameter(tiny_net(dir), "tiny");
  const std::string prefix = dir / "shared";
  {
    SnapshotPrefixLock first(prefix);  // another run, as far as the solver can tell
    Solver second(solver_param(kSgd, "max_iter: 2 snapshot_prefix: \"" + prefix + "\""), net,
                  backend);
    EXPECT_THAT(error_of([&] { second.solve(); }),
                AllOf(HasSubstr(prefix), HasSubstr(std::to_string(::getpid())),
                      HasSubstr("training did not start")));
    EXPECT_EQ(second.iter(), 0);
    EXPECT_FALSE(fs::exists(prefix + "_iter_2.solverstate"));
  }
  Solver later(solver_param(kSgd, "max_iter: 2 snapshot_prefix: \"" + prefix + "\""), net,
               backend);
  later.solve();
  EXPECT_TRUE(fs::exists(prefix + "_iter_2.solverstate"));
  SnapshotPrefixLock after(prefix);  // released when solve() returned
}

// Collects glog warnings while it lives.
class WarningSink : public google::LogSink {
 public:
  WarningSink() { google::AddLogSink(this); }
  ~WarningSink() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t length) override {
    if (severity == google::GLOG_WARNING) text += std::string(message, length) + "\n";
  }
  std::string text;
};

// Snapshots every iteration of a small net write far more than 100 MB per second of
// training: warned about once, with the figures and the interval that would do.
TEST(SnapshotRate, WritingFasterThan100MBPerSecondIsWarnedAbout) {
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  // 16 MB a snapshot (a 2M-value Parameter and its momentum) for an iteration of a few
  // milliseconds (the update's pass over those values): several GB/s, so still far above
  // 100 MB/s when a loaded machine slows an iteration tenfold (the parameters of a wide
  // Linear layer would slow it as much as they enlarge the snapshot).
  const NetParameter net = parse_net_parameter(
      tiny_net(dir, 16, "layer { name: \"big\" type: \"Parameter\" top: \"big\" "
                        "parameter_param { shape { dim: 2000000 } } }\n"
                        "layer { name: \"quiet\" type: \"Silence\" bottom: \"big\" }\n"),
      "tiny");
  {
    WarningSink sink;
    Solver solver(solver_param(kSgd, "display: 0 max_iter: 6 snapshot: 1 snapshot_prefix: \"" +
                                         (dir / "fast") + "\""),
                  net, backend);
    solver.solve();
    EXPECT_THAT(sink.text, AllOf(HasSubstr("snapshot: 1 writes"), HasSubstr("MB/s"),
                                 HasSubstr("raise snapshot to at least")));
    EXPECT_EQ(sink.text.find("snapshot: 1 writes"), sink.text.rfind("snapshot: 1 writes"));
  }
  WarningSink quiet;
  Solver solver(solver_param(kSgd, "display: 0 max_iter: 6 snapshot: 100000 snapshot_prefix: \"" +
                                       (dir / "slow") + "\""),
                net, backend);
  solver.solve();
  EXPECT_THAT(quiet.text, Not(HasSubstr("MB/s")));
}

// Fine-tuning: a renamed output layer keeps its filler and is reported; the rest loads.
TEST(Weights, FineTuningKeepsTheFillersOfNewLayers) {
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  Net trained(parse_net_parameter(tiny_net(dir), "tiny"), TRAIN, backend, 1);
  save_weights(trained, dir / "trained.lamina");
  Net fresh(parse_net_parameter(tiny_net(dir, 16, "", "fc_new"), "tiny"), TRAIN, backend, 9);
  const std::vector<float> filled = arena_of(fresh);
  const WeightsLoadReport report = load_weights(fresh, dir / "trained.lamina", WeightsMatch::kFineTune);
  EXPECT_EQ(report.loaded, (std::vector<std::string>{"fc1/weight", "fc1/bias"}));
  EXPECT_EQ(report.kept_filler, (std::vector<std::string>{"fc_new/weight", "fc_new/bias"}));
  EXPECT_EQ(report.ignored, (std::vector<std::string>{"fc2/weight", "fc2/bias"}));
  const std::vector<float> now = arena_of(fresh), source = arena_of(trained);
  for (const ParamInfo& info : fresh.arena().table()) {
    const std::vector<float>& expected = info.layer == "fc1" ? source : filled;
    EXPECT_EQ(0, std::memcmp(now.data() + info.offset, expected.data() + info.offset,
                             sizeof(float) * info.count))
        << info.name;
  }
}

// ---------------------------------------------------------------------------------------
// Exact resume

struct ResumeResult {
  std::vector<float> weights;
  std::string weights_file;  // bytes of the final weights snapshot
  std::vector<LossRecord> losses;
  std::vector<std::pair<int, TestResult>> tests;
  bool replayed = false;  // the last solver recorded its step (and replayed it)
};

// total iterations straight, or total/2 + snapshot + restore into a new solver + the rest.
// `more` overrides the solver settings.
ResumeResult train_tiny(Backend& backend, const TempDir& dir, const std::string& settings,
                        int total, bool interrupt, const std::string& tag,
                        const std::string& more = "") {
  const NetParameter net = parse_net_parameter(tiny_net(dir), "tiny");
  SolverParameter param =
      solver_param(settings, "snapshot_prefix: \"" + (dir / tag) + "\" " + more);
  ResumeResult r;
  auto first = std::make_unique<Solver>(param, net, backend);
  if (interrupt) {
    first->step(total / 2);
    const SnapshotPaths paths = first->snapshot();
    r.losses = first->loss_history();
    r.tests = first->test_history();
    first.reset();
    param.set_random_seed(99);  // the snapshot's seed and layer states must win
    first = std::make_unique<Solver>(param, net, backend);
    first->restore(paths.state);
    EXPECT_EQ(first->iter(), total / 2);
    EXPECT_EQ(first->seed(), 3u);
    first->step(total - total / 2);
  } else {
    first->step(total);
  }
  const std::vector<LossRecord>& h = first->loss_history();
  r.losses.insert(r.losses.end(), h.begin(), h.end());
  r.tests.insert(r.tests.end(), first->test_history().begin(), first->test_history().end());
  r.replayed = first->step_operations() > 0;
  r.weights = arena_of(first->net());
  r.weights_file = read_bytes(first->snapshot().weights);
  return r;
}

void expect_same_results(const ResumeResult& straight, const ResumeResult& resumed) {
  EXPECT_EQ(compare_losses(straight.losses, {}, resumed.losses), "");
  EXPECT_TRUE(same_bits(straight.weights, resumed.weights)) << "the weights differ";
  EXPECT_EQ(straight.weights_file, resumed.weights_file) << "the weights files differ";
  ASSERT_EQ(straight.tests.size(), resumed.tests.size());
  for (size_t i = 0; i < straight.tests.size(); ++i) {
    EXPECT_EQ(straight.tests[i].first, resumed.tests[i].first);
    EXPECT_EQ(straight.tests[i].second.value("accuracy"), resumed.tests[i].second.value("accuracy"));
    EXPECT_EQ(straight.tests[i].second.value("loss"), resumed.tests[i].second.value("loss"));
  }
}

void expect_exact_resume(Backend& backend, const char* settings, int total,
                         const std::string& more = "") {
  TempDir dir;
  write_tiny_data(dir);
  expect_same_results(train_tiny(backend, dir, settings, total, false, "straight", more),
                      train_tiny(backend, dir, settings, total, true, "resumed", more));
}

// 46 iterations of 8 of 50 samples: 7 shuffled epochs, resumed in the middle of one; the
// learning rate steps every 7 iterations; dropout draws new masks every iteration.
TEST(ExactResume, TinyNetWithShuffleAndDropoutSgdCpu) {
  NativeBackend backend;
  expect_exact_resume(backend, kSgd, 46);
}

TEST(ExactResume, TinyNetWithShuffleAndDropoutAdamCpu) {
  NativeBackend backend;
  expect_exact_resume(backend, kAdam, 46);
}

// AdaDelta's two averages (history and history2) are both in the state.
TEST(ExactResume, TinyNetWithShuffleAndDropoutAdaDeltaCpu) {
  NativeBackend backend;
  expect_exact_resume(backend, kAdaDelta, 46);
}

TEST(ExactResume, TinyNetWithShuffleAndDropoutSgdCuda) {
  LAMINA_CUDA_BACKEND_OR_SKIP(backend);
  expect_exact_resume(*backend, kSgd, 46);
}

TEST(ExactResume, TinyNetWithShuffleAndDropoutAdamCuda) {
  LAMINA_CUDA_BACKEND_OR_SKIP(backend);
  expect_exact_resume(*backend, kAdam, 46);
}

TEST(ExactResume, TinyNetWithShuffleAndDropoutAdaDeltaCuda) {
  LAMINA_CUDA_BACKEND_OR_SKIP(backend);
  expect_exact_resume(*backend, kAdaDelta, 46);
}

// Replayed steps (CUDA graphs): display every 5th iteration, so the others replay; 4 passes
// per iteration over 6 batches per epoch, so epochs begin inside replayed steps.
const char* kReplayed = "display: 5 iter_size: 4";

TEST(ExactResume, TinyNetReplayedStepsCuda) {
  LAMINA_CUDA_BACKEND_OR_SKIP(backend);
  expect_exact_resume(*backend, kSgd, 46, kReplayed);
}

// The same run with every operation launched directly gives the same bits.
TEST(CudaGraphs, TinyNetReplayedEqualsDirect) {
  LAMINA_CUDA_BACKEND_OR_SKIP(backend);
  for (const char* settings : {kSgd, kAdam}) {
    TempDir dir;
    write_tiny_data(dir);
    const ResumeResult direct = train_tiny(*backend, dir, settings, 46, false, "direct",
                                           std::string(kReplayed) + " cuda_graph: false");
    const ResumeResult replayed = train_tiny(*backend, dir, settings, 46, false, "replayed",
                                             kReplayed);
    EXPECT_FALSE(direct.replayed);
    EXPECT_TRUE(replayed.replayed) << "the step was never recorded: nothing was compared";
    expect_same_results(direct, replayed);
  }
}

// The MNIST model `model` ("mlp", "lenet") reading testing::mnist_dir(); none when MNIST is
// not there.
std::optional<mnist::Model> mnist_model(const std::string& model) {
  mnist::ModelOptions options;
  options.data_dir = testing::mnist_dir();
  if (!fs::exists(options.data_dir + "/train-images-idx3-ubyte") &&
      !fs::exists(options.data_dir + "/train-images-idx3-ubyte.gz"))
    return std::nullopt;
  return mnist::load_model(model, options);
}

// The criterion: 200 iterations of the MNIST MLP and LeNet, replayed as CUDA graphs
// and launched directly, give bit-identical weights and the same displayed losses and tests.
// clip: gradient clipping (its norm makes advance_step wait for the backward pass; without
// it advance_step runs beside the backward pass, on the side lane). In FP16 the loss scale
// starts at 2^30 and doubles after 10 finite iterations: iterations are skipped and the
// scale grows inside the replayed step, and both runs must agree on every one.
void expect_replayed_equals_direct(const std::string& model, float clip,
                                   Precision precision = FP32) {
  LAMINA_CUDA_BACKEND_OR_SKIP(backend);
  std::optional<mnist::Model> loaded = mnist_model(model);
  if (!loaded)
    GTEST_SKIP() << "MNIST is not in " << testing::mnist_dir() << " (scripts/fetch_mnist.sh)";
  mnist::Model& m = *loaded;
  m.solver.set_display(50);
  m.solver.set_test_interval(100);
  m.solver.clear_test_iter();
  m.solver.add_test_iter(20);
  m.solver.set_clip_gradients(clip);
  if (precision == FP16) {
    m.solver.set_precision(FP16);
    m.solver.set_loss_scale(std::ldexp(1.0f, 30));
    m.solver.set_loss_scale_growth_interval(10);
  }
  Solver::LossScaleState scales[2];
  std::vector<float> weights[2], blob_reads[2];
  std::vector<LossRecord> losses[2];
  std::vector<std::pair<int, TestResult>> tests[2];
  for (int replay = 0; replay < 2; ++replay) {
    m.solver.set_cuda_graph(replay == 1);
    Solver solver(m.solver, m.net, *backend, m.net_path);
    // A blob read on the host between steps: replays must not leave its host copy stale.
    for (int half = 0; half < 2; ++half) {
      solver.step(100);
      blob_reads[replay].push_back(solver.net().blob("loss").copy_data_to_host()[0]);
    }
    solver.test();
    EXPECT_EQ(solver.replays_steps(), replay == 1);
    EXPECT_EQ(solver.step_operations() > 0, replay == 1);
    weights[replay] = arena_of(solver.net());
    if (solver.scales_loss()) scales[replay] = solver.loss_scale_state();
    losses[replay] = solver.loss_history();
    tests[replay] = solver.test_history();
    if (replay) {
      std::printf("%s on %s: the recorded step has %lld operations\n", model.c_str(),
                  backend->name().c_str(), static_cast<long long>(solver.step_operations()));
    }
  }
  EXPECT_TRUE(same_bits(weights[0], weights[1])) << "the weights after 200 iterations differ";
  if (precision == FP16) {
    EXPECT_EQ(scales[0].scale, scales[1].scale);
    EXPECT_EQ(scales[0].skipped, scales[1].skipped);
    // Each skip halved the scale once and each growth doubled it: growths = skips - halvings
    // net of 2^30.
    const int64_t growths = scales[1].skipped - int64_t(30 - std::log2(scales[1].scale));
    std::printf("FP16: %lld iterations skipped, %lld growths, scale %g\n",
                static_cast<long long>(scales[1].skipped), static_cast<long long>(growths),
                scales[1].scale);
    EXPECT_GE(scales[1].skipped, 3);
    EXPECT_GE(growths, 1);
  }
  EXPECT_TRUE(same_bits(blob_reads[0], blob_reads[1])) << "the loss blob read at 100 and 200";
  EXPECT_EQ(compare_losses(losses[0], {}, losses[1]), "");
  ASSERT_EQ(tests[0].size(), tests[1].size());
  for (size_t i = 0; i < tests[0].size(); ++i) {
    for (size_t k = 0; k < tests[0][i].second.outputs.size(); ++k) {
      EXPECT_EQ(tests[0][i].second.outputs[k], tests[1][i].second.outputs[k])
          << "test at iteration " << tests[0][i].first;
    }
  }
}

TEST(CudaGraphs, MnistMlp200IterationsReplayedEqualsDirect) {
  expect_replayed_equals_direct("mlp", 0);
}

TEST(CudaGraphs, MnistLenet200IterationsReplayedEqualsDirect) {
  expect_replayed_equals_direct("lenet", 10);
}

TEST(CudaGraphs, MnistMlpInFp16WithSkipsAndGrowthReplayedEqualsDirect) {
  expect_replayed_equals_direct("mlp", 0, FP16);
}

// A device's convolution choices with the forward algorithm of every line that starts with
// `word` ("conv" for FP32, "conv-tf32") swapped (0 <-> 1, both implicit GEMMs that cuDNN runs
// for any geometry; a TF32 line's then in default math; a graph API plan to 0): as another
// process's timing might have chosen. Lines of the other precision are left alone (the
// device's plans are shared by the process's tests).
std::string other_forward_algorithms(const std::string& choices, const std::string& word) {
  std::istringstream in(choices);
  std::string line, out;
  while (std::getline(in, line)) {
    const size_t equals = line.find(" = ");
    if (line.rfind(word + " ", 0) == 0 && equals != std::string::npos) {
      std::istringstream algos(line.substr(equals + 3));
      std::string forward, data, filter;  // "7", "7t" for tensor-op math, "g2" graph API
      algos >> forward >> data >> filter;
      const bool zero = forward[0] != 'g' && std::stoi(forward) == 0;
      line = line.substr(0, equals + 3) + (zero ? "1" : "0") + " " + data + " " + filter;
    }
    out += line + "\n";
  }
  return out;
}

// The same for the cuBLASLt products' lines ("gemm <11 key fields> = <candidate> <list>",
// lt_matmul.cu) of one precision (the key's math: 0 FP32, 1 TF32; its A and B type: 0 FP32,
// 14 BF16, 2 FP16): candidate 0 <-> 1, others to 0. A candidate the product lacks makes it
// time its candidates again.
// The "gemm ..." lines of a device's choices.
std::string gemm_lines(const std::string& choices) {
  std::istringstream in(choices);
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind("gemm ", 0) == 0) out += line + "\n";
  return out;
}

std::string other_gemm_algorithms(const std::string& choices, Precision precision) {
  const std::string math = precision == TF32 ? "1" : "0";
  const std::string ab = precision == BF16 ? "14" : precision == FP16 ? "2" : "0";
  std::istringstream in(choices);
  std::string line, out;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::vector<std::string> w{std::istream_iterator<std::string>(words), {}};
    if (w.size() == 15 && w[0] == "gemm" && w[8] == math && w[9] == ab && w[12] == "=") {
      w[13] = w[13] == "0" ? "1" : "0";
      line.clear();
      for (const std::string& word : w) line += (line.empty() ? "" : " ") + word;
    }
    out += line + "\n";
  }
  return out;
}

// The criterion: an MNIST net, 200 iterations straight against 100 + snapshot +
// resume + 100: bit-identical weights and the same loss at every iteration. With
// other_process, the device's algorithm choices are changed between the snapshot and the
// resume, as a new process's timing may choose: the solver state's choices must win.
void expect_exact_resume(const std::string& model, Backend& backend, bool other_process,
                         Precision precision = FP32) {
  std::optional<mnist::Model> loaded = mnist_model(model);
  if (!loaded)
    GTEST_SKIP() << "MNIST is not in " << testing::mnist_dir() << " (scripts/fetch_mnist.sh)";
  mnist::Model& m = *loaded;
  m.solver.set_precision(precision);
  TempDir dir;
  m.solver.set_display(1);
  m.solver.set_average_loss(1);
  m.solver.set_snapshot_prefix(dir / model);

  Solver straight(m.solver, m.net, backend, m.net_path);
  straight.step(200);
  std::vector<LossRecord> first_half;
  std::string state;
  {
    Solver first(m.solver, m.net, backend, m.net_path);
    first.step(100);
    first_half = first.loss_history();
    state = first.snapshot().state;
  }
  const std::string chosen = backend.algorithm_choices();
  if (other_process) {
    const SnapshotFile file = read_snapshot_file(state, SnapshotKind::kSolverState);
    const SnapshotRecord* kept = file.find("algorithms");
    ASSERT_NE(kept, nullptr) << "the solver state keeps no algorithm choices";
    EXPECT_EQ(kept->bytes, chosen);
    const std::string word = precision == TF32   ? "conv-tf32"
                             : precision == BF16 ? "conv-bf16"
                             : precision == FP16 ? "conv-fp16"
                                                 : "conv";
    EXPECT_THAT(chosen, HasSubstr("\n" + word + " "));
    EXPECT_THAT(chosen, HasSubstr("\ngemm "));
    backend.reuse_algorithm_choices(
        other_gemm_algorithms(other_forward_algorithms(chosen, word), precision));
    ASSERT_NE(backend.algorithm_choices(), chosen) << "the choices did not change";
    EXPECT_NE(gemm_lines(backend.algorithm_choices()), gemm_lines(chosen))
        << "the cuBLASLt choices did not change";
  }
  Solver resumed(m.solver, m.net, backend, m.net_path);
  resumed.restore(state);
  resumed.step(100);
  EXPECT_EQ(backend.algorithm_choices(), chosen) << "the resumed run chose other algorithms";
  EXPECT_EQ(compare_losses(straight.loss_history(), first_half, resumed.loss_history()), "");
  const std::vector<float> a = arena_of(straight.net()), b = arena_of(resumed.net());
  EXPECT_TRUE(same_bits(a, b)) << "the weights after 200 iterations differ";
  std::printf("MNIST %s on %s in %s: 200 iterations straight vs 100 + snapshot + resume + "
              "100%s: weights %s, losses %s (last %.7f)\n",
              model.c_str(), backend.name().c_str(), Precision_Name(precision).c_str(),
              other_process ? " (other algorithms chosen in between)" : "",
              same_bits(a, b) ? "bit-identical" : "DIFFER",
              compare_losses(straight.loss_history(), first_half, resumed.loss_history()).empty()
                  ? "identical at all 200 iterations"
                  : "DIFFER",
              straight.loss_history().back().loss);
}

void expect_mlp_exact_resume(Backend& backend) { expect_exact_resume("mlp", backend, false); }

TEST(ExactResume, MnistLenetCudaTakesTheAlgorithmsOfTheSolverState) {
  LAMINA_CUDA_BACKEND_OR_SKIP(backend);
  if (!cudnn_compiled()) GTEST_SKIP() << "built without cuDNN: nothing is chosen by timing";
  expect_exact_resume("lenet", *backend, true);
}

// TF32 resumes exactly too: on the GPU the TF32 convolutions' choices ("conv-tf32" lines)
// are kept and taken back like FP32's.
TEST(ExactResume, MnistLenetInTf32CudaTakesTheAlgorithmsOfTheSolverState) {
  LAMINA_CUDA_BACKEND_OR_SKIP(backend);
  if (!cudnn_compiled()) GTEST_SKIP() << "built without cuDNN: nothing is chosen by timing";
  if (!backend->supports_math(Math::kTF32)) GTEST_SKIP() << "this GPU has no TF32";
  expect_exact_resume("lenet", *backend, true, TF32);
}

// So do 16-bit convolutions ("conv-bf16", "conv-fp16" lines), with FP16's loss scale and
// its counters in the state.
TEST(ExactResume, MnistLenetIn16BitsCudaTakesTheAlgorithmsOfTheSolverState) {
  LAMINA_CUDA_BACKEND_OR_SKIP(backend);
  if (!cudnn_compiled()) GTEST_SKIP() << "built without cuDNN: nothing is chosen by timing";
  for (Precision precision : testing::half_precisions(*backend)) {
    SCOPED_TRACE(Precision_Name(precision));
    expect_exact_resume("lenet", *backend, true, precision);
  }
}

TEST(ExactResume, MnistMlpInTf32Cpu) {
  NativeBackend backend;
  expect_exact_resume("mlp", backend, false, TF32);
}

TEST(ExactResume, MnistMlp200IterationsCpu) {
  NativeBackend backend;
  expect_mlp_exact_resume(backend);
}

TEST(ExactResume, MnistMlp200IterationsCuda) {
  LAMINA_CUDA_BACKEND_OR_SKIP(backend);
  expect_mlp_exact_resume(*backend);
}

// ---------------------------------------------------------------------------------------
// Solver states that do not fit

TEST(SolverState, FromADifferentNetSolverOrWeightsIsRefusedAndChangesNothing) {
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  const NetParameter net = parse_net_parameter(tiny_net(dir), "tiny");
  Solver trained(solver_param(kSgd, "snapshot_prefix: \"" + (dir / "a") + "\""), net, backend);
  trained.step(5);
  const SnapshotPaths paths = trained.snapshot();

  Solver other(solver_param(kSgd), parse_net_parameter(tiny_net(dir, 17), "tiny"), backend);
  const std::vector<float> before = arena_of(other.net());
  EXPECT_THAT(error_of([&] { other.restore(paths.state); }),
              AllOf(HasSubstr(paths.state), HasSubstr("layer 'fc1'"), HasSubstr("different net")));
  EXPECT_EQ(other.iter(), 0);
  EXPECT_TRUE(same_bits(arena_of(other.net()), before));

  Solver adam(solver_param(kAdam), net, backend);
  EXPECT_THAT(error_of([&] { adam.restore(paths.state); }),
              AllOf(HasSubstr("written by a SGD solver"), HasSubstr("this solver is Adam")));

  Solver averaged(solver_param(kSgd, "average_loss: 5"), net, backend);
  EXPECT_THAT(error_of([&] { averaged.restore(paths.state); }), HasSubstr("average_loss"));

  // The weights file beside it replaced by another: its checksum no longer matches.
  trained.step(1);
  const SnapshotPaths later = trained.snapshot();
  fs::copy_file(later.weights, paths.weights, fs::copy_options::overwrite_existing);
  Solver same(solver_param(kSgd), net, backend);
  EXPECT_THAT(error_of([&] { same.restore(paths.state); }),
              AllOf(HasSubstr("checksum"), HasSubstr(paths.weights), HasSubstr("replaced")));
  fs::remove(paths.weights);
  EXPECT_THAT(error_of([&] { same.restore(paths.state); }),
              AllOf(HasSubstr(paths.weights), HasSubstr("No such file")));
  // Weights given where a state is expected.
  EXPECT_THAT(error_of([&] { same.restore(later.weights); }),
              HasSubstr("weights file, not a solver state file"));
  EXPECT_EQ(same.iter(), 0);
}

// A solver written with Caffe's older `solver_type: ADADELTA` records the rule's name, so a
// `type: "AdaDelta"` solver resumes its state (history and history2, one record each per
// parameter), and an Adam solver, which also keeps two arrays, refuses it.
TEST(SolverState, AdaDeltaStateHoldsBothAveragesAndNamesTheRule) {
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  const NetParameter net = parse_net_parameter(tiny_net(dir), "tiny");
  Solver enum_form(solver_param("solver_type: ADADELTA base_lr: 1 momentum: 0.95 delta: 1e-6",
                                "snapshot_prefix: \"" + (dir / "a") + "\""),
                   net, backend);
  enum_form.step(4);
  const SnapshotPaths paths = enum_form.snapshot();
  const SnapshotFile state = read_snapshot_file(paths.state, SnapshotKind::kSolverState);
  ASSERT_NE(state.find("solver_type"), nullptr);
  EXPECT_EQ(state.find("solver_type")->bytes, "AdaDelta");
  int histories = 0, histories2 = 0;
  for (const SnapshotRecord& r : state.records) {
    histories += r.name.rfind("history/", 0) == 0;
    histories2 += r.name.rfind("history2/", 0) == 0;
    if (r.name.rfind("history", 0) == 0) {
      bool nonzero = false;
      for (float v : r.floats) nonzero |= v != 0;
      EXPECT_TRUE(nonzero) << r.name << " is all zeros after 4 updates";
    }
  }
  EXPECT_EQ(histories, int(enum_form.net().arena().table().size()));
  EXPECT_EQ(histories2, histories);

  Solver named(solver_param(kAdaDelta), net, backend);
  named.restore(paths.state);
  EXPECT_EQ(named.iter(), 4);
  Solver adam(solver_param(kAdam), net, backend);
  EXPECT_THAT(error_of([&] { adam.restore(paths.state); }),
              AllOf(HasSubstr("written by a AdaDelta solver"), HasSubstr("this solver is Adam")));
}

// A layer state out of range (a data set that shrank) is refused and rolled back.
TEST(SolverState, ImpossibleLayerStateIsRefused) {
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  Net net(parse_net_parameter(tiny_net(dir), "tiny"), TRAIN, backend, 1);
  Net::LayerStates states = net.layer_states();
  ASSERT_EQ(states.size(), 2u);  // data (seed, epoch, cursor, samples), drop (seed, offset)
  ASSERT_EQ(states.at("data").size(), 4u);
  ASSERT_EQ(states.at("drop").size(), 2u);
  Net::LayerStates bad = states;
  bad["data"][3] = 60000;
  bad["drop"][1] = 12345;
  EXPECT_THAT(error_of([&] { net.set_layer_states(bad, "state.solverstate"); }),
              AllOf(HasSubstr("state.solverstate"), HasSubstr("layer 'data'"), HasSubstr("60000")));
  EXPECT_EQ(net.layer_states(), states);
  bad = states;
  bad.erase("drop");
  EXPECT_THAT(error_of([&] { net.set_layer_states(bad, "s"); }), HasSubstr("no state for layer 'drop'"));
}

// ---------------------------------------------------------------------------------------
// Atomic writes under SIGKILL

// A child rewrites one file over and over, alternating two large versions; it is killed
// at random moments, and each time the file must be one of the two, complete.
TEST(AtomicWrite, AWriterKilledAtRandomMomentsLeavesACompleteFile) {
  TempDir dir;
  const std::string path = dir / "w.lamina";
  std::string versions[2];
  for (int v = 0; v < 2; ++v) {
    std::vector<float> values(1 << 20);  // 4 MiB: a write takes a few milliseconds
    for (size_t i = 0; i < values.size(); ++i) values[i] = float(v * 1000003 + i);
    versions[v] = encode_snapshot(SnapshotKind::kWeights,
                                  {SnapshotRecord::of_ints("version", {v}),
                                   SnapshotRecord::of_floats("data", {1 << 20}, values)});
  }
  write_file_atomically(path, versions[0]);
  std::mt19937 rng(2024);
  int mid_write = 0;
  for (int kill = 0; kill < 20; ++kill) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (int i = 1;; ++i) {
        try {
          write_file_atomically(path, versions[i % 2]);
        } catch (...) {
          _exit(3);
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited on its own: " << status;
    const std::string tmp = path + ".tmp-" + std::to_string(child);
    if (fs::exists(tmp)) {
      ++mid_write;
      fs::remove(tmp);
    }
    const std::string bytes = read_bytes(path);
    EXPECT_TRUE(bytes == versions[0] || bytes == versions[1])
        << "after kill " << kill << " the file is neither complete version (" << bytes.size()
        << " bytes)";
    EXPECT_NO_THROW(read_snapshot_file(path, SnapshotKind::kWeights));
  }
  std::printf("20 kills, %d of them in the middle of a write\n", mid_write);
}

// ---------------------------------------------------------------------------------------
// Write failures

TEST(SnapshotFailure, AFullDiskIsAnErrorNamingThePath) {
  const int fd = ::open("/dev/full", O_WRONLY);
  if (fd < 0) GTEST_SKIP() << "no /dev/full";
  const std::string data(1 << 16, 'x');
  EXPECT_THAT(error_of([&] { write_fully(fd, data.data(), data.size(), "/snapshots/x.lamina"); }),
              AllOf(HasSubstr("/snapshots/x.lamina"), HasSubstr("No space left on device"),
                    HasSubstr("disk is full")));
  ::close(fd);
}

TEST(SnapshotFailure, AnUnwritableDirectoryStopsBeforeTrainingOrIsLogged) {
  TempDir dir;
  write_tiny_data(dir);
  write_text(dir / "file", "not a directory");
  NativeBackend backend;
  const NetParameter net = parse_net_parameter(tiny_net(dir), "tiny");
  for (const std::string& prefix : {dir / "missing/run", dir / "file/run"}) {
    Solver solver(solver_param(kSgd, "max_iter: 4 snapshot: 2 snapshot_prefix: \"" + prefix + "\""),
                  net, backend);
    EXPECT_THAT(error_of([&] { solver.solve(); }),
                AllOf(HasSubstr(prefix), HasSubstr("training did not start")));
    EXPECT_EQ(solver.iter(), 0);
    EXPECT_THAT(error_of([&] { solver.snapshot(); }), HasSubstr(prefix + "_iter_0.lamina"));
    Solver going_on(solver_param(kSgd, "max_iter: 4 snapshot: 2 snapshot_failure: CONTINUE "
                                       "snapshot_prefix: \"" + prefix + "\""),
                    net, backend);
    // It trains to the end, then reports that nothing was saved (a non-zero exit status).
    EXPECT_THAT(error_of([&] { going_on.solve(); }),
                AllOf(HasSubstr("training finished at iteration 4 but its final snapshot could "
                                "not be written"),
                      HasSubstr(prefix), HasSubstr("no snapshot is on disk")));
    EXPECT_EQ(going_on.iter(), 4);
    EXPECT_TRUE(going_on.last_snapshot().empty());
    // A stop that asks for a snapshot which cannot be written is not a success either.
    Solver stopped(solver_param(kSgd, "max_iter: 4 snapshot_failure: CONTINUE "
                                      "snapshot_prefix: \"" + prefix + "\""),
                   net, backend);
    stopped.set_action_source([&] { return stopped.iter() == 2 ? SolverAction::kStop
                                                               : SolverAction::kNone; });
    EXPECT_THAT(error_of([&] { stopped.solve(); }),
                AllOf(HasSubstr("training stopped at iteration 2 as requested but its snapshot "
                                "could not be written"),
                      HasSubstr(prefix), HasSubstr("no snapshot is on disk")));
    EXPECT_TRUE(stopped.stopped_early());
  }
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(dir / "readonly");
    fs::permissions(dir / "readonly", fs::perms::owner_read | fs::perms::owner_exec);
    Solver solver(solver_param(kSgd, "max_iter: 2 snapshot_prefix: \"" + (dir / "readonly/r") + "\""),
                  net, backend);
    EXPECT_THAT(error_of([&] { solver.solve(); }), HasSubstr("Permission denied"));
  }
}

// A disk that fills in the middle of training (RLIMIT_FSIZE in a child: writes past 64 KiB
// fail with EFBIG): STOP ends the run with the path; CONTINUE trains to the end, then
// reports that its final snapshot is not on disk.
TEST(SnapshotFailure, ADiskFullMidRunStopsCleanlyOrGoesOn) {
  TempDir dir;
  write_tiny_data(dir);
  for (const char* policy : {"STOP", "CONTINUE"}) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      signal(SIGXFSZ, SIG_IGN);
      struct rlimit limit {65536, 65536};
      setrlimit(RLIMIT_FSIZE, &limit);
      int code = 0;
      try {
        NativeBackend backend;
        // fc1 1000 x 36 floats: a weights file of 144 KiB, over the limit.
        Solver solver(solver_param(kSgd, "max_iter: 6 snapshot: 3 snapshot_failure: " +
                                             std::string(policy) + " snapshot_prefix: \"" +
                                             (dir / policy) + "\""),
                      parse_net_parameter(tiny_net(dir, 1000), "tiny"), backend);
        solver.solve();
        code = solver.iter() == 6 ? 10 : 11;
      } catch (const Error& e) {
        const std::string m = e.what();
        const bool named = m.find(dir / policy) != std::string::npos &&
                           m.find("File too large") != std::string::npos;
        code = named && m.find("training stopped at iteration 3") != std::string::npos ? 20
               : named && m.find("training finished at iteration 6 but its final snapshot") !=
                              std::string::npos
                   ? 10
                   : 21;
        if (code == 21) std::fprintf(stderr, "unexpected message: %s\n", m.c_str());
      }
      _exit(code);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << policy << ": the child crashed (status " << status << ")";
    EXPECT_EQ(WEXITSTATUS(status), std::string(policy) == "STOP" ? 20 : 10) << policy;
    EXPECT_FALSE(fs::exists(dir / (std::string(policy) + "_iter_3.solverstate")));
  }
}

// ---------------------------------------------------------------------------------------
// Non-finite values

// TestPoison: the identity, except that on its `at`-th forward pass (counted from 0) it
// writes NaN into its output (mode "forward") or into its input's gradient ("backward").
// Its counter is layer state, so a diagnosis that replays the iteration replays the NaN.
class PoisonLayer : public Layer {
 public:
  using Layer::Layer;
  void setup(const Tensors& bottom, const Tensors& top) override {
    require_custom_keys({"at", "mode"});
    at_ = int64_t(custom_number("at", 0));
    backward_ = custom_string("mode", "forward") == "backward";
    top[0]->reshape(bottom[0]->shape());
  }
  void forward(const Tensors& bottom, const Tensors& top) override {
    poisoned_ = calls_++ == at_;
    std::vector<float> x = bottom[0]->copy_data_to_host();
    if (poisoned_ && !backward_) x[1] = std::nanf("");
    top[0]->copy_data_from_host(x);
  }
  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    std::vector<float> d = top[0]->copy_diff_to_host();
    if (poisoned_ && backward_) d[0] = std::nanf("");
    bottom[0]->copy_diff_from_host(d);
  }
  std::vector<int64_t> state() const override { return {calls_}; }
  void set_state(const std::vector<int64_t>& s) override { calls_ = s.at(0); }

 private:
  int64_t at_ = 0, calls_ = 0;
  bool backward_ = false, poisoned_ = false;
};

void register_poison() {
  static const bool done = [] {
    register_layer<PoisonLayer>("TestPoison");
    return true;
  }();
  (void)done;
}

// The tiny net with the poison after fc1: relu, dropout and fc2 read its output "hp".
std::string poisoned_net(const TempDir& dir, int at, const char* mode) {
  return tiny_net(dir, 16,
                  "layer { name: \"poison\" type: \"TestPoison\" bottom: \"h\" top: \"hp\" "
                  "custom_param { entry { key: \"at\" value: \"" + std::to_string(at) +
                      "\" } entry { key: \"mode\" value: \"" + mode + "\" } } }\n",
                  "fc2", "hp");
}

TEST(NonFinite, ANaNInAForwardPassIsNamedAtItsIteration) {
  register_poison();
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  const NetParameter net = parse_net_parameter(poisoned_net(dir, 5, "forward"), "poisoned");
  Solver solver(solver_param(kSgd, "display: 0 max_iter: 20 snapshot: 2 snapshot_prefix: \"" +
                                       (dir / "p") + "\""),
                net, backend);
  const std::string message = error_of([&] { solver.solve(); });
  EXPECT_THAT(message, AllOf(HasSubstr("training diverged at iteration 5"),
                             HasSubstr("the loss is NaN"), HasSubstr("forward pass"),
                             HasSubstr("layer 'poison' (TestPoison) output 'hp'"),
                             HasSubstr("1 of 128 values"), HasSubstr("p_iter_4.solverstate")));
  EXPECT_EQ(solver.iter(), 5);
  // The snapshots written are the good ones, and none after the NaN.
  EXPECT_TRUE(fs::exists(dir / "p_iter_4.solverstate"));
  EXPECT_FALSE(fs::exists(dir / "p_iter_6.lamina"));
  Solver resumed(solver_param(kSgd), net, backend);
  resumed.restore(dir / "p_iter_4.solverstate");
  const std::vector<float> w = arena_of(resumed.net());
  EXPECT_EQ(first_nonfinite(w.data(), int64_t(w.size())), -1);
}

TEST(NonFinite, ANaNGradientIsNamedBeforeTheUpdateAtADisplayIteration) {
  register_poison();
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  Solver solver(solver_param(kSgd, "display: 1 max_iter: 20"),
                parse_net_parameter(poisoned_net(dir, 7, "backward"), "poisoned"), backend);
  const std::string message = error_of([&] { solver.solve(); });
  EXPECT_THAT(message, AllOf(HasSubstr("training diverged at iteration 7"),
                             HasSubstr("parameter 'fc1/weight' of layer 'fc1' has a non-finite gradient"),
                             HasSubstr("backward pass: layer 'poison' (TestPoison) gradient of input 'h'"),
                             HasSubstr("No snapshot was written")));
  EXPECT_THAT(message, Not(HasSubstr("holds non-finite weights")));  // stopped before the update
}

// Without a display iteration to check the gradients, a NaN gradient turns into NaN weights
// in the update; the snapshot that follows refuses them and says where they came from.
TEST(NonFinite, ASnapshotRefusesNonFiniteWeightsAndStops) {
  register_poison();
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  Solver solver(solver_param(kSgd, "display: 0 max_iter: 20 snapshot: 1 snapshot_prefix: \"" +
                                       (dir / "s") + "\""),
                parse_net_parameter(poisoned_net(dir, 3, "backward"), "poisoned"), backend);
  const std::string message = error_of([&] { solver.solve(); });
  EXPECT_THAT(message, AllOf(HasSubstr("training diverged before the snapshot at iteration 4"),
                             HasSubstr("parameter 'fc1/weight' of layer 'fc1' holds a non-finite "
                                       "weight (NaN"),
                             HasSubstr("forward pass: layer 'fc1' (Linear) output 'h'"),
                             HasSubstr("s_iter_3.solverstate' (iteration 3), holds finite weights")));
  EXPECT_FALSE(fs::exists(dir / "s_iter_4.lamina"));
  EXPECT_FALSE(fs::exists(dir / "s_iter_4.solverstate"));
}

TEST(NonFinite, ContinueTrainsOnWithoutWritingBadSnapshots) {
  register_poison();
  TempDir dir;
  write_tiny_data(dir);
  NativeBackend backend;
  Solver solver(solver_param(kSgd, "display: 0 max_iter: 10 snapshot: 2 nonfinite: CONTINUE "
                                   "snapshot_prefix: \"" + (dir / "c") + "\""),
                parse_net_parameter(poisoned_net(dir, 3, "backward"), "poisoned"), backend);
  EXPECT_THAT(error_of([&] { solver.solve(); }),
              AllOf(HasSubstr("training finished at iteration 10 but its final snapshot could "
                              "not be written"),
                    HasSubstr("non-finite"), HasSubstr("c_iter_2.solverstate")));
  EXPECT_EQ(solver.iter(), 10);
  EXPECT_TRUE(fs::exists(dir / "c_iter_2.solverstate"));
  EXPECT_FALSE(fs::exists(dir / "c_iter_4.lamina"));   // NaN weights from iteration 3 on
  EXPECT_FALSE(fs::exists(dir / "c_iter_10.lamina"));
  EXPECT_EQ(solver.last_snapshot().state, dir / "c_iter_2.solverstate");
}

// A learning rate far too large: weights overflow within a few iterations. Training stops
// naming the iteration and a layer, and every snapshot on disk holds finite weights.
TEST(NonFinite, ADivergingSolverStopsAndKeepsTheLastGoodSnapshot) {
  TempDir dir;
  write_tiny_data(dir);
  for (const int display : {0, 5}) {
    NativeBackend backend;
    const std::string prefix = dir / ("d" + std::to_string(display));
    Solver solver(solver_param("base_lr: 1e30 momentum: 0.9", "display: " + std::to_string(display) +
                                   " max_iter: 100 snapshot: 1 snapshot_prefix: \"" + prefix + "\""),
                  parse_net_parameter(tiny_net(dir), "tiny"), backend);
    const std::string message = error_of([&] { solver.solve(); });
    EXPECT_THAT(message, AllOf(HasSubstr("iteration"), HasSubstr("layer '")));
    EXPECT_THAT(message, ::testing::AnyOf(HasSubstr("training diverged"), HasSubstr("refusing")));
    // It says what to change rather than implying the last snapshot will not diverge again.
    EXPECT_THAT(message, AllOf(HasSubstr("lower base_lr (now 1e+30)"), HasSubstr("clip_gradients")));
    EXPECT_LT(solver.iter(), 100);
    int good = 0;
    for (const auto& entry : fs::directory_iterator(dir.path())) {
      const std::string p = entry.path().string();
      if (p.rfind(prefix, 0) != 0 || entry.path().extension() != ".solverstate") continue;
      Solver check(solver_param("base_lr: 1e30 momentum: 0.9"),
                   parse_net_parameter(tiny_net(dir), "tiny"), backend);
      check.restore(p);
      const std::vector<float> w = arena_of(check.net());
      EXPECT_EQ(first_nonfinite(w.data(), int64_t(w.size())), -1) << p;
      ++good;
    }
    EXPECT_GT(good, 0);
    EXPECT_TRUE(fs::exists(solver.last_snapshot().state));
    std::printf("lr 1e30, display %d: stopped at iteration %d with %d good snapshots:\n  %s\n",
                display, solver.iter(), good, message.c_str());
  }
}

// ---------------------------------------------------------------------------------------
// Sizes

NetParameter input_net(const std::string& dims, const std::string& more = "") {
  return parse_net_parameter("name: \"n\" layer { name: \"data\" type: \"Input\" top: \"x\" "
                             "input_param { shape { " + dims + " } } }\n" + more, "sizes.prototxt");
}

TEST(Sizes, ZeroNegativeAndOverflowingDimensionsAreErrors) {
  NativeBackend backend;
  EXPECT_THAT(error_of([&] { Net(input_net("dim: 4 dim: 0"), TRAIN, backend, 1); }),
              AllOf(HasSubstr("layer 'data'"), HasSubstr("(4, 0)"), HasSubstr("<= 0")));
  EXPECT_THAT(error_of([&] { Net(input_net("dim: -1 dim: 3"), TRAIN, backend, 1); }),
              AllOf(HasSubstr("layer 'data'"), HasSubstr("<= 0")));
  EXPECT_THAT(error_of([&] { Net(input_net("dim: 1099511627776 dim: 1099511627776"), TRAIN, backend, 1); }),
              AllOf(HasSubstr("layer 'data'"), HasSubstr("too many elements")));
  EXPECT_THAT(error_of([&] {
                Net(input_net("dim: 4 dim: 6",
                              "layer { name: \"r\" type: \"Reshape\" reshape_param { shape { "
                              "dim: 1099511627776 dim: 1099511627776 dim: -1 } } }"),
                    TRAIN, backend, 1);
              }),
              AllOf(HasSubstr("layer 'r'"), HasSubstr("too many elements")));
  // num_output x K past 2^56: refused before any allocation.
  EXPECT_THAT(error_of([&] {
                Net(input_net("dim: 1 dim: 16777217",
                              "layer { name: \"fc\" type: \"Linear\" inner_product_param { "
                              "num_output: 4294967295 } }"),
                    TRAIN, backend, 1);
              }),
              AllOf(HasSubstr("layer 'fc'"), HasSubstr("too many elements")));
  // Under the limit but beyond any machine's memory (a (1024, 2^30) top, 4 TiB): refused
  // with an error before anything is touched.
  EXPECT_THAT(error_of([&] {
                Net(input_net("dim: 1024 dim: 1",
                              "layer { name: \"fc\" type: \"Linear\" inner_product_param { "
                              "num_output: 1073741824 } }"),
                    TRAIN, backend, 1);
              }),
              AllOf(HasSubstr("layer 'fc'"), HasSubstr("could not allocate")));
  // A zero dimension does not hide an overflow of the others.
  EXPECT_THAT(error_of([&] { shape_count({0, int64_t(1) << 40, int64_t(1) << 40}); }),
              HasSubstr("too many elements"));
  EXPECT_EQ(shape_count({0, 5}), 0);
  EXPECT_EQ(shape_count({int64_t(1) << 28, int64_t(1) << 28}), int64_t(1) << 56);
  EXPECT_THAT(error_of([&] { shape_count({(int64_t(1) << 28) + 1, int64_t(1) << 28}); }),
              HasSubstr("too many elements"));
}

// ---------------------------------------------------------------------------------------
// The lamina tool: signals, resuming, SIGKILL while snapshotting, scoring

#ifdef LAMINA_TOOL

// The built tool, or $LAMINA_TOOL (binaries moved to another machine).
std::string tool_path() {
  const char* env = std::getenv("LAMINA_TOOL");
  return env && *env ? env : LAMINA_TOOL;
}

// Runs the lamina tool with stdout and stderr to log; returns its pid.
pid_t start_tool(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all = {tool_path()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// The exit status of pid (or -signal), killing it after timeout_s.
int wait_tool(pid_t pid, double timeout_s = 60) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "the tool did not exit within " << timeout_s << " s";
      return -1000;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

bool alive(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == 0;
}

// Waits until the log matches pattern (a regex); returns the match's first group, or "".
std::string wait_log(const std::string& log, const std::string& pattern, double timeout_s = 60) {
  const std::regex re(pattern);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    const std::string text = read_bytes(log);
    std::smatch m;
    if (std::regex_search(text, m, re)) return m.size() > 1 ? m[1].str() : m[0].str();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "no '" << pattern << "' in " << log << ":\n" << read_bytes(log);
  return {};
}

// A solver for the tiny net that would train for a long time.
std::string long_solver(const TempDir& dir, const std::string& prefix, const std::string& more = "",
                        int hidden = 16) {
  write_tiny_data(dir);
  write_text(dir / "net.prototxt", tiny_net(dir, hidden));
  const std::string path = dir / (prefix + "_solver.prototxt");
  write_text(path, std::string("net: \"net.prototxt\"\n") + kSgd +
                       "\nmax_iter: 100000000 display: 200 random_seed: 5 snapshot_prefix: \"" +
                       (dir / prefix) + "\"\n" + more);
  return path;
}

TEST(Tool, SighupSnapshotsAndGoesOnSigintAndSigtermSnapshotAndStop) {
  TempDir dir;
  const std::string solver = long_solver(dir, "sig");
  const std::string log = dir / "train.log";
  const pid_t pid = start_tool({"train", "--solver", solver}, log);
  wait_log(log, "Iteration 400,");
  ::kill(pid, SIGHUP);
  const std::string hup = wait_log(log, "Snapshot at iteration (\\d+)");
  EXPECT_TRUE(fs::exists(dir / ("sig_iter_" + hup + ".solverstate")));
  wait_log(log, "Snapshot at iteration " + hup + "[^]*Iteration \\d+,");  // it goes on
  EXPECT_TRUE(alive(pid));
  ::kill(pid, SIGINT);
  EXPECT_EQ(wait_tool(pid), 0) << read_bytes(log);
  const std::string stopped = wait_log(log, "stopped at iteration (\\d+); resume with");
  EXPECT_GT(std::stoi(stopped), std::stoi(hup));
  const std::string state = dir / ("sig_iter_" + stopped + ".solverstate");
  EXPECT_TRUE(fs::exists(state));
  EXPECT_TRUE(fs::exists(dir / ("sig_iter_" + stopped + ".lamina")));

  // Resume, then SIGTERM.
  const std::string log2 = dir / "resume.log";
  const pid_t resumed = start_tool({"train", "--solver", solver, "--snapshot", state}, log2);
  wait_log(log2, "Resuming from .* at iteration " + stopped);
  wait_log(log2, "Iteration \\d+,");
  ::kill(resumed, SIGTERM);
  EXPECT_EQ(wait_tool(resumed), 0) << read_bytes(log2);
  const std::string again = wait_log(log2, "stopped at iteration (\\d+)");
  EXPECT_GT(std::stoi(again), std::stoi(stopped));
  EXPECT_TRUE(fs::exists(dir / ("sig_iter_" + again + ".solverstate")));
}

TEST(Tool, EffectFlagsChooseWhatEachSignalDoes) {
  TempDir dir;
  const std::string solver = long_solver(dir, "fx");
  const std::string log = dir / "train.log";
  const pid_t pid = start_tool({"train", "--solver", solver, "--sigint-effect", "none",
                                "--sighup_effect", "stop", "--sigterm-effect", "snapshot"},
                               log);
  wait_log(log, "Iteration 200,");
  ::kill(pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(alive(pid)) << "SIGINT with --sigint-effect none ended the run";
  EXPECT_THAT(read_bytes(log), Not(HasSubstr("Snapshot at iteration")));
  ::kill(pid, SIGTERM);
  const std::string term = wait_log(log, "Snapshot at iteration (\\d+)");
  EXPECT_TRUE(alive(pid)) << "SIGTERM with --sigterm-effect snapshot ended the run";
  ::kill(pid, SIGHUP);
  EXPECT_EQ(wait_tool(pid), 0) << read_bytes(log);
  EXPECT_GT(std::stoi(wait_log(log, "stopped at iteration (\\d+)")), std::stoi(term));

  const std::string log2 = dir / "bad.log";
  EXPECT_EQ(wait_tool(start_tool({"train", "--solver", solver, "--sigint-effect", "pause"}, log2)), 1);
  EXPECT_THAT(read_bytes(log2), HasSubstr("--sigint-effect must be stop, snapshot or none"));
}

// `lamina train` snapshots every iteration and is SIGKILLed at random moments: every
// .solverstate left behind decodes, its weights file is there with the checksum it names,
// and the newest one resumes.
TEST(Tool, KilledWhileSnapshottingEveryIterationLeavesLoadableSnapshots) {
  TempDir dir;
  const std::string solver = long_solver(dir, "k", "snapshot: 1", 1000);
  std::mt19937 rng(11);
  int states = 0, tmp_left = 0;
  for (int round = 0; round < 10; ++round) {
    const std::string log = dir / ("kill" + std::to_string(round) + ".log");
    const pid_t pid = start_tool({"train", "--solver", solver}, log);
    wait_log(log, "Snapshot at iteration 2:");
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100000));
    ::kill(pid, SIGKILL);
    EXPECT_EQ(wait_tool(pid), -SIGKILL);
    int newest = -1;
    for (const auto& entry : fs::directory_iterator(dir.path())) {
      const std::string name = entry.path().filename().string();
      if (name.find(".tmp-") != std::string::npos) {
        ++tmp_left;
        fs::remove(entry.path());
        continue;
      }
      if (entry.path().extension() != ".solverstate") continue;
      ++states;
      const SnapshotFile state = read_snapshot_file(entry.path().string(), SnapshotKind::kSolverState);
      const std::string weights = (dir.path() / state.find("weights_file")->bytes).string();
      EXPECT_EQ(int64_t(read_snapshot_file(weights, SnapshotKind::kWeights).checksum),
                state.find("weights_crc32")->ints[0]);
      newest = std::max(newest, int(state.find("iteration")->ints[0]));
    }
    ASSERT_GE(newest, 2) << [&] {
      std::string listing;
      for (const auto& entry : fs::directory_iterator(dir.path()))
        listing += entry.path().filename().string() + " ";
      return listing + "\n" + read_bytes(log);
    }();
    NativeBackend backend;
    auto resumed = Solver::from_file(solver, backend);
    resumed->restore(dir / ("k_iter_" + std::to_string(newest) + ".solverstate"));
    EXPECT_EQ(resumed->iter(), newest);
    for (const auto& entry : fs::directory_iterator(dir.path()))
      if (entry.path().filename().string().rfind("k_iter_", 0) == 0) fs::remove(entry.path());
  }
  std::printf("10 kills: %d solver states checked, %d kills left a temporary file\n", states,
              tmp_left);
}

TEST(Tool, TestScoresTrainedWeights) {
  TempDir dir;
  write_tiny_data(dir);
  write_text(dir / "net.prototxt", tiny_net(dir));
  NativeBackend backend;
  Solver solver(solver_param(kSgd, "snapshot_prefix: \"" + (dir / "t") + "\""),
                parse_net_parameter(tiny_net(dir), "tiny"), backend);
  solver.step(20);
  const SnapshotPaths paths = solver.snapshot();
  Net net(parse_net_parameter(tiny_net(dir), "tiny"), TEST, backend, 1);
  load_weights(net, paths.weights, WeightsMatch::kRequireAll);
  double loss = 0, accuracy = 0;
  for (int i = 0; i < 4; ++i) {
    net.forward();
    loss += net.blob("loss").copy_data_to_host()[0] / 4;
    accuracy += net.blob("accuracy").copy_data_to_host()[0] / 4;
  }
  const std::string log = dir / "test.log";
  EXPECT_EQ(wait_tool(start_tool({"test", "--model", dir / "net.prototxt", "--weights",
                                  paths.weights, "--iterations", "4"},
                                 log)),
            0)
      << read_bytes(log);
  EXPECT_NEAR(std::stod(wait_log(log, "\nloss = ([0-9.e+-]+)")), loss, 1e-5 * loss);
  EXPECT_NEAR(std::stod(wait_log(log, "\naccuracy = ([0-9.e+-]+)")), accuracy, 1e-6);
  // The solver state is not weights; a damaged file is named.
  const std::string log2 = dir / "wrong.log";
  EXPECT_EQ(wait_tool(start_tool({"test", "--model", dir / "net.prototxt", "--weights",
                                  paths.state}, log2)), 1);
  EXPECT_THAT(read_bytes(log2), HasSubstr("not a weights file"));
}

#endif  // LAMINA_TOOL

}  // namespace
}  // namespace lamina
