// Caffe's DummyData, MemoryData, HDF5Data and HDF5Output layers: values against values the
// test writes (fillers by their statistics), on Native, HostAsDevice and CUDA; shuffling by
// seed; snapshots' states; every bad input an Error naming the layer and the file; and nets
// using them trained by the Solver. The .h5 files are written, and HDF5Output's read back,
// by the test's own HDF5 code below, not by Lamina's reader and writer.
#include <gmock/gmock.h>

#include <hdf5.h>

#include <map>
#include <set>

#include "lamina/io.hpp"
#include "lamina/memory_data.hpp"
#include "layer_cases.hpp"

namespace lamina::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// ---------------------------------------------------------------- the test's HDF5 code

// Writes datasets into a new file: name -> (dims, values) stored as `type` (native float,
// double or int32).
struct Dataset {
  std::vector<hsize_t> dims;
  std::vector<double> values;
  hid_t type = H5T_NATIVE_FLOAT;
};

void write_h5(const std::string& path, const std::map<std::string, Dataset>& datasets) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  for (const auto& [name, d] : datasets) {
    const hid_t space = d.dims.empty() ? H5Screate(H5S_SCALAR)
                                       : H5Screate_simple(int(d.dims.size()), d.dims.data(),
                                                          nullptr);
    const hid_t set = H5Dcreate2(file, name.c_str(), d.type, space, H5P_DEFAULT, H5P_DEFAULT,
                                 H5P_DEFAULT);
    ASSERT_GE(set, 0) << name;
    ASSERT_GE(H5Dwrite(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.values.data()),
              0);
    H5Dclose(set);
    H5Sclose(space);
  }
  H5Fclose(file);
}

// A dataset of strings (not numbers).
void write_h5_strings(const std::string& path, const std::string& name) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, 4);
  const hsize_t dims[1] = {2};
  const hid_t space = H5Screate_simple(1, dims, nullptr);
  const hid_t set = H5Dcreate2(file, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
  const char text[8] = {'a', 'b', 'c', 0, 'd', 'e', 'f', 0};
  H5Dwrite(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text);
  H5Dclose(set), H5Sclose(space), H5Tclose(type), H5Fclose(file);
}

// Reads one dataset as float: its dims and values.
std::pair<std::vector<hsize_t>, std::vector<float>> read_h5(const std::string& path,
                                                            const std::string& name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0) << path;
  const hid_t set = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(set, 0) << name;
  const hid_t space = H5Dget_space(set);
  std::vector<hsize_t> dims(H5Sget_simple_extent_ndims(space));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  hsize_t count = 1;
  for (hsize_t d : dims) count *= d;
  std::vector<float> values(count);
  H5Dread(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  H5Sclose(space), H5Dclose(set), H5Fclose(file);
  return {dims, values};
}

// ---------------------------------------------------------------- fixtures

// A temporary directory, a backend of each kind, and layers built outside a net.
class DataLayerTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    open_backend(GetParam(), backend_);
    char pattern[] = "/tmp/lamina_data_layers_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  std::unique_ptr<Layer> make(const std::string& text, uint64_t seed = 1) {
    LayerParameter param;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param)) << text;
    return LayerRegistry::create(param, LayerContext{*backend_, TRAIN, seed});
  }
  // Tops for a layer, owned by the fixture.
  Tensors tops(int n) {
    Tensors t;
    for (int i = 0; i < n; ++i) {
      owned_.push_back(std::make_unique<Tensor>(*backend_, Shape{1}));
      t.push_back(owned_.back().get());
    }
    return t;
  }
  void write_list(const std::string& name, const std::vector<std::string>& files) {
    std::ofstream out(path(name));
    for (const std::string& f : files) out << path(f) << "\n";
  }

  std::unique_ptr<Backend> backend_;
  std::string dir_;
  std::vector<std::unique_ptr<Tensor>> owned_;
};

std::string all_devices(const ::testing::TestParamInfo<Device>& info) {
  return device_name(info.param);
}

double mean_of(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s / double(v.size());
}
double variance_of(const std::vector<float>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (float x : v) s += (x - m) * (x - m);
  return s / double(v.size());
}

// ---------------------------------------------------------------- DummyData

