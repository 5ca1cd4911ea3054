#include "draw_net.hpp"

#include <graphviz/cgraph.h>
#include <google/protobuf/text_format.h>
#include <graphviz/gvc.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "lamina/backend_factory.hpp"
#include "lamina/common.hpp"
#include "lamina/io.hpp"
#include "lamina/net.hpp"
#include "lamina/net_state.hpp"

namespace lamina::draw {

Phase parse_phase(const std::string& text) {
  if (text == "TRAIN" || text == "train") return TRAIN;
  if (text == "TEST" || text == "test") return TEST;
  fail("--phase must be TRAIN or TEST; got '", text, "'");
}

std::string parse_rankdir(const std::string& text) {
  for (const char* dir : {"LR", "TB", "BT", "RL"})
    if (text == dir) return text;
  fail("--rankdir must be LR, TB, BT or RL (Graphviz's directions); got '", text, "'");
}

namespace {

// A layer as the graph shows it.
struct LayerNode {
  std::string name, type;
  std::vector<std::string> bottoms, tops;
  std::vector<std::string> settings;  // "kernel_size: 5", from its *_param
};

// A DOT string. Backslashes pass as they are: the labels' "\n" are Graphviz's line breaks.
std::string dot_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '\\';
    out += c;
  }
  return out + "\"";
}

// "num_output: 20", "kernel_size: 5", ... : the scalar fields the layer's *_param messages set
// (fillers and other nested messages left out; long strings shortened).
std::vector<std::string> settings_of(const LayerParameter& layer) {
  using google::protobuf::FieldDescriptor;
  std::vector<std::string> out;
  const auto* reflection = layer.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(layer, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->type() != FieldDescriptor::TYPE_MESSAGE || f->is_repeated()) continue;
    const std::string& name = f->name();
    if (name.size() < 7 || name.compare(name.size() - 6, 6, "_param") != 0) continue;
    const google::protobuf::Message& p = reflection->GetMessage(layer, f);
    std::vector<const FieldDescriptor*> set;
    p.GetReflection()->ListFields(p, &set);
    for (const FieldDescriptor* s : set) {
      if (s->type() == FieldDescriptor::TYPE_MESSAGE || s->name() == "engine") continue;
      std::string value;
      google::protobuf::TextFormat::PrintFieldValueToString(p, s, s->is_repeated() ? 0 : -1,
                                                            &value);
      if (s->is_repeated()) {
        for (int i = 1; i < p.GetReflection()->FieldSize(p, s); ++i) {
          std::string more;
          google::protobuf::TextFormat::PrintFieldValueToString(p, s, i, &more);
          value += "," + more;
        }
      }
      if (value.size() > 2 && value.front() == '"') value = value.substr(1, value.size() - 2);
      if (value.size() > 32) value = "..." + value.substr(value.size() - 29);
      out.push_back(s->name() + ": " + value);
    }
  }
  return out;
}

// Pastel fills by kind of layer (Caffe's draw_net colours them by type too).
const char* fill_of(const std::string& type) {
  if (type == "Convolution" || type == "Deconvolution") return "#f6b8b8";
  if (type == "Pooling") return "#fbd5a5";
  if (type == "InnerProduct" || type == "Linear") return "#d9c2f0";
  if (type.find("Data") != std::string::npos || type == "Input") return "#c9e8c0";
  if (type.find("Loss") != std::string::npos || type == "Accuracy") return "#f3eda0";
  return "#bcd6f5";
}

std::string graph_text(const std::string& name, const std::vector<LayerNode>& layers,
                       const std::map<std::string, std::string>& shapes,
                       const std::string& rankdir) {
  std::ostringstream dot;
  dot << "digraph " << dot_string(name.empty() ? "net" : name) << " {\n"
      << "  rankdir=" << rankdir << "; bgcolor=white;\n"
      << "  label=" << dot_string(name) << "; labelloc=t; fontsize=18;\n"
      << "  fontname=\"DejaVu Sans\";\n"
      << "  node [fontname=\"DejaVu Sans\", fontsize=11];\n"
      << "  edge [color=\"#555555\"];\n";
  std::map<std::string, int> version;  // blob name: how many nodes it has had
  auto blob_node = [&](const std::string& blob, bool write) {
    int& v = version[blob];
    if (write || v == 0) {
      ++v;
      std::string label = blob;
      if (const auto it = shapes.find(blob); it != shapes.end()) label += "\\n" + it->second;
      dot << "  " << dot_string("blob " + blob + " #" + std::to_string(v)) << " [shape=octagon, "
          << "style=filled, fillcolor=\"#eeeeee\", label=" << dot_string(label) << "];\n";
    }
    return dot_string("blob " + blob + " #" + std::to_string(v));
  };
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerNode& l = layers[i];
    const std::string id = dot_string("layer " + std::to_string(i) + " " + l.name);
    std::string label = l.name + "\\n(" + l.type + ")";
    for (const std::string& s : l.settings) label += "\\n" + s;
    dot << "  " << id << " [shape=box, style=\"rounded,filled\", fillcolor=\"" << fill_of(l.type)
        << "\", label=" << dot_string(label) << "];\n";
    for (const std::string& b : l.bottoms) {
      const std::string blob = blob_node(b, false);  // declared first, when new
      dot << "  " << blob << " -> " << id << ";\n";
    }
    for (const std::string& t : l.tops) {
      const std::string blob = blob_node(t, true);
      dot << "  " << id << " -> " << blob << ";\n";
    }
  }
  dot << "}\n";
  return dot.str();
}

}  // namespace

