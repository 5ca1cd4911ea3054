#include "lamina/layer_timing.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "lamina/backend.hpp"
#include "lamina/tensor.hpp"

namespace lamina {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string format(const char* spec, double value) {
  char text[64];
  std::snprintf(text, sizeof text, spec, value);
  return text;
}

// text padded with spaces to `width` columns, on the left (right-aligned) or the right.
std::string pad(const std::string& text, size_t width, bool right_align) {
  if (text.size() >= width) return text;
  const std::string fill(width - text.size(), ' ');
  return right_align ? fill + text : text + fill;
}

}  // namespace

double LayerTiming::total_forward_ms() const {
  return std::accumulate(forward_ms.begin(), forward_ms.end(), 0.0);
}

double LayerTiming::total_backward_ms() const {
  return std::accumulate(backward_ms.begin(), backward_ms.end(), 0.0);
}

LayerTiming time_layers(Net& net, int iterations) {
  Backend& backend = net.backend();
  const int n = net.num_layers();
  LayerTiming t;
  t.iterations = iterations;
  t.forward_ms.assign(size_t(n), 0);
  t.backward_ms.assign(size_t(n), 0);
  net.refresh_half_weights();  // forward_layer reads the weights' 16-bit copy as it is
  for (int it = 0; it < iterations; ++it) {
    for (int i = 0; i < n; ++i) {
      const auto start = Clock::now();
      net.forward_layer(i);
      backend.synchronize();
      t.forward_ms[size_t(i)] += ms_since(start);
    }
    for (int i = n - 1; i >= 0; --i) {
      const auto start = Clock::now();
      net.backward_layer(i);
      backend.synchronize();
      t.backward_ms[size_t(i)] += ms_since(start);
    }
    net.arena().zero_diff();
  }
  for (int i = 0; i < n; ++i) {
    t.forward_ms[size_t(i)] /= iterations;
    t.backward_ms[size_t(i)] /= iterations;
  }
  const auto start = Clock::now();
  for (int it = 0; it < iterations; ++it) {
    net.forward();
    net.backward();
  }
  backend.synchronize();
  t.iteration_ms = ms_since(start) / iterations;
  net.arena().zero_diff();
  return t;
}

std::string layer_table(Net& net, const LayerTiming& timing) {
  const int n = net.num_layers();
  const double total = timing.total_forward_ms() + timing.total_backward_ms();
  // The cells of each row: layer, type, forward, backward, share, tops.
  std::vector<std::vector<std::string>> rows = {
      {"layer", "type", "forward ms", "backward ms", "share", "tops"}};
  std::string runs;  // the layer that does a fused layer's work
  for (int i = 0; i < n; ++i) {
    Layer& layer = net.layer(i);
    std::string tops;
    for (const Tensor* top : net.layer_tops(i))
      tops += (tops.empty() ? "" : ", ") + top->name() + " " + top->shape_string();
    if (net.layer_fused(i)) {
      rows.push_back({layer.name(), layer.type(), "(runs in " + runs + ")", "", "", tops});
      continue;
    }
    runs = layer.name();
    const double f = timing.forward_ms[size_t(i)], b = timing.backward_ms[size_t(i)];
    rows.push_back({layer.name(), layer.type(), format("%.4f", f), format("%.4f", b),
                    total > 0 ? format("%.1f%%", 100 * (f + b) / total) : "-", tops});
  }
  rows.push_back({"sum of layers", "", format("%.4f", timing.total_forward_ms()),
                  format("%.4f", timing.total_backward_ms()), total > 0 ? "100.0%" : "-", ""});
  std::vector<size_t> width(6, 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < 6; ++c)
      if (!(c == 2 && row[3].empty() && row[2].rfind("(runs", 0) == 0))
        width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (const auto& row : rows) {
    std::string line = pad(row[0], width[0], false) + "  " + pad(row[1], width[1], false);
    if (row[2].rfind("(runs", 0) == 0) {
      // An absorbed layer: its note spans the three number columns.
      line += "  " + pad(row[2], width[2] + width[3] + width[4] + 4, false);
    } else {
      line += "  " + pad(row[2], width[2], true) + "  " + pad(row[3], width[3], true) + "  " +
              pad(row[4], width[4], true);
    }
    if (!row[5].empty()) line += "  " + row[5];
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  out += "whole iteration (forward + backward, no synchronize between layers): " +
         format("%.4f", timing.iteration_ms) + " ms\n";
  return out;
}

}  // namespace lamina