TEST_P(DataLayerTest, DummyDataConstantTopsAreFilledOnceWithTheirShapes) {
  auto layer = make("name: 'd' type: 'DummyData' top: 'a' top: 'b' dummy_data_param { "
                    "shape { dim: 2 dim: 3 } shape { dim: 4 } "
                    "data_filler { type: 'constant' value: 7 } data_filler { value: -1.5 } }");
  Tensors t = tops(2);
  layer->setup({}, t);
  EXPECT_EQ(t[0]->shape(), (Shape{2, 3}));
  EXPECT_EQ(t[1]->shape(), (Shape{4}));
  EXPECT_EQ(t[0]->copy_data_to_host(), std::vector<float>(6, 7.0f));
  EXPECT_EQ(t[1]->copy_data_to_host(), std::vector<float>(4, -1.5f));
  // Caffe fills constant tops once: a forward leaves what a later layer wrote there.
  t[0]->copy_data_from_host(std::vector<float>(6, 3.0f));
  layer->forward({}, t);
  EXPECT_EQ(t[0]->copy_data_to_host(), std::vector<float>(6, 3.0f));
  EXPECT_EQ(layer->capture_blocker(), std::string());
  EXPECT_TRUE(layer->state().empty());
}

TEST_P(DataLayerTest, DummyDataLegacyDimensionsAndNoFillerGiveZeros) {
  auto layer = make("name: 'd' type: 'DummyData' top: 'a' top: 'b' dummy_data_param { "
                    "num: 2 num: 5 channels: 3 height: 1 height: 4 width: 2 }");
  Tensors t = tops(2);
  layer->setup({}, t);
  EXPECT_EQ(t[0]->shape(), (Shape{2, 3, 1, 2}));
  EXPECT_EQ(t[1]->shape(), (Shape{5, 3, 4, 2}));
  EXPECT_EQ(t[1]->copy_data_to_host(), std::vector<float>(120, 0.0f));
}

TEST_P(DataLayerTest, DummyDataRefillsRandomTopsEveryPassWithTheFillersStatistics) {
  // One filler per top: uniform [-2, 3] and gaussian (1, 2), 40000 values each.
  const std::string text =
      "name: 'd' type: 'DummyData' top: 'u' top: 'g' dummy_data_param { "
      "shape { dim: 200 dim: 200 } data_filler { type: 'uniform' min: -2 max: 3 } "
      "data_filler { type: 'gaussian' mean: 1 std: 2 } }";
  auto layer = make(text, 5);
  Tensors t = tops(2);
  layer->setup({}, t);
  std::vector<std::vector<float>> passes;
  for (int pass = 0; pass < 3; ++pass) {
    layer->forward({}, t);
    const std::vector<float> u = t[0]->copy_data_to_host(), g = t[1]->copy_data_to_host();
    EXPECT_NEAR(mean_of(u), 0.5, 0.03) << "pass " << pass;
    EXPECT_NEAR(variance_of(u), 25.0 / 12.0, 0.05) << "pass " << pass;
    EXPECT_GE(*std::min_element(u.begin(), u.end()), -2.0f);
    EXPECT_LE(*std::max_element(u.begin(), u.end()), 3.0f);
    EXPECT_NEAR(mean_of(g), 1.0, 0.04) << "pass " << pass;
    EXPECT_NEAR(std::sqrt(variance_of(g)), 2.0, 0.04) << "pass " << pass;
    passes.push_back(g);
  }
  EXPECT_NE(passes[0], passes[1]) << "a gaussian top is refilled every pass";
  EXPECT_THAT(layer->capture_blocker().value_or("?"), HasSubstr("uniform filler on the host"));

  // The same seed draws the same values; a resumed layer goes on where the state says.
  auto again = make(text, 5);
  Tensors t2 = tops(2);
  again->setup({}, t2);
  again->forward({}, t2);
  EXPECT_EQ(t2[1]->copy_data_to_host(), passes[0]);
  auto resumed = make(text, 9);
  Tensors t3 = tops(2);
  resumed->setup({}, t3);
  EXPECT_EQ(layer->state(), (std::vector<int64_t>{5, 3}));
  resumed->set_state({5, 2});
  resumed->forward({}, t3);
  EXPECT_EQ(t3[1]->copy_data_to_host(), passes[2]);
  auto other = make(text, 6);
  other->setup({}, t3);
  other->forward({}, t3);
  EXPECT_NE(t3[1]->copy_data_to_host(), passes[0]);
}

TEST_P(DataLayerTest, DummyDataOneFillerForEveryTopUsesItsShape) {
  // xavier: uniform in +-sqrt(3 / fan_in), fan_in = 500 / 5 = 100; one filler, two tops.
  auto layer = make("name: 'd' type: 'DummyData' top: 'a' top: 'b' dummy_data_param { "
                    "shape { dim: 5 dim: 100 } data_filler { type: 'xavier' } }");
  Tensors t = tops(2);
  layer->setup({}, t);
  layer->forward({}, t);
  for (Tensor* top : t) {
    const std::vector<float> v = top->copy_data_to_host();
    const float bound = std::sqrt(3.0f / 100.0f);
    EXPECT_LE(*std::max_element(v.begin(), v.end()), bound);
    EXPECT_NEAR(variance_of(v), bound * bound / 3, 0.15 * bound * bound / 3);
  }
  EXPECT_NE(t[0]->copy_data_to_host(), t[1]->copy_data_to_host());
}

