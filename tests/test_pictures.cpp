// The pictures of `lamina plot` (tools/plot.hpp) and `lamina draw_net` (tools/draw_net.hpp):
// PNG files that decode to the size asked for with the runs' colours drawn, SVG files with
// the legend's, axes' and layers' names as text, a drawing of LeNet holding every layer and
// blob (with shapes when the net builds, without when its data is missing), and the
// mistakes refused with a message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "draw_net.hpp"
#include "lamina/image.hpp"
#include "lamina/io.hpp"
#include "plot.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::error_of;

// Two runs: a CSV with epochs (MLP-like) and JSON lines without (LeNet-like).
struct Runs {
  testing::TempDir dir;
  std::string mlp, lenet;
  Runs() {
    std::string csv = "kind,iteration,epoch,wall_s,loss,lr,samples_per_s,net,accuracy\n";
    std::string jsonl;
    for (int i = 0; i <= 1000; i += 100) {
      const double loss = 2.3 * std::exp(-i / 300.0) + 0.05;
      csv += "train," + std::to_string(i) + "," + std::to_string(i / 937.0) + "," +
             std::to_string(i / 50.0) + "," + std::to_string(loss) + ",0.01,3200,,\n";
      jsonl += "{\"kind\":\"train\",\"iteration\":" + std::to_string(i) + ",\"wall_s\":" +
               std::to_string(i / 20.0) + ",\"loss\":" + std::to_string(loss * 0.7) + "}\n";
      if (i % 500 == 0) {
        const double accuracy = 0.1 + 0.88 * (1 - std::exp(-i / 200.0));
        csv += "test," + std::to_string(i) + "," + std::to_string(i / 937.0) + "," +
               std::to_string(i / 50.0) + "," + std::to_string(loss * 1.1) + ",,,0," +
               std::to_string(accuracy) + "\n";
        jsonl += "{\"kind\":\"test\",\"iteration\":" + std::to_string(i) + ",\"wall_s\":" +
                 std::to_string(i / 20.0) + ",\"net\":0,\"loss\":" + std::to_string(loss) +
                 ",\"accuracy\":" + std::to_string(accuracy + 0.01) + "}\n";
      }
    }
    mlp = dir.write("mlp.csv", csv);
    lenet = dir.write("lenet.jsonl", jsonl);
  }
};

plot::PlotOptions two_runs(const Runs& runs) {
  plot::PlotOptions o;
  o.files = {runs.mlp, runs.lenet};
  o.width = 900;
  o.height = 400;
  return o;
}

TEST(Plot, SvgHoldsTheLegendAndAxesAsTextAtTheSizeAsked) {
  Runs runs;
  const std::string svg = runs.dir / "curves.svg";
  plot::plot_metrics(two_runs(runs)).write(svg);
  const std::string text = read_text_file(svg);
  EXPECT_THAT(text, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" "
                              "height=\"400\""));
  for (const char* label : {">mlp train<", ">mlp test<", ">lenet train<", ">lenet test<",
                            ">Iteration<", ">Loss<", ">Test accuracy<", ">Accuracy<", ">mlp<",
                            ">lenet<", ">1000<"})
    EXPECT_THAT(text, HasSubstr(label));
  // A line per series: two runs' train loss (11 points), test loss (3), accuracy (3).
  const std::regex polyline("<polyline [^>]*points=\"([^\"]*)\"");
  std::vector<int> points;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), polyline);
       it != std::sregex_iterator(); ++it) {
    const std::string p = (*it)[1];
    const int n = int(std::count(p.begin(), p.end(), ' '));
    if (n > 2) points.push_back(n);  // grid lines and legend samples have 2
  }
  EXPECT_EQ(points, (std::vector<int>{11, 3, 11, 3, 3, 3}));
}

TEST(Plot, PngDecodesToTheSizeAskedWithTheRunsColoursDrawn) {
  Runs runs;
  const std::string png = runs.dir / "curves.png";
  plot::plot_metrics(two_runs(runs)).write(png);
  const Image image = read_image(png, ImageMode::kColor);
  EXPECT_EQ(image.width, 900);
  EXPECT_EQ(image.height, 400);
  // The first run's blue (31, 119, 181) and the second's orange (255, 127, 13), in B G R.
  auto pixels_of = [&](int r, int g, int b) {
    int n = 0;
    for (int64_t i = 0; i + 2 < image.count(); i += 3)
      n += std::abs(image.pixels[i] - b) < 8 && std::abs(image.pixels[i + 1] - g) < 8 &&
           std::abs(image.pixels[i + 2] - r) < 8;
    return n;
  };
  EXPECT_GT(pixels_of(31, 119, 181), 300);
  EXPECT_GT(pixels_of(255, 127, 13), 300);
}

