// The Data layer over LMDB and LevelDB databases written by the test (liblmdb and LevelDB's
// own API, Datums from the field numbers): exact batches in key order across the
// wrap-around, labels, rand_skip, transforms drawn from the seed, prefetch depths, resume
// from state, batches uploaded ahead of a replay (Native and CUDA), data-parallel shares,
// every bad input an Error naming the layer and the record; and LeNet trained from an LMDB
// made by convert_mnist from the real MNIST follows the loss curve of the same training from
// the IDX files (MnistData), step by step, and on CUDA gives the same bits replayed as CUDA
// graphs as launched directly.
#include <gmock/gmock.h>
#include <glog/logging.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "datum_db.hpp"
#include "lamina/counter_rng.hpp"
#include "lamina/data_tools.hpp"
#include "lamina/data_transformer.hpp"
#include "lamina/io.hpp"
#include "lamina/registry.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::caffe_key;
using testing::datum_bytes;
using testing::error_of;

constexpr int kRows = 2, kCols = 3;

// Record i's byte j: (7 i + 3 j) % 256; its label i % 10.
uint8_t pixel(int i, int j) { return uint8_t((7 * i + 3 * j) % 256); }

class DataLayerTest : public ::testing::Test {
 protected:
  // num records of (1, kRows, kCols) under Caffe's keys, in the backend given.
  std::string write_db(int num, const std::string& backend = "LMDB",
                       const std::string& name = "db") {
    std::vector<std::pair<std::string, std::string>> records;
    for (int i = 0; i < num; ++i) {
      std::string pixels;
      for (int j = 0; j < kRows * kCols; ++j) pixels += char(pixel(i, j));
      records.emplace_back(caffe_key(i), datum_bytes(1, kRows, kCols, pixels, i % 10));
    }
    const std::string path = dir_ / name;
    if (backend == "LMDB") testing::write_lmdb(path, records);
    else testing::write_leveldb(path, records);
    return path;
  }

  std::unique_ptr<Layer> make_layer(const std::string& text, uint64_t seed = 1,
                                    Phase phase = TRAIN) {
    LayerParameter param;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param)) << text;
    return LayerRegistry::create(param, LayerContext{backend_, phase, seed});
  }
  // A Data layer over `path`, with `extra` inside data_param and `transform` as its
  // transform_param's body.
  std::string data_text(const std::string& path, int batch, const std::string& backend = "LMDB",
                        const std::string& extra = "", const std::string& transform = "") {
    return "name: 'data' type: 'Data' top: 'data' top: 'label' data_param { source: '" + path +
           "' batch_size: " + std::to_string(batch) + " backend: " + backend + " " + extra +
           " } transform_param { " + transform + " }";
  }

  // Runs forward and returns (data, labels).
  std::pair<std::vector<float>, std::vector<float>> next(Layer& layer) {
    layer.forward({}, {&data_, &label_});
    return {data_.copy_data_to_host(), label_.copy_data_to_host()};
  }
  // The batch of records `first`, `first` + 1, ... (mod num), scaled.
  static std::pair<std::vector<float>, std::vector<float>> expected(int first, int batch,
                                                                    int num, float scale = 1) {
    std::vector<float> data, labels;
    for (int r = 0; r < batch; ++r) {
      const int i = (first + r) % num;
      for (int j = 0; j < kRows * kCols; ++j) data.push_back(float(pixel(i, j)) * scale);
      labels.push_back(float(i % 10));
    }
    return {data, labels};
  }

  testing::TempDir dir_;
  NativeBackend backend_;
  Tensor data_{backend_, {1}}, label_{backend_, {1}};
};

TEST_F(DataLayerTest, BatchesInKeyOrderAcrossTheWrapAroundOnBothBackends) {
  for (const std::string backend : {"LMDB", "LEVELDB"}) {
    SCOPED_TRACE(backend);
    const int num = 5, batch = 3;
    auto layer = make_layer(data_text(write_db(num, backend, backend), batch, backend, "",
                                      "scale: 0.5"));
    layer->setup({}, {&data_, &label_});
    EXPECT_EQ(data_.shape(), (Shape{batch, 1, kRows, kCols}));
    EXPECT_EQ(label_.shape(), (Shape{batch}));
    for (int pass = 0; pass < 4; ++pass)  // records 0 1 2 | 3 4 0 | 1 2 3 | 4 0 1
      EXPECT_EQ(next(*layer), expected(pass * batch % num, batch, num, 0.5f)) << pass;
    EXPECT_EQ(layer->state(), (std::vector<int64_t>{1, 12, num}));
    EXPECT_EQ(layer->capture_blocker(), std::string()) << "a Data layer can be captured";
  }
}