// ---------------------------------------------------------------- MemoryData

const char* kMemoryData = "name: 'mem' type: 'MemoryData' top: 'data' top: 'label' "
                          "memory_data_param { batch_size: 2 channels: 1 height: 1 width: 3 }";

// n examples of 3 values 10 i + j, label i.
void memory_examples(int n, std::vector<float>& data, std::vector<float>& labels) {
  data.clear(), labels.clear();
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) data.push_back(float(10 * i + j));
    labels.push_back(float(i));
  }
}

// The example numbers of the batch in the tops, checked against their labels.
std::vector<int> memory_batch(Tensor& data, Tensor& label) {
  const std::vector<float> d = data.copy_data_to_host(), l = label.copy_data_to_host();
  std::vector<int> rows;
  for (size_t r = 0; r < l.size(); ++r) {
    rows.push_back(int(l[r]));
    for (int j = 0; j < 3; ++j) EXPECT_EQ(d[r * 3 + j], 10 * l[r] + float(j)) << "row " << r;
  }
  return rows;
}

TEST_P(DataLayerTest, MemoryDataTakesBatchesInOrderAndWrapsAround) {
  auto layer = make(kMemoryData);
  Tensors t = tops(2);
  layer->setup({}, t);
  EXPECT_EQ(t[0]->shape(), (Shape{2, 1, 1, 3}));
  EXPECT_EQ(t[1]->shape(), (Shape{2, 1, 1, 1}));
  std::vector<float> data, labels;
  memory_examples(6, data, labels);
  auto& memory = dynamic_cast<MemoryData&>(*layer);
  memory.reset(data.data(), labels.data(), 6);
  const std::vector<std::vector<int>> want = {{0, 1}, {2, 3}, {4, 5}, {0, 1}, {2, 3}};
  for (size_t pass = 0; pass < want.size(); ++pass) {
    layer->forward({}, t);
    EXPECT_EQ(memory_batch(*t[0], *t[1]), want[pass]) << "pass " << pass;
  }
  EXPECT_EQ(layer->capture_blocker(), std::string());
  EXPECT_EQ(layer->state(), (std::vector<int64_t>{6, 4}));

  // A resumed layer takes the batch the state names.
  auto resumed = make(kMemoryData);
  Tensors t2 = tops(2);
  resumed->setup({}, t2);
  dynamic_cast<MemoryData&>(*resumed).reset(data.data(), labels.data(), 6);
  resumed->set_state(layer->state());
  resumed->forward({}, t2);
  EXPECT_EQ(memory_batch(*t2[0], *t2[1]), (std::vector<int>{4, 5}));

  // reset() starts again from the first example, with the new values.
  memory_examples(4, data, labels);
  memory.reset(data.data(), labels.data(), 4);
  layer->forward({}, t);
  EXPECT_EQ(memory_batch(*t[0], *t[1]), (std::vector<int>{0, 1}));
}

TEST(MemoryDataResidency, ForwardPassesCopyNothingFromTheHost) {
  CountingBackend counting;
  LayerParameter param;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kMemoryData, &param));
  auto layer = LayerRegistry::create(param, LayerContext{counting, TRAIN, 1});
  Tensor data(counting, {1}), label(counting, {1});
  layer->setup({}, {&data, &label});
  std::vector<float> x, y;
  memory_examples(4, x, y);
  dynamic_cast<MemoryData&>(*layer).reset(x.data(), y.data(), 4);
  const int64_t uploads = counting.transfers().from_host;
  for (int pass = 0; pass < 3; ++pass) layer->forward({}, {&data, &label});
  EXPECT_EQ(counting.transfers().from_host, uploads) << "a forward pass copied from the host";
  EXPECT_EQ(memory_batch(data, label), (std::vector<int>{0, 1}));
}

TEST_P(DataLayerTest, MemoryDataTakesDatumsOfBytesOrFloats) {
  auto layer = make(kMemoryData);
  Tensors t = tops(2);
  layer->setup({}, t);
  std::vector<Datum> datums(2);
  for (Datum& d : datums) d.set_channels(1), d.set_height(1), d.set_width(3);
  datums[0].set_data(std::string("\x01\x02\xff", 3));
  datums[0].set_label(4);
  for (float v : {0.5f, -1.0f, 2.0f}) datums[1].add_float_data(v);
  datums[1].set_label(7);
  dynamic_cast<MemoryData&>(*layer).add_datum_vector(datums);
  layer->forward({}, t);
  EXPECT_EQ(t[0]->copy_data_to_host(), (std::vector<float>{1, 2, 255, 0.5f, -1, 2}));
  EXPECT_EQ(t[1]->copy_data_to_host(), (std::vector<float>{4, 7}));
}

