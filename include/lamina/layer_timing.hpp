// Time a net layer by layer, as `lamina time` and the benchmarks do, and the table a person
// reads: each layer's forward and backward milliseconds, its share of the sum over the
// layers, and its tops with their shapes, in columns aligned for any name length.
#pragma once

#include <string>
#include <vector>

#include "lamina/net.hpp"

namespace lamina {

struct LayerTiming {
  int iterations = 0;
  std::vector<double> forward_ms, backward_ms;  // per layer, mean per iteration
  double iteration_ms = 0;  // a whole forward + backward, without a synchronize inside
  double total_forward_ms() const;
  double total_backward_ms() const;
};

// Runs `iterations` forward and backward passes layer by layer with a synchronize after each
// layer (a layer's time is its own), zeroing the gradients after each, then `iterations`
// whole passes timed together. Warm up first (a pass of each): the first touches and
// library initialisation are not timed.
LayerTiming time_layers(Net& net, int iterations);

// The table: a header line, a line per layer (one that another absorbed, Layer::absorb,
// shows "(runs in NAME)" instead of times), then the totals and the whole iteration.
std::string layer_table(Net& net, const LayerTiming& timing);

}  // namespace lamina