TEST_F(DataLayerTest, KeysAreReadInOrderWhateverTheOrderTheyWereWritten) {
  std::vector<std::pair<std::string, std::string>> records;
  for (int i : {2, 0, 1}) records.emplace_back(caffe_key(i), datum_bytes(1, 1, 1, "x", i));
  testing::write_lmdb(dir_ / "shuffled", records);
  auto layer = make_layer(data_text(dir_ / "shuffled", 3));
  layer->setup({}, {&data_, &label_});
  EXPECT_EQ(next(*layer).second, (std::vector<float>{0, 1, 2}));
}

TEST_F(DataLayerTest, OneTopGivesDataWithoutLabels) {
  auto layer = make_layer("name: 'data' type: 'Data' top: 'data' data_param { source: '" +
                          write_db(4) + "' batch_size: 2 backend: LMDB }");
  layer->setup({}, {&data_});
  layer->forward({}, {&data_});
  layer->forward({}, {&data_});
  EXPECT_EQ(data_.copy_data_to_host(), expected(2, 2, 4).first);
}

TEST_F(DataLayerTest, RandSkipStartsAtARecordDrawnFromTheSeed) {
  const int num = 9, batch = 2, skip = 4;
  const std::string path = write_db(num);
  std::set<int64_t> starts;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    auto layer = make_layer(data_text(path, batch, "LMDB", "rand_skip: 4"), seed);
    layer->setup({}, {&data_, &label_});
    const int64_t start = int64_t(counter_hash(seed, ~uint64_t{0}) % skip);
    EXPECT_EQ(layer->state()[1], start);
    EXPECT_EQ(next(*layer), expected(int(start), batch, num)) << "seed " << seed;
    EXPECT_EQ(next(*layer), expected(int(start) + batch, batch, num)) << "seed " << seed;
    starts.insert(start);
  }
  EXPECT_GT(starts.size(), 2u) << "the skip must vary with the seed";
}

TEST_F(DataLayerTest, TransformsAreDrawnPerStreamPositionFromTheSeed) {
  const int num = 3, batch = 2;
  const std::string path = write_db(num);
  const std::string transform = "crop_size: 2 mirror: true mean_value: 10 scale: 0.5";
  auto first = make_layer(data_text(path, batch, "LMDB", "prefetch: 1", transform), 5);
  auto again = make_layer(data_text(path, batch, "LMDB", "prefetch: 6", transform), 5);
  auto other = make_layer(data_text(path, batch, "LMDB", "", transform), 6);
  first->setup({}, {&data_, &label_});
  EXPECT_EQ(data_.shape(), (Shape{batch, 1, 2, 2}));
  TransformationParameter p;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(transform, &p));
  DataTransformer reference(p, TRAIN, "");
  std::vector<std::vector<float>> batches;
  for (int pass = 0; pass < 6; ++pass) {
    const std::vector<float> got = next(*first).first;
    batches.push_back(got);
    for (int r = 0; r < batch; ++r) {  // stream position s is record s % num
      const int s = pass * batch + r;
      const TransformDraw d = reference.draw(5, uint64_t(s), {1, kRows, kCols});
      for (int h = 0; h < 2; ++h)
        for (int w = 0; w < 2; ++w) {
          const int src_w = d.w_off + (d.mirror ? 1 - w : w);
          const float want =
              (float(pixel(s % num, int((d.h_off + h) * kCols + src_w))) - 10) * 0.5f;
          EXPECT_EQ(got[size_t((r * 2 + h) * 2 + w)], want) << "pass " << pass << " row " << r;
        }
    }
  }
  again->setup({}, {&data_, &label_});
  for (int pass = 0; pass < 6; ++pass)
    EXPECT_EQ(next(*again).first, batches[size_t(pass)]) << "prefetch 6, pass " << pass;
  other->setup({}, {&data_, &label_});
  int differ = 0;
  for (int pass = 0; pass < 6; ++pass) differ += next(*other).first != batches[size_t(pass)];
  EXPECT_GT(differ, 2) << "another seed, other crops and mirrors";
}