// ---------------------------------------------------------------- HDF5Data

// File f of rows examples: data (rows, 2, 2) float = 100 g + j, label (rows) double = g, with
// g the example's global number (first + row).
Dataset h5_data(int first, int rows) {
  Dataset d{{hsize_t(rows), 2, 2}, {}, H5T_NATIVE_FLOAT};
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < 4; ++j) d.values.push_back(100.0 * (first + r) + j);
  return d;
}
Dataset h5_label(int first, int rows, hid_t type = H5T_NATIVE_DOUBLE) {
  Dataset d{{hsize_t(rows)}, {}, type};
  for (int r = 0; r < rows; ++r) d.values.push_back(first + r);
  return d;
}

// The global example numbers of the batch in the tops, checked against the data.
std::vector<int> h5_batch(Tensor& data, Tensor& label) {
  const std::vector<float> d = data.copy_data_to_host(), l = label.copy_data_to_host();
  std::vector<int> rows;
  for (size_t r = 0; r < l.size(); ++r) {
    rows.push_back(int(l[r]));
    for (int j = 0; j < 4; ++j) EXPECT_EQ(d[r * 4 + j], 100 * l[r] + float(j)) << "row " << r;
  }
  return rows;
}

class Hdf5DataTest : public DataLayerTest {
 protected:
  // Two files: examples 0-2 and 3-6 (the second's labels stored as int32).
  void two_files() {
    write_h5(path("a.h5"), {{"data", h5_data(0, 3)}, {"label", h5_label(0, 3)}});
    write_h5(path("b.h5"), {{"data", h5_data(3, 4)}, {"label", h5_label(3, 4, H5T_NATIVE_INT)}});
    write_list("list.txt", {"a.h5", "b.h5"});
  }
  std::string text(int batch, bool shuffle, const std::string& list = "list.txt") {
    return "name: 'h5' type: 'HDF5Data' top: 'data' top: 'label' hdf5_data_param { source: '" +
           path(list) + "' batch_size: " + std::to_string(batch) +
           (shuffle ? " shuffle: true }" : " }");
  }
  // The example numbers of `passes` batches, in order.
  std::vector<int> run(Layer& layer, Tensors& t, int passes) {
    std::vector<int> seen;
    for (int p = 0; p < passes; ++p) {
      layer.forward({}, t);
      const std::vector<int> b = h5_batch(*t[0], *t[1]);
      seen.insert(seen.end(), b.begin(), b.end());
    }
    return seen;
  }
};

TEST_P(Hdf5DataTest, BatchesRunAcrossFilesAndWrapAround) {
  two_files();
  auto layer = make(text(3, false));
  Tensors t = tops(2);
  layer->setup({}, t);
  EXPECT_EQ(t[0]->shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(t[1]->shape(), (Shape{3}));
  // 0 1 2 | 3 4 5 | 6 0 1 | 2 3 4 | 5 6 0
  EXPECT_EQ(run(*layer, t, 5),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 0}));
  EXPECT_THAT(layer->capture_blocker().value_or(""), HasSubstr("on the host"));
}

TEST_P(Hdf5DataTest, ShuffleIsSeededAndKeepsEachFilesRowsTogether) {
  two_files();
  std::vector<std::vector<int>> sequences;
  for (uint64_t seed : {11, 11, 12}) {
    auto layer = make(text(2, true), seed);
    Tensors t = tops(2);
    layer->setup({}, t);
    sequences.push_back(run(*layer, t, 21));  // six passes over the 7 examples
  }
  EXPECT_EQ(sequences[0], sequences[1]) << "the same seed gives the same order";
  EXPECT_NE(sequences[0], sequences[2]) << "another seed gives another order";
  std::set<std::vector<int>> rounds;
  for (int round = 0; round < 6; ++round) {
    const std::vector<int> r(sequences[0].begin() + 7 * round,
                             sequences[0].begin() + 7 * round + 7);
    EXPECT_EQ(std::set<int>(r.begin(), r.end()).size(), size_t(7))
        << "round " << round << " takes every example once";
    const bool a_first = r[0] < 3;  // a file's rows come one after another
    for (int k = 0; k < 7; ++k)
      EXPECT_EQ(r[k] < 3, a_first ? k < 3 : k >= 4) << "round " << round << ", row " << k;
    rounds.insert(r);
  }
  EXPECT_GT(rounds.size(), size_t(1)) << "every round draws its orders again";
}

