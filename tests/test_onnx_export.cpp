// ONNX export (onnx_export.hpp): a catalogue of small nets covering every layer type the
// exporter translates, with random weights and inputs, is exported (ONNX's checker and strict
// shape inference run inside export_onnx) and written as ONNX test cases; an evaluator of ONNX
// graphs written with NumPy alone (tests/onnx/onnx_numpy_eval.py, which also runs ONNX's
// Python checker with full_check) must reproduce Lamina's forward pass within 1e-5 on every
// case. Layers with no ONNX form are errors naming them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "lamina/backend_factory.hpp"
#include "lamina/io.hpp"
#include "lamina/snapshot.hpp"
#include "test_util.hpp"
#ifdef LAMINA_WITH_ONNX
#include "lamina/onnx_export.hpp"
#include "onnx/onnx_cases.hpp"
#endif

namespace lamina {
namespace {

#ifdef LAMINA_WITH_ONNX

using testing::TempDir;

// Every catalogued net exports; the graph's inputs are the Input blobs and its outputs the
// net's outputs, named as the blobs.
TEST(OnnxExport, EveryCataloguedNetPassesOnnxsChecker) {
  std::set<std::string> types;
  for (const onnx_cases::Case& c : onnx_cases::catalogue()) {
    SCOPED_TRACE(c.name);
    onnx_cases::Built b = onnx_cases::build(c);
    OnnxModel model;
    ASSERT_NO_THROW(model = export_onnx(*b.net)) << c.name;
    EXPECT_FALSE(model.outputs.empty());
    // Named as the blobs, but where an input's blob is written in place ("<blob>/<layer>").
    ASSERT_EQ(model.outputs.size(), model.output_blobs.size());
    for (size_t k = 0; k < model.outputs.size(); ++k)
      EXPECT_TRUE(model.outputs[k] == model.output_blobs[k] ||
                  model.outputs[k].rfind(model.output_blobs[k] + "/", 0) == 0)
          << model.outputs[k] << " holds blob " << model.output_blobs[k];
    for (const std::string& output : b.net->output_names())  // some of Caffe's outputs
      EXPECT_NE(std::find(model.outputs.begin(), model.outputs.end(), output),
                model.outputs.end()) << output;
    for (const std::string& input : model.inputs)
      EXPECT_TRUE(b.net->has_blob(input)) << input;
    EXPECT_GT(model.nodes, 0);
    for (int i = 0; i < b.net->num_layers(); ++i) types.insert(b.net->layer(i).type());
  }
  // The catalogue covers every type the exporter translates.
  for (const std::string& type : onnx_exportable_types())
    EXPECT_TRUE(types.count(type)) << "no catalogued net has a " << type << " layer";
}

// The NumPy evaluator of the exported graphs agrees with Lamina's forward pass.
TEST(OnnxExport, AnIndependentEvaluatorReproducesLaminasForwardPass) {
  const std::string python = LAMINA_ONNX_PYTHON;
  if (python.empty())
    GTEST_SKIP() << "no Python 3 with onnx and numpy was found at configure time "
                    "(apt-get install python3-onnx python3-numpy)";
  // A build copied to another machine may find the interpreter without them.
  if (std::system((python + " -c 'import onnx, numpy' > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << python << " cannot import onnx and numpy on this machine "
                 << "(apt-get install python3-onnx python3-numpy)";
  TempDir dir;
  std::string cases;
  for (const onnx_cases::Case& c : onnx_cases::catalogue()) {
    if (!c.compare) continue;
    onnx_cases::Built b = onnx_cases::build(c);
    write_onnx_test_case(*b.net, dir / c.name);
    cases += " " + (dir / c.name);
  }
  const std::string log = dir / "evaluator.log";
  const std::string command = python + " " + LAMINA_SOURCE_DIR +
                              "/tests/onnx/onnx_numpy_eval.py --tolerance 1e-5" + cases +
                              " > " + log + " 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  std::cout << text.str();
  EXPECT_EQ(status, 0) << text.str();
}

std::string export_error(const std::string& layers) {
  const onnx_cases::Case c{"refused", onnx_cases::with_input("dim: 2 dim: 3", layers)};
  onnx_cases::Built b = onnx_cases::build(c);
  return testing::error_of([&] { export_onnx(*b.net); });
}

TEST(OnnxExport, LayersWithoutAnOnnxFormAreErrorsNamingThem) {
  EXPECT_THAT(export_error(R"(
      layer { name: "labels" type: "DummyData" top: "label"
              dummy_data_param { shape { dim: 2 } } }
      layer { name: "loss" type: "SoftmaxWithLoss" bottom: "data" bottom: "label" })"),
              ::testing::AllOf(::testing::HasSubstr("layer 'labels' (DummyData) cannot be "
                                                    "exported to ONNX: it reads its data itself"),
                               ::testing::HasSubstr("Input layer")));
  EXPECT_THAT(export_error(R"(
      layer { name: "label" type: "Input" top: "label" input_param { shape { dim: 2 } } }
      layer { name: "loss" type: "SoftmaxWithLoss" bottom: "data" bottom: "label" })"),
              ::testing::HasSubstr("layer 'loss' (SoftmaxWithLoss) cannot be exported to "
                                   "ONNX: a loss or accuracy layer"));
  EXPECT_THAT(export_error(R"(
      layer { name: "keep" type: "Input" top: "keep" input_param { shape { dim: 2 } } }
      layer { name: "picked" type: "Filter" bottom: "data" bottom: "keep" top: "picked" })"),
              ::testing::HasSubstr("layer 'picked' (Filter) cannot be exported to ONNX: its "
                                   "tops' row counts depend on the selector's values"));
}

// An export whose settings ONNX cannot express names the layer: MVN over rows of no axis.
TEST(OnnxExport, SettingsWithoutAnOnnxFormAreErrorsNamingTheLayer) {
  const onnx_cases::Case c{"mvn", onnx_cases::with_input("dim: 2 dim: 3", R"(
      layer { name: "norm" type: "MVN" bottom: "data" top: "norm" })")};
  onnx_cases::Built b = onnx_cases::build(c);
  EXPECT_THAT(testing::error_of([&] { export_onnx(*b.net); }),
              ::testing::HasSubstr("layer 'norm' (MVN) cannot be exported to ONNX: exports MVN "
                                   "rows of at least one axis"));
}

// export_onnx_file: the deploy net with a weights file; weights the net does not match are
// refused, naming both sides.
TEST(OnnxExport, ExportFileLoadsTheWeightsIntoTheDeployNet) {
  TempDir dir;
  const std::string deploy = std::string(LAMINA_SOURCE_DIR) + "/models/mnist/lenet_deploy.prototxt";
  auto backend = make_backend("cpu");
  Net net(read_net_parameter(deploy), TEST, *backend, 7, nullptr, deploy);
  save_weights(net, dir / "lenet.lamina");
  const OnnxModel model = export_onnx_file(deploy, dir / "lenet.lamina", dir / "lenet.onnx");
  EXPECT_EQ(model.inputs, std::vector<std::string>{"data"});
  EXPECT_EQ(model.outputs, std::vector<std::string>{"prob"});
  // conv1 (500 + 20), conv2 (25000 + 50), ip1 (400000 + 500), ip2 (5000 + 10)
  EXPECT_EQ(model.weights, 431080);
  EXPECT_TRUE(std::filesystem::exists(dir / "lenet.onnx"));
  const std::string mlp = std::string(LAMINA_SOURCE_DIR) + "/models/mnist/mlp_deploy.prototxt";
  EXPECT_THAT(testing::error_of([&] { export_onnx_file(mlp, dir / "lenet.lamina", dir / "x.onnx"); }),
              ::testing::HasSubstr("lenet.lamina"));
  EXPECT_FALSE(std::filesystem::exists(dir / "x.onnx"));
}

#else

TEST(OnnxExport, BuiltWithoutOnnx) {
  GTEST_SKIP() << "built without ONNX export (LAMINA_ONNX; install libonnx-dev)";
}

#endif

}  // namespace
}  // namespace lamina