TEST_F(DataLayerTest, TestPhaseCropsTheCentreWithTheMeanFile) {
  const std::string path = write_db(2);
  const std::string mean_path = dir_ / "mean.binaryproto";
  write_blob_proto(compute_image_mean(path, DbKind::kLmdb), mean_path);
  auto layer = make_layer(data_text(path, 2, "LMDB", "",
                                    "crop_size: 1 mean_file: '" + mean_path + "'"),
                          1, TEST);
  layer->setup({}, {&data_, &label_});
  EXPECT_EQ(data_.shape(), (Shape{2, 1, 1, 1}));
  // The centre of (2, 3) is row 0, column 1 (byte 1); the mean there is that of both records.
  const float mean = (float(pixel(0, 1)) + float(pixel(1, 1))) / 2;
  EXPECT_EQ(next(*layer).first,
            (std::vector<float>{float(pixel(0, 1)) - mean, float(pixel(1, 1)) - mean}));
}

TEST_F(DataLayerTest, OlderDataParamTransformFieldsAreMovedToTransformParam) {
  auto layer = make_layer("name: 'data' type: 'Data' top: 'data' top: 'label' data_param { "
                          "source: '" + write_db(3) + "' batch_size: 1 backend: LMDB scale: 2 "
                          "crop_size: 1 }", 1, TEST);
  layer->setup({}, {&data_, &label_});
  EXPECT_EQ(data_.shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(next(*layer).first, (std::vector<float>{2 * float(pixel(0, 1))}));
}

TEST_F(DataLayerTest, ResumingFromStateGivesTheSameBatches) {
  const std::string path = write_db(7);
  const std::string text = data_text(path, 3, "LMDB", "", "crop_size: 2 mirror: true");
  auto original = make_layer(text, 3);
  original->setup({}, {&data_, &label_});
  for (int pass = 0; pass < 4; ++pass) next(*original);
  const std::vector<int64_t> state = original->state();
  auto resumed = make_layer(text, 99);  // the seed comes from the state
  resumed->setup({}, {&data_, &label_});
  next(*resumed);
  resumed->set_state(state);
  for (int pass = 0; pass < 4; ++pass) {
    const auto want = next(*original);
    EXPECT_EQ(next(*resumed), want) << "pass " << pass;
  }
  auto smaller = make_layer(data_text(write_db(6, "LMDB", "six"), 3));
  smaller->setup({}, {&data_, &label_});
  EXPECT_THAT(error_of([&] { smaller->set_state(state); }),
              AllOf(HasSubstr("layer 'data' (Data)"), HasSubstr("taken with 7 records"),
                    HasSubstr("holds 6")));
  EXPECT_THAT(error_of([&] { smaller->set_state({1, 2}); }), HasSubstr("Data keeps 3"));
}

// Batches uploaded ahead (prepare_replay, as before a replay of several passes) and one by
// one (a direct forward) give the same stream, on Native and on CUDA; the ring grows to
// hold a replay's batches; a restart (set_state) drops the batches uploaded ahead.
TEST_F(DataLayerTest, UploadsAheadGiveTheStreamOfDirectPasses) {
  const std::string text = data_text(write_db(7), 3, "LMDB", "prefetch: 2",
                                     "crop_size: 2 mirror: true scale: 0.5");
  auto direct = make_layer(text, 5);
  direct->setup({}, {&data_, &label_});
  std::vector<std::pair<std::vector<float>, std::vector<float>>> want;
  for (int pass = 0; pass < 9; ++pass) want.push_back(next(*direct));

  auto expect_stream = [&](Backend& backend) {
    SCOPED_TRACE(backend.name());
    LayerParameter param;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param));
    auto layer = LayerRegistry::create(param, LayerContext{backend, TRAIN, 5});
    Tensor data(backend, {1}), label(backend, {1});
    layer->setup({}, {&data, &label});
    const std::vector<int64_t> start = layer->state();
    auto check = [&](int pass) {
      layer->forward({}, {&data, &label});
      EXPECT_EQ(data.copy_data_to_host(), want[size_t(pass)].first) << "pass " << pass;
      EXPECT_EQ(label.copy_data_to_host(), want[size_t(pass)].second) << "pass " << pass;
    };
    check(0);
    ASSERT_TRUE(layer->prepare_replay(3));  // passes 1, 2, 3 uploaded into a ring of 6
    for (int pass = 1; pass <= 3; ++pass) check(pass);
    ASSERT_TRUE(layer->prepare_replay(3));
    for (int pass = 4; pass <= 6; ++pass) check(pass);
    check(7);
    ASSERT_TRUE(layer->prepare_replay(2));  // uploaded ahead, then dropped by the restart
    layer->set_state(start);
    for (int pass = 0; pass < 9; ++pass) check(pass);
  };
  NativeBackend native;
  expect_stream(native);
  if (!cuda_compiled() || cuda_device_count() == 0) {
    std::printf("no CUDA device present: the stream was checked on Native only\n");
    return;
  }
  expect_stream(*make_cuda_backend(0));
}