TEST_P(Hdf5DataTest, OneFileIsReshuffledEveryRoundAndStateResumes) {
  write_h5(path("a.h5"), {{"data", h5_data(0, 5)}, {"label", h5_label(0, 5)}});
  write_list("one.txt", {"a.h5"});
  auto layer = make(text(3, true, "one.txt"), 3);
  Tensors t = tops(2);
  layer->setup({}, t);
  const std::vector<int> first = run(*layer, t, 5);  // three rounds of 5
  for (int round = 0; round < 3; ++round)
    EXPECT_EQ(std::set<int>(first.begin() + 5 * round, first.begin() + 5 * round + 5).size(),
              size_t(5)) << "round " << round;
  const std::vector<int64_t> state = layer->state();
  const std::vector<int> next = run(*layer, t, 4);
  auto resumed = make(text(3, true, "one.txt"), 99);
  Tensors t2 = tops(2);
  resumed->setup({}, t2);
  resumed->set_state(state);
  EXPECT_EQ(run(*resumed, t2, 4), next);
}

// ---------------------------------------------------------------- HDF5Output

TEST_P(DataLayerTest, Hdf5OutputWritesTheLastBatchWithCaffesFourAxes) {
  const std::string file = path("out.h5");
  auto layer = make("name: 'out' type: 'HDF5Output' bottom: 'data' bottom: 'label' "
                    "hdf5_output_param { file_name: '" + file + "' }");
  Tensor data(*backend_, {2, 3}), label(*backend_, {2});
  layer->setup({&data, &label}, {});
  EXPECT_THAT(layer->capture_blocker().value_or(""), HasSubstr("to the host"));
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<float> d(6), l = {float(pass), float(pass + 1)};
    for (int i = 0; i < 6; ++i) d[i] = float(i) + 0.25f + 10.0f * float(pass);
    data.copy_data_from_host(d);
    label.copy_data_from_host(l);
    layer->forward({&data, &label}, {});
    const auto [ddims, dvalues] = read_h5(file, "data");
    const auto [ldims, lvalues] = read_h5(file, "label");
    EXPECT_EQ(ddims, (std::vector<hsize_t>{2, 3, 1, 1})) << "pass " << pass;
    EXPECT_EQ(dvalues, d) << "pass " << pass;
    EXPECT_EQ(ldims, (std::vector<hsize_t>{2, 1, 1, 1})) << "pass " << pass;
    EXPECT_EQ(lvalues, l) << "pass " << pass;
  }
}

// The harness's suites (layer_cases.hpp): data layers have no bottoms to check gradients of.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LayerGradient);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LayerMatchesNative);

TEST_P(Hdf5DataTest, OneFileInOrderStaysOnTheDeviceAndIsCaptured) {
  write_h5(path("a.h5"), {{"data", h5_data(0, 5)}, {"label", h5_label(0, 5)}});
  write_list("one.txt", {"a.h5"});
  auto layer = make(text(3, false, "one.txt"));
  Tensors t = tops(2);
  layer->setup({}, t);
  EXPECT_EQ(layer->capture_blocker(), std::string());
  // 0 1 2 | 3 4 0 | 1 2 3 | 4 0 1
  EXPECT_EQ(run(*layer, t, 2), (std::vector<int>{0, 1, 2, 3, 4, 0}));
  const std::vector<int64_t> state = layer->state();
  EXPECT_EQ(state, (std::vector<int64_t>{1, 1, 0, 1, 1, 1}));  // round 1, row 1
  EXPECT_EQ(run(*layer, t, 2), (std::vector<int>{1, 2, 3, 4, 0, 1}));
  auto resumed = make(text(3, false, "one.txt"));
  Tensors t2 = tops(2);
  resumed->setup({}, t2);
  resumed->set_state(state);
  EXPECT_EQ(run(*resumed, t2, 2), (std::vector<int>{1, 2, 3, 4, 0, 1}));
  // A replayed pass moves the host's position as a forward would.
  resumed->replayed(1);
  EXPECT_EQ(resumed->state(), (std::vector<int64_t>{1, 3, 0, 0, 3, 1}));
}

TEST(Hdf5DataResidency, OneFileInOrderCopiesNothingPerPass) {
  char pattern[] = "/tmp/lamina_data_layers_XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  write_h5(dir + "/a.h5", {{"data", h5_data(0, 4)}, {"label", h5_label(0, 4)}});
  std::ofstream(dir + "/list.txt") << dir << "/a.h5\n";
  CountingBackend counting;
  LayerParameter param;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "name: 'h5' type: 'HDF5Data' top: 'data' top: 'label' hdf5_data_param { source: '" +
          dir + "/list.txt' batch_size: 3 }", &param));
  auto layer = LayerRegistry::create(param, LayerContext{counting, TRAIN, 1});
  Tensor data(counting, {1}), label(counting, {1});
  layer->setup({}, {&data, &label});
  const int64_t uploads = counting.transfers().from_host;
  for (int pass = 0; pass < 3; ++pass) layer->forward({}, {&data, &label});
  EXPECT_EQ(counting.transfers().from_host, uploads) << "a forward pass copied from the host";
  EXPECT_EQ(h5_batch(data, label), (std::vector<int>{2, 3, 0}));
  std::filesystem::remove_all(dir);
}

