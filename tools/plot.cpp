#include "plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "lamina/common.hpp"
#include "lamina/metrics_log.hpp"

namespace lamina::plot {

using drawing::Anchor;
using drawing::Color;
using drawing::Drawing;
using drawing::Polyline;
using drawing::Rect;
using drawing::Text;

XAxis parse_x_axis(const std::string& text) {
  if (text == "iteration") return XAxis::kIteration;
  if (text == "epoch") return XAxis::kEpoch;
  if (text == "time") return XAxis::kTime;
  fail("--x must be iteration, epoch or time; got '", text, "'");
}

void parse_size(const std::string& text, int& width, int& height) {
  int w = 0, h = 0;
  char end = 0;
  LAMINA_REQUIRE(std::sscanf(text.c_str(), "%dx%d%c", &w, &h, &end) == 2 && w >= 200 &&
                     h >= 150 && w <= 10000 && h <= 10000,
                 "--size must be WIDTHxHEIGHT in pixels, from 200x150 to 10000x10000; got '",
                 text, "'");
  width = w;
  height = h;
}

namespace {

// Tableau's 10 colours: told apart by most eyes, also in print.
const Color kPalette[] = {{0.12, 0.47, 0.71}, {1.00, 0.50, 0.05}, {0.17, 0.63, 0.17},
                          {0.84, 0.15, 0.16}, {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29},
                          {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50}, {0.74, 0.74, 0.13},
                          {0.09, 0.75, 0.81}};
const Color kInk{0.15, 0.15, 0.15};
const Color kGrid{0.88, 0.88, 0.88};
const Color kFrame{0.55, 0.55, 0.55};

struct Series {
  std::string label;
  Color color;
  bool dashed = false;
  bool markers = false;  // a square at each point (tests: few points, each a measurement)
  std::vector<std::pair<double, double>> points;  // (x, y)
};

struct Run {
  std::string label;
  std::vector<MetricsRecord> records;
};

// The test output that is the accuracy: "accuracy", else the first that starts with "acc".
std::string accuracy_key(const std::vector<Run>& runs) {
  std::string found;
  for (const Run& run : runs)
    for (const MetricsRecord& r : run.records) {
      if (r.kind != "test") continue;
      if (r.has("accuracy")) return "accuracy";
      for (const auto& [key, value] : r.values)
        if (found.empty() && key.rfind("acc", 0) == 0) found = key;
    }
  return found;
}

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double t(double v) const { return log ? std::log10(v) : v; }
  double fraction(double v) const { return (t(v) - t(lo)) / (t(hi) - t(lo)); }
};

// "%g"-like text for a tick of a scale whose ticks are `step` apart.
std::string tick_text(double v, double step) {
  char text[32];
  if (std::fabs(v) < step * 1e-6) v = 0;
  const int decimals = std::max(0, int(-std::floor(std::log10(step) + 1e-9)));
  if (std::fabs(v) >= 1e6 || (v != 0 && std::fabs(v) < 1e-4))
    std::snprintf(text, sizeof text, "%g", v);
  else
    std::snprintf(text, sizeof text, "%.*f", decimals, v);
  return text;
}

// Tick values and their texts: about 5 at 1, 2 or 5 times a power of ten on a linear axis;
// powers of ten (and 2x, 5x when the axis spans less than two decades) on a log one.
std::vector<std::pair<double, std::string>> ticks(const Axis& axis) {
  std::vector<std::pair<double, std::string>> out;
  if (!(axis.hi > axis.lo) || !std::isfinite(axis.t(axis.lo)) || !std::isfinite(axis.t(axis.hi)))
    return out;
  if (axis.log) {
    const int first = int(std::floor(std::log10(axis.lo))), last = int(std::ceil(std::log10(axis.hi)));
    const bool minor = last - first < 2;
    for (int e = first; e <= last; ++e) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (m != 1 && !minor) continue;
        const double v = m * std::pow(10.0, e);
        if (v < axis.lo * (1 - 1e-9) || v > axis.hi * (1 + 1e-9)) continue;
        char text[32];
        std::snprintf(text, sizeof text, "%g", v);
        out.push_back({v, text});
      }
    }
    return out;
  }
  const double range = axis.hi - axis.lo;
  const double raw = range / 5, power = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / power < 1.5 ? power : raw / power < 3.5 ? 2 * power
                      : raw / power < 7.5 ? 5 * power : 10 * power;
  for (double v = std::ceil(axis.lo / step - 1e-9) * step; v <= axis.hi + step * 1e-9; v += step)
    out.push_back({v, tick_text(v, step)});
  return out;
}