// On CUDA, with the host far ahead of the device (no host read between passes; each pass's
// data is copied to its own place on the device and read once at the end): every upload
// waits for the pass that last read its ring slot, so each pass still sees its own batch,
// in replays of 3 prepared ahead and in direct passes.
TEST_F(DataLayerTest, UploadsWaitForThePassThatLastReadTheirSlotCuda) {
  LAMINA_CUDA_BACKEND_OR_SKIP(cuda);
  const std::string text = data_text(write_db(11), 4, "LMDB", "prefetch: 2",
                                     "crop_size: 2 mirror: true");
  constexpr int kPasses = 30;
  auto direct = make_layer(text, 9);
  direct->setup({}, {&data_, &label_});
  std::vector<float> want;
  for (int pass = 0; pass < kPasses; ++pass) {
    const std::vector<float> batch = next(*direct).first;
    want.insert(want.end(), batch.begin(), batch.end());
  }
  LayerParameter param;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param));
  auto layer = LayerRegistry::create(param, LayerContext{*cuda, TRAIN, 9});
  Tensor data(*cuda, {1}), label(*cuda, {1});
  layer->setup({}, {&data, &label});
  const int64_t count = data.count();
  Tensor seen(*cuda, {kPasses, count});
  for (int pass = 0; pass < kPasses; ++pass) {
    if (pass >= 12 && pass % 3 == 0) ASSERT_TRUE(layer->prepare_replay(3));
    layer->forward({}, {&data, &label});
    cuda->copy(sizeof(float) * size_t(count), data.data(), seen.mutable_data() + pass * count);
  }
  EXPECT_EQ(seen.copy_data_to_host(), want);
}

// A recording that fails after the layer's passes were recorded (the solver then restores
// the layer's state, as here): the recorded passes never ran, and the stream goes on from
// the state, from the ring's start.
TEST_F(DataLayerTest, AFailedRecordingLeavesTheStreamToTheStateCuda) {
  LAMINA_CUDA_BACKEND_OR_SKIP(cuda);
  const std::string text = data_text(write_db(7), 3, "LMDB", "", "scale: 0.5");
  auto direct = make_layer(text, 2);
  direct->setup({}, {&data_, &label_});
  std::vector<std::vector<float>> want;
  for (int pass = 0; pass < 8; ++pass) want.push_back(next(*direct).first);
  LayerParameter param;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param));
  auto layer = LayerRegistry::create(param, LayerContext{*cuda, TRAIN, 2});
  Tensor data(*cuda, {1}), label(*cuda, {1});
  layer->setup({}, {&data, &label});
  layer->forward({}, {&data, &label});
  EXPECT_EQ(data.copy_data_to_host(), want[0]);
  const std::vector<int64_t> state = layer->state();
  ASSERT_TRUE(layer->prepare_replay(2));
  EXPECT_THAT(error_of([&] {
                cuda->capture([&] {
                  layer->forward({}, {&data, &label});
                  layer->forward({}, {&data, &label});
                  fail("a later layer cannot be recorded");
                });
              }),
              HasSubstr("cannot be recorded"));
  layer->set_state(state);
  for (int pass = 1; pass < 8; ++pass) {
    layer->forward({}, {&data, &label});
    EXPECT_EQ(data.copy_data_to_host(), want[size_t(pass)]) << "pass " << pass;
  }
}