TEST_P(Hdf5DataTest, ANetCopiesHdf5DataToHdf5Output) {
  two_files();
  const std::string out = path("out.h5");
  Net net(parse_net_parameter(
              "layer { name: 'h5' type: 'HDF5Data' top: 'data' top: 'label' hdf5_data_param { "
              "source: '" + path("list.txt") + "' batch_size: 4 } } "
              "layer { name: 'out' type: 'HDF5Output' bottom: 'data' bottom: 'label' "
              "hdf5_output_param { file_name: '" + out + "' } }", "net"),
          TEST, *backend_, 1);
  net.forward();
  net.forward();
  const auto [dims, values] = read_h5(out, "label");
  EXPECT_EQ(dims, (std::vector<hsize_t>{4, 1, 1, 1}));
  EXPECT_EQ(values, (std::vector<float>{4, 5, 6, 0})) << "the second batch";
  const auto [ddims, dvalues] = read_h5(out, "data");
  EXPECT_EQ(ddims, (std::vector<hsize_t>{4, 2, 2, 1}));
  EXPECT_EQ(dvalues[4], 500.0f);
}

INSTANTIATE_TEST_SUITE_P(Devices, DataLayerTest,
                         ::testing::Values(Device::kNative, Device::kHostAsDevice, Device::kCuda),
                         all_devices);
INSTANTIATE_TEST_SUITE_P(Devices, Hdf5DataTest,
                         ::testing::Values(Device::kNative, Device::kHostAsDevice, Device::kCuda),
                         all_devices);

// ---------------------------------------------------------------- errors (Native)

class DataLayerErrors : public Hdf5DataTest {};

std::string setup_error(Layer& layer, Tensors bottom, Tensors top) {
  return error_of([&] { layer.setup(bottom, top); });
}

TEST_P(DataLayerErrors, DummyDataCountsAndFillers) {
  const auto bad = [&](const std::string& param, int n) {
    auto layer = make("name: 'd' type: 'DummyData' top: 'a' top: 'b' top: 'c' "
                      "dummy_data_param { " + param + " }");
    return setup_error(*layer, {}, tops(n));
  };
  const std::string shape = "shape { dim: 2 } ";
  EXPECT_THAT(bad(shape + "data_filler {} data_filler {}", 3),
              AllOf(HasSubstr("layer 'd' (DummyData): "), HasSubstr("data_filler once for every "
                    "top or once per top (3), not 2")));
  EXPECT_THAT(bad(shape + shape, 3), HasSubstr("shape once for every top or once per top (3)"));
  EXPECT_THAT(bad(shape + "num: 1 channels: 1 height: 1 width: 1", 3),
              HasSubstr("both shape and num/channels/height/width"));
  EXPECT_THAT(bad("num: 1 channels: 1 width: 1", 3), HasSubstr("height once for every top"));
  EXPECT_THAT(bad(shape + "data_filler { type: 'uniform' min: 2 max: 1 }", 3),
              AllOf(HasSubstr("layer 'd' (DummyData): data_filler for top 'a': uniform filler"),
                    HasSubstr("min 2 is greater than max 1")));
  EXPECT_THAT(bad(shape + "data_filler { type: 'nope' }", 3), HasSubstr("unknown filler"));
}

TEST_P(DataLayerErrors, MemoryDataMisuse) {
  auto layer = make(kMemoryData);
  Tensors t = tops(2);
  layer->setup({}, t);
  EXPECT_THAT(error_of([&] { layer->forward({}, t); }),
              AllOf(HasSubstr("layer 'mem' (MemoryData): has no examples"),
                    HasSubstr("memory_data(net, \"mem\").reset")));
  std::vector<float> data, labels;
  memory_examples(3, data, labels);
  auto& memory = dynamic_cast<MemoryData&>(*layer);
  EXPECT_THAT(error_of([&] { memory.reset(data.data(), labels.data(), 3); }),
              HasSubstr("reset() got 3 examples; n must be a positive multiple of batch_size 2"));
  std::vector<Datum> datums(2);
  datums[0].set_channels(1), datums[0].set_height(2), datums[0].set_width(3);
  EXPECT_THAT(error_of([&] { memory.add_datum_vector(datums); }),
              HasSubstr("datum 0 is 1 x 2 x 3; memory_data_param says 1 x 1 x 3"));
  auto zero = make("name: 'm0' type: 'MemoryData' top: 'd' top: 'l' memory_data_param { "
                   "batch_size: 2 channels: 1 height: 0 width: 3 }");
  EXPECT_THAT(setup_error(*zero, {}, tops(2)),
              HasSubstr("layer 'm0' (MemoryData): memory_data_param needs batch_size, "
                        "channels, height and width, each > 0"));

  NetParameter net_param = parse_net_parameter(
      "layer { name: 'feed' type: 'MemoryData' top: 'data' top: 'label' memory_data_param { "
      "batch_size: 2 channels: 1 height: 1 width: 3 } }", "net");
  Net net(net_param, TRAIN, *backend_, 1);
  EXPECT_THAT(error_of([&] { memory_data(net, "input"); }),
              HasSubstr("has no MemoryData layer named 'input'; its MemoryData layers: 'feed'"));
  EXPECT_EQ(memory_data(net, "feed").batch_size(), 2);
}

