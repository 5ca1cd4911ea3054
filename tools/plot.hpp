// `lamina plot`: training curves from metrics files (metrics_log.hpp) as a PNG or SVG, as
// Caffe's plot_training_log.py drew them from logs. Two panels side by side: the loss
// (training loss solid, test loss dashed) and the test accuracy, against iterations, epochs
// or training time; several runs overlaid, one colour each, named in a legend. Test records
// of the first test net are drawn (net 0).
#pragma once

#include <string>
#include <vector>

#include "drawing.hpp"

namespace lamina::plot {

enum class XAxis { kIteration, kEpoch, kTime };

// "iteration", "epoch" or "time"; anything else is an Error naming --x.
XAxis parse_x_axis(const std::string& text);

struct PlotOptions {
  std::vector<std::string> files;   // metrics files (.csv or .jsonl), one run each
  std::vector<std::string> labels;  // the runs' names in the legend; default: file stems
  int width = 1200, height = 480;   // pixels
  XAxis x = XAxis::kIteration;
  bool log_loss = false;            // the loss axis in log scale
  std::string title;                // above the panels; none when empty
};

// "1200x480" into width and height; an Error naming --size for anything else.
void parse_size(const std::string& text, int& width, int& height);

// The picture of the runs. Errors: a file that cannot be read, labels that do not match
// the files, no records to draw, --x epoch for a run without epochs.
drawing::Drawing plot_metrics(const PlotOptions& options);

}  // namespace lamina::plot