// An axis over the values, a little wider than they are (a log axis: whole decades when it
// spans more than one, else 2x and 5x marks are within reach).
Axis axis_over(std::vector<double> values, bool log, bool pad) {
  Axis a;
  a.log = log;
  if (log) values.erase(std::remove_if(values.begin(), values.end(),
                                       [](double v) { return !(v > 0); }),
                        values.end());
  values.erase(std::remove_if(values.begin(), values.end(),
                              [](double v) { return !std::isfinite(v); }),
               values.end());
  if (values.empty()) {  // nothing to place: an empty axis of one decade, or [0, 1]
    a.lo = log ? 0.1 : 0;
    return a;
  }
  a.lo = *std::min_element(values.begin(), values.end());
  a.hi = *std::max_element(values.begin(), values.end());
  if (log) {
    a.lo = std::pow(10.0, std::floor(std::log10(a.lo) + 1e-9));
    a.hi = std::pow(10.0, std::ceil(std::log10(a.hi) - 1e-9));
    if (a.hi <= a.lo) a.hi = a.lo * 10;
    return a;
  }
  if (a.hi <= a.lo) {
    a.lo -= 0.5;
    a.hi += 0.5;
  } else if (pad) {
    const double margin = 0.05 * (a.hi - a.lo);
    a.lo -= margin;
    a.hi += margin;
  }
  return a;
}

struct Panel {
  std::string title, y_label;
  std::vector<Series> series;
  bool log = false;
  bool legend_top = true;  // else at the bottom right
};

void draw_panel(Drawing& d, const Panel& panel, const Axis& x, const std::string& x_label,
                double left, double top, double width, double height) {
  constexpr double kFont = 13;
  // The plot area: room for tick labels and the axis label on the left, below, the title.
  const double px = left + 70, py = top + 30, pw = width - 70 - 16, ph = height - 30 - 52;
  std::vector<double> ys;
  for (const Series& s : panel.series)
    for (const auto& p : s.points) ys.push_back(p.second);
  const Axis y = axis_over(ys, panel.log, true);
  auto map = [&](double vx, double vy) {
    return std::pair{px + x.fraction(vx) * pw, py + ph - y.fraction(vy) * ph};
  };
  for (const auto& [v, text] : ticks(x)) {
    const double sx = px + x.fraction(v) * pw;
    d.add(Polyline{{{sx, py}, {sx, py + ph}}, kGrid, 1});
    d.add(Text{sx, py + ph + 18, text, kFont - 1, Anchor::kMiddle, kInk});
  }
  for (const auto& [v, text] : ticks(y)) {
    const double sy = py + ph - y.fraction(v) * ph;
    d.add(Polyline{{{px, sy}, {px + pw, sy}}, kGrid, 1});
    d.add(Text{px - 6, sy + 4, text, kFont - 1, Anchor::kEnd, kInk});
  }
  d.add(Rect{px, py, pw, ph, kFrame});
  d.add(Text{px + pw / 2, top + 20, panel.title, kFont + 2, Anchor::kMiddle, kInk, false, true});
  d.add(Text{px + pw / 2, py + ph + 40, x_label, kFont, Anchor::kMiddle, kInk});
  d.add(Text{left + 18, py + ph / 2, panel.y_label, kFont, Anchor::kMiddle, kInk, true});
  for (const Series& s : panel.series) {
    Polyline line{{}, s.color, s.dashed ? 2.0 : 1.6, s.dashed};
    for (const auto& [vx, vy] : s.points) {
      if (!std::isfinite(vy) || (panel.log && vy <= 0)) continue;
      line.points.push_back(map(vx, vy));
    }
    if (s.markers)
      for (const auto& [mx, my] : line.points)
        d.add(Rect{mx - 2.5, my - 2.5, 5, 5, s.color, true, s.color});
    d.add(line);
  }
  // The legend: a sample of each line and its name, in a box in a corner of the area.
  std::vector<const Series*> named;
  for (const Series& s : panel.series)
    if (!s.label.empty() && !s.points.empty()) named.push_back(&s);
  if (named.empty()) return;
  double text_w = 0;
  for (const Series* s : named) text_w = std::max(text_w, Drawing::text_width(s->label, kFont));
  const double row = 19, box_w = text_w + 48, box_h = row * double(named.size()) + 10;
  const double bx = px + pw - box_w - 10, by = panel.legend_top ? py + 10 : py + ph - box_h - 10;
  d.add(Rect{bx, by, box_w, box_h, kFrame, true, {1, 1, 1}});
  for (size_t i = 0; i < named.size(); ++i) {
    const double ry = by + 5 + row * (double(i) + 0.5);
    d.add(Polyline{{{bx + 8, ry}, {bx + 34, ry}}, named[i]->color, 2, named[i]->dashed});
    d.add(Text{bx + 40, ry + 4.5, named[i]->label, kFont, Anchor::kStart, kInk});
  }
}

}  // namespace