TEST(Plot, LogLossEpochsAndTimeAxes) {
  Runs runs;
  plot::PlotOptions o = two_runs(runs);
  o.log_loss = true;
  o.x = plot::XAxis::kTime;
  o.labels = {"MLP", "LeNet"};
  o.title = "Two runs";
  const std::string svg = runs.dir / "log.svg";
  plot::plot_metrics(o).write(svg);
  const std::string text = read_text_file(svg);
  for (const char* label : {">Loss (log scale)<", ">0.1<", ">1<", ">Training time (s)<",
                            ">MLP train<", ">LeNet test<", ">Two runs<"})
    EXPECT_THAT(text, HasSubstr(label));
  // Epochs: the CSV run has them, the JSON lines run does not.
  o.x = plot::XAxis::kEpoch;
  EXPECT_THAT(error_of([&] { plot::plot_metrics(o); }),
              HasSubstr("'" + runs.lenet + "' has train records without epoch (its program did "
                        "not know the epoch's size): plot it with --x iteration or --x time"));
  o.files = {runs.mlp};
  o.labels = {};
  plot::plot_metrics(o).write(svg);
  EXPECT_THAT(read_text_file(svg), HasSubstr(">Epoch<"));
  EXPECT_THAT(read_text_file(svg), HasSubstr(">train loss<"));
}

TEST(Plot, RefusesWhatItCannotDraw) {
  Runs runs;
  plot::PlotOptions o = two_runs(runs);
  o.labels = {"one"};
  EXPECT_THAT(error_of([&] { plot::plot_metrics(o); }),
              HasSubstr("--labels names 1 run(s) but 2 file(s) are given"));
  EXPECT_THAT(error_of([&] { plot::plot_metrics(two_runs(runs)).write(runs.dir / "c.jpg"); }),
              HasSubstr("name the picture *.png or *.svg"));
  int w = 0, h = 0;
  EXPECT_THAT(error_of([&] { plot::parse_size("800", w, h); }),
              HasSubstr("--size must be WIDTHxHEIGHT in pixels"));
  plot::parse_size("640x480", w, h);
  EXPECT_EQ(w, 640);
  EXPECT_EQ(h, 480);
  EXPECT_THAT(error_of([] { plot::parse_x_axis("wall"); }),
              HasSubstr("--x must be iteration, epoch or time; got 'wall'"));
  o.files = {runs.dir.write("empty.csv", "kind,iteration\n")};
  o.labels = {};
  EXPECT_THAT(error_of([&] { plot::plot_metrics(o); }), HasSubstr("no train or test records"));
}

TEST(Plot, LossesOfZeroOnALogAxisLeaveItsPanelEmpty) {
  testing::TempDir dir;
  plot::PlotOptions o;
  o.files = {dir.write("zero.csv", "kind,iteration,loss\ntrain,0,0\ntrain,1,0\n")};
  o.log_loss = true;
  const std::string svg = dir / "zero.svg";
  plot::plot_metrics(o).write(svg);
  EXPECT_THAT(read_text_file(svg), HasSubstr(">Loss (log scale)<"));
}

// LeNet's training net with its data read from `images` (the MNIST training images when
// they are there).
std::string lenet_train(const testing::TempDir& dir, const std::string& images) {
  std::string net = read_text_file(testing::source_dir() + "/models/mnist/lenet_train.prototxt");
  net = std::regex_replace(net, std::regex("data/mnist/train-images-idx3-ubyte"), images);
  net = std::regex_replace(net, std::regex("data/mnist/train-labels-idx1-ubyte"),
                           testing::mnist_dir() + "/train-labels-idx1-ubyte");
  return dir.write("lenet_train.prototxt", net);
}

// Why Graphviz cannot render here (its layout and render plugins come with the graphviz
// package, loaded at run time), or empty when it can.
std::string graphviz_missing(const testing::TempDir& dir) {
  try {
    draw::write_graph("digraph g { a -> b }", dir / "probe.png");
    return {};
  } catch (const Error& e) {
    return e.what();
  }
}

void expect_every_layer_and_blob(const std::string& text) {
  for (const char* name : {"mnist", "conv1", "pool1", "conv2", "pool2", "ip1", "relu1", "ip2",
                           "loss", "data", "label"})
    EXPECT_THAT(text, HasSubstr(name));
}