TEST_P(DataLayerErrors, Hdf5DataFilesAndDatasets) {
  const auto bad = [&](const std::string& list) {
    auto layer = make(text(2, false, list));
    return setup_error(*layer, {}, tops(2));
  };
  const std::string where = "layer 'h5' (HDF5Data): ";
  EXPECT_THAT(bad("missing.txt"), AllOf(HasSubstr(where + "HDF5 list file"),
                                        HasSubstr("missing.txt"), HasSubstr("No such file")));
  write_list("empty.txt", {});
  EXPECT_THAT(bad("empty.txt"), AllOf(HasSubstr(where), HasSubstr("names no files")));
  write_list("gone.txt", {"gone.h5"});
  EXPECT_THAT(bad("gone.txt"), AllOf(HasSubstr(where), HasSubstr("HDF5 data file"),
                                     HasSubstr("gone.h5"), HasSubstr("No such file")));
  std::ofstream(path("text.h5")) << "not hdf5";
  write_list("text.txt", {"text.h5"});
  EXPECT_THAT(bad("text.txt"), AllOf(HasSubstr(where), HasSubstr("text.h5"),
                                     HasSubstr("not an HDF5 file")));
  write_h5(path("nolabel.h5"), {{"data", h5_data(0, 3)}});
  write_list("nolabel.txt", {"nolabel.h5"});
  EXPECT_THAT(bad("nolabel.txt"), AllOf(HasSubstr(where), HasSubstr("nolabel.h5"),
                                        HasSubstr("has no dataset 'label'")));
  write_h5(path("scalar.h5"), {{"data", h5_data(0, 3)}, {"label", Dataset{{}, {1.0}}}});
  write_list("scalar.txt", {"scalar.h5"});
  EXPECT_THAT(bad("scalar.txt"), AllOf(HasSubstr(where), HasSubstr("scalar.h5"),
                                       HasSubstr("dataset 'label' has rank 0")));
  write_h5(path("rows.h5"), {{"data", h5_data(0, 3)}, {"label", h5_label(0, 4)}});
  write_list("rows.txt", {"rows.h5"});
  EXPECT_THAT(bad("rows.txt"), AllOf(HasSubstr(where), HasSubstr("rows.h5"),
                                     HasSubstr("dataset 'label' has 4 rows but dataset 'data' "
                                               "has 3")));
  write_h5_strings(path("strings.h5"), "label");
  write_list("strings.txt", {"strings.h5"});
  auto strings = make("name: 'h5' type: 'HDF5Data' top: 'label' hdf5_data_param { source: '" +
                      path("strings.txt") + "' batch_size: 1 }");
  EXPECT_THAT(setup_error(*strings, {}, tops(1)),
              AllOf(HasSubstr(where), HasSubstr("strings.h5"),
                    HasSubstr("dataset 'label' holds strings")));
  // A later file whose rows have another shape fails when a batch reaches it.
  write_h5(path("a.h5"), {{"data", h5_data(0, 2)}, {"label", h5_label(0, 2)}});
  Dataset wide{{2, 5}, std::vector<double>(10, 1.0)};
  write_h5(path("wide.h5"), {{"data", wide}, {"label", h5_label(2, 2)}});
  write_list("mixed.txt", {"a.h5", "wide.h5"});
  auto mixed = make(text(2, false, "mixed.txt"));
  Tensors t = tops(2);
  mixed->setup({}, t);
  mixed->forward({}, t);
  EXPECT_THAT(error_of([&] { mixed->forward({}, t); }),
              AllOf(HasSubstr(where), HasSubstr("wide.h5"),
                    HasSubstr("dataset 'data' has rows of shape (5), but the first file's rows "
                              "are (2, 2)")));
  auto zero = make("name: 'h5' type: 'HDF5Data' top: 'data' hdf5_data_param { source: '" +
                   path("mixed.txt") + "' }");
  EXPECT_THAT(setup_error(*zero, {}, tops(1)), HasSubstr("batch_size must be > 0"));
}