Drawing plot_metrics(const PlotOptions& o) {
  LAMINA_REQUIRE(!o.files.empty(), "give one or more metrics files to plot");
  LAMINA_REQUIRE(o.labels.empty() || o.labels.size() == o.files.size(), "--labels names ",
                 o.labels.size(), " run(s) but ", o.files.size(), " file(s) are given; give one "
                 "label per file");
  std::vector<Run> runs;
  for (size_t i = 0; i < o.files.size(); ++i)
    runs.push_back({o.labels.empty() ? std::filesystem::path(o.files[i]).stem().string()
                                     : o.labels[i],
                    read_metrics(o.files[i])});
  // The x value of a record, and the axis's label.
  double time_scale = 1;
  std::string x_label = o.x == XAxis::kIteration ? "Iteration" : "Epoch";
  if (o.x == XAxis::kTime) {
    double longest = 0;
    for (const Run& run : runs)
      for (const MetricsRecord& r : run.records)
        if (r.has("wall_s")) longest = std::max(longest, r.at("wall_s"));
    time_scale = longest > 7200 ? 3600 : longest > 180 ? 60 : 1;
    x_label = std::string("Training time (") + (time_scale == 3600 ? "h" : time_scale == 60 ? "min" : "s") + ")";
  }
  const std::string key = o.x == XAxis::kIteration ? "iteration" : o.x == XAxis::kEpoch ? "epoch" : "wall_s";
  const std::string accuracy = accuracy_key(runs);

  Panel loss{"Loss", o.log_loss ? "Loss (log scale)" : "Loss"};
  loss.log = o.log_loss;
  Panel acc{"Test " + (accuracy.empty() ? std::string("accuracy") : accuracy), "Accuracy"};
  acc.legend_top = false;
  std::vector<double> xs;
  const bool several = runs.size() > 1;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& run = runs[i];
    const Color color = kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
    Series train{several ? run.label + " train" : "train loss", color};
    Series test{several ? run.label + " test" : "test loss", color, true, true};
    Series correct{several ? run.label : "", color, false, true};
    for (const MetricsRecord& r : run.records) {
      if (r.kind != "train" && r.kind != "test") continue;
      if (r.kind == "test" && r.has("net") && r.at("net") != 0) continue;
      LAMINA_REQUIRE(r.has(key), "metrics file '", o.files[i], "' has ", r.kind,
                     " records without ", key, o.x == XAxis::kEpoch
                         ? " (its program did not know the epoch's size): plot it with --x "
                           "iteration or --x time"
                         : std::string());
      const double vx = r.at(key) / time_scale;
      if (r.kind == "train" && r.has("loss")) train.points.push_back({vx, r.at("loss")});
      if (r.kind == "test" && r.has("loss")) test.points.push_back({vx, r.at("loss")});
      if (r.kind == "test" && !accuracy.empty() && r.has(accuracy))
        correct.points.push_back({vx, r.at(accuracy)});
      xs.push_back(vx);
    }
    for (Series* s : {&train, &test}) if (!s->points.empty()) loss.series.push_back(*s);
    if (!correct.points.empty()) acc.series.push_back(correct);
  }
  LAMINA_REQUIRE(!loss.series.empty() || !acc.series.empty(), "no train or test records to "
                 "plot in ", o.files.size() == 1 ? "'" + o.files[0] + "'" : "the files given");
  Axis x = axis_over(xs, false, false);
  if (x.lo > 0 && x.lo < 0.2 * x.hi) x.lo = 0;  // from the start, when that is near
  Drawing d(o.width, o.height);
  const double top = o.title.empty() ? 0 : 30;
  if (!o.title.empty())
    d.add(Text{o.width / 2.0, 22, o.title, 17, Anchor::kMiddle, kInk, false, true});
  std::vector<const Panel*> panels;
  if (!loss.series.empty()) panels.push_back(&loss);
  if (!acc.series.empty()) panels.push_back(&acc);
  const double panel_w = double(o.width) / double(panels.size());
  for (size_t i = 0; i < panels.size(); ++i)
    draw_panel(d, *panels[i], x, x_label, panel_w * double(i), top, panel_w, o.height - top);
  return d;
}

}  // namespace lamina::plot