TEST_F(DataLayerTest, EachWorkerTakesItsRowsOfTheJobsBatch) {
  const int num = 7;
  const std::string path = write_db(num);
  auto whole = make_layer(data_text(path, 4));
  whole->setup({}, {&data_, &label_});
  std::vector<std::vector<float>> labels;
  for (int pass = 0; pass < 3; ++pass) labels.push_back(next(*whole).second);
  for (int rank = 0; rank < 2; ++rank) {
    auto worker = make_layer(data_text(path, 2));
    worker->setup({}, {&data_, &label_});
    ASSERT_TRUE(worker->set_worker(rank, 2));
    for (int pass = 0; pass < 3; ++pass) {
      const std::vector<float>& all = labels[size_t(pass)];
      EXPECT_EQ(next(*worker).second, std::vector<float>(all.begin() + 2 * rank,
                                                         all.begin() + 2 * rank + 2))
          << "rank " << rank << " pass " << pass;
    }
    EXPECT_EQ(worker->state(), whole->state());
  }
}

TEST_F(DataLayerTest, BadDatabasesAndRecordsAreErrorsNamingTheLayerAndTheRecord) {
  auto missing = make_layer(data_text(dir_ / "nowhere", 2));
  EXPECT_THAT(error_of([&] { missing->setup({}, {&data_, &label_}); }),
              AllOf(HasSubstr("nowhere"), HasSubstr("No such file")));
  auto wrong_kind = make_layer(data_text(write_db(3), 2, "LEVELDB"));
  EXPECT_THAT(error_of([&] { wrong_kind->setup({}, {&data_, &label_}); }),
              AllOf(HasSubstr("LevelDB database"), HasSubstr("is the backend LMDB?")));
  testing::write_lmdb(dir_ / "empty", {});
  auto empty = make_layer(data_text(dir_ / "empty", 2));
  EXPECT_THAT(error_of([&] { empty->setup({}, {&data_, &label_}); }),
              AllOf(HasSubstr("layer 'data' (Data): LMDB database"),
                    HasSubstr("holds no records")));
  // Record 3's byte count disagrees with its shape; record 4 has another shape.
  std::vector<std::pair<std::string, std::string>> records;
  for (int i = 0; i < 3; ++i) records.emplace_back(caffe_key(i), datum_bytes(1, 1, 2, "ab", 0));
  records.emplace_back(caffe_key(3), datum_bytes(1, 1, 2, "abc", 0));
  records.emplace_back(caffe_key(4), datum_bytes(1, 2, 1, "ab", 0));
  testing::write_lmdb(dir_ / "bad", records);
  auto bad = make_layer(data_text(dir_ / "bad", 2));
  bad->setup({}, {&data_, &label_});
  next(*bad);  // records 0, 1
  EXPECT_THAT(error_of([&] { next(*bad); }),
              AllOf(HasSubstr("layer 'data' (Data): LMDB database"),
                    HasSubstr("record '00000003'"), HasSubstr("holds 3 bytes"),
                    HasSubstr("1 x 1 x 2 = 2")));
  auto skip_to_4 = make_layer(data_text(dir_ / "bad", 1));
  skip_to_4->setup({}, {&data_, &label_});
  skip_to_4->set_state({1, 4, 5});
  EXPECT_THAT(error_of([&] { next(*skip_to_4); }),
              AllOf(HasSubstr("record '00000004'"), HasSubstr("is 1 x 2 x 1"),
                    HasSubstr("one shape")));
}