TEST(DrawNet, LenetDrawsEveryLayerAndBlobWithShapesAndSettings) {
  testing::TempDir dir;
  draw::DrawOptions options;
  options.rankdir = "TB";
  const draw::NetGraph deploy =
      draw::net_graph(testing::source_dir() + "/models/mnist/lenet_deploy.prototxt", options);
  EXPECT_EQ(deploy.shapes_note, "");
  for (const char* node : {"label=\"conv1\\n(Convolution)\\nnum_output: 20\\nkernel_size: 5\\n"
                           "stride: 1\"",
                           "label=\"pool1\\n(Pooling)\\npool: MAX\\nkernel_size: 2\\nstride: 2\"",
                           "label=\"conv1\\n(1, 20, 24, 24)\"", "label=\"pool2\\n(1, 50, 4, 4)\"",
                           "label=\"prob\\n(1, 10)\"", "rankdir=TB"})
    EXPECT_THAT(deploy.dot, HasSubstr(node));
  // relu1 works in place on ip1: a second node of ip1, and no edge back.
  EXPECT_THAT(deploy.dot, HasSubstr("\"blob ip1 #2\""));
  EXPECT_THAT(deploy.dot, HasSubstr("\"layer 6 relu1\" -> \"blob ip1 #2\""));
  EXPECT_THAT(deploy.dot, Not(HasSubstr("\"layer 6 relu1\" -> \"blob ip1 #1\"")));

  const draw::NetGraph train =
      draw::net_graph(lenet_train(dir, testing::mnist_dir() + "/train-images-idx3-ubyte"), {});
  expect_every_layer_and_blob(train.dot);
  EXPECT_THAT(train.dot, Not(HasSubstr("accuracy")));  // a TEST layer
  if (const std::string missing = graphviz_missing(dir); !missing.empty())
    GTEST_SKIP() << "Graphviz cannot render on this machine: " << missing;
  const std::string svg = dir / "lenet.svg";
  draw::write_graph(train.dot, svg);
  const std::string text = read_text_file(svg);
  EXPECT_THAT(text, HasSubstr("<svg"));
  for (const char* name : {">conv1<", ">pool2<", ">relu1<", ">(SoftmaxWithLoss)<", ">label<"})
    EXPECT_THAT(text, HasSubstr(name));
  const std::string png = dir / "lenet.png";
  draw::write_graph(deploy.dot, png);
  const Image image = read_image(png, ImageMode::kColor);
  EXPECT_GT(image.width, 100);
  EXPECT_GT(image.height, 500);  // top to bottom: taller than wide
  EXPECT_GT(image.height, image.width);
  draw::write_graph(deploy.dot, dir / "lenet.dot");
  EXPECT_EQ(read_text_file(dir / "lenet.dot"), deploy.dot);
}

TEST(DrawNet, ANetThatCannotBeBuiltIsDrawnFromItsFile) {
  testing::TempDir dir;
  draw::DrawOptions options;
  options.phase = TEST;
  const draw::NetGraph graph =
      draw::net_graph(lenet_train(dir, dir / "no_such_images"), {});
  EXPECT_THAT(graph.shapes_note, HasSubstr("no_such_images"));
  expect_every_layer_and_blob(graph.dot);
  EXPECT_THAT(graph.dot, HasSubstr("label=\"ip2\"]"));  // no shape
  const draw::NetGraph test = draw::net_graph(lenet_train(dir, dir / "no_such_images"), options);
  EXPECT_THAT(test.dot, HasSubstr("label=\"accuracy\\n(Accuracy)\"]"));
}

TEST(DrawNet, RefusesUnknownPhasesDirectionsAndFormats) {
  EXPECT_THAT(error_of([] { draw::parse_phase("ALL"); }),
              HasSubstr("--phase must be TRAIN or TEST; got 'ALL'"));
  EXPECT_EQ(draw::parse_phase("test"), TEST);
  EXPECT_THAT(error_of([] { draw::parse_rankdir("UP"); }),
              HasSubstr("--rankdir must be LR, TB, BT or RL"));
  EXPECT_THAT(error_of([] { draw::write_graph("digraph g { a -> b }", "/tmp/net.pdf"); }),
              HasSubstr("name the drawing *.png, *.svg or *.dot"));
  EXPECT_THAT(error_of([] { draw::write_graph("digraph g { a -> b }", "/no/such/dir/net.png"); }),
              HasSubstr("cannot write '/no/such/dir/net.png': No such file or directory"));
}

}  // namespace
}  // namespace lamina