TEST_P(DataLayerErrors, Hdf5OutputBottomsAndFile) {
  const auto bad = [&](const std::string& file, Shape a, Shape b) {
    auto layer = make("name: 'out' type: 'HDF5Output' bottom: 'a' bottom: 'b' "
                      "hdf5_output_param { file_name: '" + file + "' }");
    Tensor x(*backend_, a), y(*backend_, b);
    return setup_error(*layer, {&x, &y}, {});
  };
  const std::string where = "layer 'out' (HDF5Output): ";
  EXPECT_THAT(bad("", {2}, {2}), AllOf(HasSubstr(where), HasSubstr("file_name must name")));
  EXPECT_THAT(bad(path("x.h5"), {2, 3}, {3}),
              AllOf(HasSubstr(where), HasSubstr("need the same first axis")));
  EXPECT_THAT(bad(path("x.h5"), {2, 1, 1, 1, 1}, {2}), HasSubstr("1 to 4 axes"));
  EXPECT_THAT(bad(path("no/such/dir/x.h5"), {2}, {2}),
              AllOf(HasSubstr(where), HasSubstr("no/such/dir/x.h5"),
                    HasSubstr("cannot create the HDF5 file")));
}

INSTANTIATE_TEST_SUITE_P(Native, DataLayerErrors, ::testing::Values(Device::kNative),
                         all_devices);

// ---------------------------------------------------------------- training

// Two separable classes in 4 dimensions: class c's examples sit near +-1 on axis c.
void separable(int n, std::vector<float>& x, std::vector<float>& y) {
  std::mt19937_64 rng(4);
  std::normal_distribution<float> noise(0.0f, 0.2f);
  for (int i = 0; i < n; ++i) {
    const int c = i % 2;
    for (int j = 0; j < 4; ++j) x.push_back((j == c ? 1.0f : -0.5f) + noise(rng));
    y.push_back(float(c));
  }
}

const char* kClassifier = R"(
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
)";

// Trains net_text for 60 steps of SGD and returns the first and last losses.
std::pair<float, float> train(Backend& backend, const std::string& net_text,
                              const std::function<void(Net&)>& feed = {}) {
  Solver solver(parse_solver_parameter("base_lr: 0.5 momentum: 0.5 random_seed: 2", "solver"),
                parse_net_parameter(net_text, "net"), backend);
  if (feed) feed(solver.net());
  solver.step(1);
  const float first = solver.take_mean_loss();
  solver.step(59);
  return {first, solver.take_mean_loss()};
}

TEST_P(DataLayerTest, NetsLearnFromMemoryDataAndHdf5Data) {
  std::vector<float> x, y;
  separable(32, x, y);
  const auto [m0, m1] = train(*backend_,
      std::string("layer { name: 'feed' type: 'MemoryData' top: 'data' top: 'label' "
                  "memory_data_param { batch_size: 8 channels: 4 height: 1 width: 1 } }") +
          kClassifier,
      [&](Net& net) { memory_data(net, "feed").reset(x.data(), y.data(), 32); });
  EXPECT_LT(m1, 0.1f * m0) << "MemoryData: first loss " << m0 << ", last " << m1;

  Dataset data{{16, 4}, std::vector<double>(x.begin(), x.begin() + 64)};
  Dataset label{{16}, std::vector<double>(y.begin(), y.begin() + 16)};
  write_h5(path("a.h5"), {{"data", data}, {"label", label}});
  data.values.assign(x.begin() + 64, x.end());
  label.values.assign(y.begin() + 16, y.end());
  write_h5(path("b.h5"), {{"data", data}, {"label", label}});
  write_list("train.txt", {"a.h5", "b.h5"});
  const auto [h0, h1] = train(*backend_,
      "layer { name: 'h5' type: 'HDF5Data' top: 'data' top: 'label' hdf5_data_param { "
      "source: '" + path("train.txt") + "' batch_size: 6 shuffle: true } }" + kClassifier);
  EXPECT_LT(h1, 0.1f * h0) << "HDF5Data: first loss " << h0 << ", last " << h1;

  // DummyData feeding a Euclidean loss toward a constant target: the weights learn it.
  const auto [d0, d1] = train(*backend_, R"(
      layer { name: "d" type: "DummyData" top: "x" top: "t" dummy_data_param {
              shape { dim: 8 dim: 3 } shape { dim: 8 dim: 1 }
              data_filler { type: "uniform" min: -1 max: 1 }
              data_filler { type: "constant" value: 0.5 } } }
      layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
              inner_product_param { num_output: 1 bias_filler { type: "constant" value: 2 } } }
      layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" })");
  EXPECT_LT(d1, 0.1f * d0) << "DummyData: first loss " << d0 << ", last " << d1;
}

}  // namespace
}  // namespace lamina::testing