TEST_F(DataLayerTest, BadParametersAreErrorsNamingTheLayer) {
  const std::string path = write_db(3);
  const auto setup_error = [&](const std::string& text) {
    auto layer = make_layer(text);
    return error_of([&] { layer->setup({}, {&data_, &label_}); });
  };
  EXPECT_THAT(setup_error(data_text(path, 0)),
              AllOf(HasSubstr("layer 'data' (Data)"), HasSubstr("batch_size must be > 0")));
  EXPECT_THAT(setup_error(data_text(path, 2, "LMDB", "prefetch: 0")),
              HasSubstr("prefetch must be > 0"));
  EXPECT_THAT(setup_error("name: 'data' type: 'Data' top: 'data' data_param { batch_size: 1 }"),
              HasSubstr("data_param.source must name the database"));
  EXPECT_THAT(setup_error(data_text(path, 2, "LMDB", "", "crop_size: 3")),
              AllOf(HasSubstr("layer 'data' (Data)"), HasSubstr("crop_size 3 is larger")));
  const std::string mean_path = dir_ / "mean.binaryproto";
  BlobProto mean;
  mean.set_num(1), mean.set_channels(3), mean.set_height(kRows), mean.set_width(kCols);
  for (int i = 0; i < 3 * kRows * kCols; ++i) mean.add_data(1);
  write_blob_proto(mean, mean_path);
  EXPECT_THAT(setup_error(data_text(path, 2, "LMDB", "", "mean_file: '" + mean_path + "'")),
              AllOf(HasSubstr("layer 'data' (Data)"), HasSubstr("mean.binaryproto"),
                    HasSubstr("(3, 2, 3)"), HasSubstr("(1, 2, 3)")));
  EXPECT_THAT(setup_error(data_text(path, 2, "LMDB", "",
                                    "mean_file: '" + mean_path + "' mean_value: 1")),
              HasSubstr("both mean_file and mean_value"));
  // Dimensions whose product passes int64 (2^64 wraps to 0) with no values.
  BlobProto huge;
  for (int64_t dim : {int64_t{1}, int64_t{1} << 21, int64_t{1} << 21, int64_t{1} << 22})
    huge.mutable_shape()->add_dim(dim);
  write_blob_proto(huge, dir_ / "huge.binaryproto");
  EXPECT_THAT(setup_error(data_text(path, 2, "LMDB", "",
                                    "mean_file: '" + (dir_ / "huge.binaryproto") + "'")),
              AllOf(HasSubstr("huge.binaryproto"), HasSubstr("holds 0 values"),
                    HasSubstr("needs 2097152 x 2097152 x 4194304")));
}

// ---- end to end ----

// Caffe's LeNet (tests/data), its TRAIN data layer replaced by `data_layer`, the MNIST
// paths pointed at mnist_dir().
NetParameter lenet_with(const std::string& data_layer) {
  std::string text = read_text_file(testing::source_dir() +
                                    "/tests/data/caffe_lenet_train_test.prototxt");
  const size_t begin = text.find("layer {");
  const size_t end = text.find("layer {", begin + 1);
  text = text.substr(0, begin) + data_layer + "\n" + text.substr(end);
  // From after each replacement: the directory may itself be "data/mnist".
  const std::string dir = "\"" + testing::mnist_dir() + "/";
  for (size_t at = 0; (at = text.find("\"data/mnist/", at)) != std::string::npos;
       at += dir.size())
    text.replace(at, 12, dir);
  return parse_net_parameter(text, "lenet");
}

