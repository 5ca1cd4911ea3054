// `lamina draw_net`: a net prototxt drawn as Caffe's draw_net.py drew it, through Graphviz:
// each layer a box (its name, type and the fields its *_param sets: kernel, stride, outputs),
// each blob an octagon (its name and shape), edges from bottoms to layers to tops. A layer
// that works in place writes a new node of its blob, so the graph has no loops.
//
// Shapes come from building the net on the CPU (which reads its data sources: run it where
// the data is, as for training); a net that cannot be built is drawn from its prototxt's
// bottoms and tops alone, without shapes, and the reason is returned.
#pragma once

#include <string>

#include "lamina/lamina.pb.h"

namespace lamina::draw {

struct DrawOptions {
  Phase phase = TRAIN;
  std::string rankdir = "LR";  // Graphviz's: LR (left to right, Caffe's), TB, BT, RL
};

// "TRAIN"/"train" or "TEST"/"test"; anything else is an Error naming --phase. The same for
// --rankdir's four directions.
Phase parse_phase(const std::string& text);
std::string parse_rankdir(const std::string& text);

struct NetGraph {
  std::string dot;          // the graph in Graphviz's language
  std::string shapes_note;  // why the blobs have no shapes; empty when they have
};

// The graph of the net in `path` in options.phase.
NetGraph net_graph(const std::string& path, const DrawOptions& options);

// Writes `dot` to `path`: the DOT text itself for *.dot (or *.gv), else laid out by Graphviz's
// dot and rendered as *.png or *.svg. Errors name the path and what Graphviz said.
void write_graph(const std::string& dot, const std::string& path);

}  // namespace lamina::draw