NetGraph net_graph(const std::string& path, const DrawOptions& options) {
  const NetParameter param = read_net_parameter(path);
  std::vector<LayerNode> layers;
  std::map<std::string, std::string> shapes;
  NetGraph graph;
  try {
    auto backend = make_backend("cpu");
    Net net(param, options.phase, *backend, 1, nullptr, path);
    for (int i = 0; i < net.num_layers(); ++i) {
      Layer& layer = net.layer(i);
      LayerNode node{layer.name(), layer.type(), {}, {}, settings_of(layer.param())};
      for (const Tensor* t : net.layer_bottoms(i)) node.bottoms.push_back(t->name());
      for (const Tensor* t : net.layer_tops(i)) {
        node.tops.push_back(t->name());
        shapes[t->name()] = t->shape_string();
      }
      layers.push_back(std::move(node));
    }
  } catch (const Error& e) {
    // Drawn from the file: the layers the phase keeps, their bottoms and tops as written.
    graph.shapes_note = e.what();
    layers.clear();
    shapes.clear();
    const NetState state = merged_state(options.phase, param.state(), nullptr);
    std::vector<LayerParameter> all;
    if (auto input = input_header_layer(param, path)) all.push_back(*input);
    for (const LayerParameter& l : param.layer()) all.push_back(l);
    for (const LayerParameter& l : all) {
      if (!layer_included(l, state, path + ": layer '" + l.name() + "': ")) continue;
      layers.push_back({l.name(), l.type(), {l.bottom().begin(), l.bottom().end()},
                        {l.top().begin(), l.top().end()}, settings_of(l)});
    }
  }
  graph.dot = graph_text(param.name(), layers, shapes, options.rankdir);
  return graph;
}

namespace {

// Graphviz's error messages of the current call (Graphviz reports through a global hook).
std::mutex g_graphviz_mutex;
std::string g_graphviz_errors;
int collect_graphviz_error(char* message) {
  g_graphviz_errors += message;
  return 0;
}

}  // namespace

void write_graph(const std::string& dot, const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".dot" || ext == ".gv") {
    std::ofstream out(path);
    out << dot;
    out.close();
    LAMINA_REQUIRE(out, "cannot write '", path, "': ", std::strerror(errno));
    return;
  }
  LAMINA_REQUIRE(ext == ".png" || ext == ".svg", "'", path, "': name the drawing *.png, *.svg "
                 "or *.dot (the extension chooses the format)");
  // Graphviz reports a file it cannot open without failing: find out first.
  LAMINA_REQUIRE(std::ofstream(path), "cannot write '", path, "': ", std::strerror(errno));
  std::lock_guard<std::mutex> lock(g_graphviz_mutex);
  g_graphviz_errors.clear();
  agseterrf(collect_graphviz_error);
  // One context for the process, never freed: Graphviz keeps static state (its text-size
  // cache) that a freed context leaves dangling, and a second context would read it.
  static GVC_t* const gvc = gvContext();
  std::unique_ptr<Agraph_t, int (*)(Agraph_t*)> g(agmemread(dot.c_str()), agclose);
  LAMINA_REQUIRE(g, "Graphviz could not read the net's graph: ", g_graphviz_errors);
  LAMINA_REQUIRE(gvLayout(gvc, g.get(), "dot") == 0, "Graphviz could not lay out the "
                 "net: ", g_graphviz_errors, " (is Graphviz's dot plugin installed? apt-get "
                 "install graphviz)");
  const int status = gvRenderFilename(gvc, g.get(), ext.c_str() + 1, path.c_str());
  gvFreeLayout(gvc, g.get());
  LAMINA_REQUIRE(status == 0, "Graphviz could not write '", path, "': ",
                 g_graphviz_errors.empty() ? std::string(std::strerror(errno)) : g_graphviz_errors,
                 " (its ", ext.substr(1), " renderer comes with apt-get install graphviz; --output "
                 "NAME.dot writes the graph as text)");
}

}  // namespace lamina::draw