TEST(DataLayerEndToEnd, LenetFromAnLmdbFollowsTheLossCurveOfTheIdxFiles) {
  const std::string images = testing::mnist_dir() + "/train-images-idx3-ubyte";
  const std::string labels = testing::mnist_dir() + "/train-labels-idx1-ubyte";
  if (!std::filesystem::exists(images))
    GTEST_SKIP() << "no MNIST in " << testing::mnist_dir() << " (scripts/fetch_mnist.sh, or "
                 << "LAMINA_MNIST_DIR)";
  testing::TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(convert_mnist(images, labels, dir / "mnist_train_lmdb", DbKind::kLmdb), 60000);
  const std::string transform = " transform_param { scale: 0.00390625 }";
  const NetParameter from_idx = lenet_with(
      "layer { name: 'mnist' type: 'MnistData' top: 'data' top: 'label' "
      "include { phase: TRAIN }" + transform + " mnist_data_param { images: '" + images +
      "' labels: '" + labels + "' batch_size: 64 } }");
  const NetParameter from_lmdb = lenet_with(
      "layer { name: 'mnist' type: 'Data' top: 'data' top: 'label' include { phase: TRAIN }" +
      transform + " data_param { source: '" + (dir / "mnist_train_lmdb") +
      "' batch_size: 64 backend: LMDB } }");
  SolverParameter solver = parse_solver_parameter(
      "base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 lr_policy: 'inv' gamma: 0.0001 "
      "power: 0.75 display: 1 average_loss: 1 random_seed: 1 max_iter: 10000", "solver");
  constexpr int kIterations = 300;
  NativeBackend backend;
  Solver a(solver, from_idx, backend, "idx"), b(solver, from_lmdb, backend, "lmdb");
  const int log_level = FLAGS_minloglevel;
  FLAGS_minloglevel = google::WARNING;  // not 600 lines of displayed losses
  a.step(kIterations);
  b.step(kIterations);
  FLAGS_minloglevel = log_level;
  const auto& x = a.loss_history();
  const auto& y = b.loss_history();
  ASSERT_EQ(int(x.size()), kIterations);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(y[i].loss, x[i].loss, 1e-6f * std::abs(x[i].loss)) << "iteration " << i;
  EXPECT_LT(x.back().loss, 0.5f * x.front().loss) << "LeNet must have trained";
  std::printf("LeNet, %d iterations from the IDX files and from an LMDB: losses %.5f -> %.5f, "
              "the same at every step; %.1f s in all\n", kIterations, x.front().loss,
              x.back().loss,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// Caffe's LeNet (tests/data) with both data layers replaced by Data layers over `db`.
NetParameter lenet_from_lmdb(const std::string& db) {
  const std::string data = " transform_param { scale: 0.00390625 } data_param { source: '" +
                           db + "' backend: LMDB batch_size: ";
  NetParameter net = lenet_with(
      "layer { name: 'mnist' type: 'Data' top: 'data' top: 'label' include { phase: TRAIN }" +
      data + "64 } }");
  LayerParameter& test = *net.mutable_layer(1);
  EXPECT_EQ(test.type(), "MnistData");
  LayerParameter replacement;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "name: 'mnist' type: 'Data' top: 'data' top: 'label' include { phase: TEST }" + data +
          "100 }", &replacement));
  test = replacement;
  return net;
}

// With Data layers, the training step (2 passes a step) and the test (10 passes) are
// recorded as CUDA graphs and replayed, each replay's batches uploaded ahead of it; the run
// gives the same losses and test results, bit for bit, as the same run launched directly.
TEST(DataLayerEndToEnd, LenetFromAnLmdbReplayedAsCudaGraphsEqualsDirectCuda) {
  LAMINA_CUDA_BACKEND_OR_SKIP(backend);
  const std::string images = testing::mnist_dir() + "/t10k-images-idx3-ubyte";
  const std::string labels = testing::mnist_dir() + "/t10k-labels-idx1-ubyte";
  if (!std::filesystem::exists(images))
    GTEST_SKIP() << "no MNIST in " << testing::mnist_dir() << " (scripts/fetch_mnist.sh, or "
                 << "LAMINA_MNIST_DIR)";
  testing::TempDir dir;
  ASSERT_EQ(convert_mnist(images, labels, dir / "t10k_lmdb", DbKind::kLmdb), 10000);
  const NetParameter net = lenet_from_lmdb(dir / "t10k_lmdb");
  SolverParameter solver = parse_solver_parameter(
      "base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 lr_policy: 'inv' gamma: 0.0001 "
      "power: 0.75 display: 20 average_loss: 1 random_seed: 1 max_iter: 1000 iter_size: 2 "
      "test_iter: 10 test_interval: 50", "solver");
  std::vector<LossRecord> losses[2];
  std::vector<std::pair<int, TestResult>> tests[2];
  for (int replay = 0; replay < 2; ++replay) {
    solver.set_cuda_graph(replay == 1);
    Solver run(solver, net, *backend, "lenet");
    run.step(150);
    EXPECT_EQ(run.replays_steps(), replay == 1);
    losses[replay] = run.loss_history();
    tests[replay] = run.test_history();
  }
  ASSERT_GE(losses[0].size(), 7u);  // displayed every 20 iterations
  ASSERT_EQ(losses[1].size(), losses[0].size());
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT_EQ(losses[1][i].loss, losses[0][i].loss) << "iteration " << losses[0][i].iteration;
  ASSERT_GE(tests[0].size(), 2u);  // every 50 iterations
  ASSERT_EQ(tests[1].size(), tests[0].size());
  for (size_t i = 0; i < tests[0].size(); ++i)
    EXPECT_EQ(tests[1][i].second.outputs, tests[0][i].second.outputs) << "test " << i;
  EXPECT_LT(losses[0].back().loss, 0.5f * losses[0].front().loss) << "LeNet must have trained";
}

}  // namespace
}  // namespace lamina
