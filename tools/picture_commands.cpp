#include "picture_commands.hpp"

#include <iostream>

#include "draw_net.hpp"

namespace lamina::cli {

void add_picture_commands(CLI::App& app, PictureCommands& c) {
  c.plot = app.add_subcommand("plot", "Draw the training loss, test loss and test accuracy of "
                              "metrics files (lamina train --metrics) as a PNG or SVG, several "
                              "runs overlaid");
  c.plot->add_option("FILES", c.plot_options.files, "Metrics files (.csv or .jsonl), one run "
                     "each")
      ->required();
  c.plot->add_option("--output,-o", c.plot_output, "The picture: *.png or *.svg")->required();
  c.plot->add_option("--x", c.plot_x, "The horizontal axis: iteration (the default), epoch or "
                     "time (training time)");
  c.plot->add_flag("--log-loss", c.plot_options.log_loss, "Draw the loss in log scale");
  c.plot->add_option("--labels", c.plot_options.labels, "The runs' names in the legend, one per "
                     "file (a,b or repeated; default: the files' names)")
      ->delimiter(',');
  c.plot->add_option("--size", c.plot_size, "WIDTHxHEIGHT in pixels (default 1200x480)");
  c.plot->add_option("--title", c.plot_options.title, "A title above the plots");

  c.draw_net = app.add_subcommand("draw_net", "Draw a net prototxt's layers and blobs, with "
                                  "their types, settings and shapes, through Graphviz (as "
                                  "Caffe's draw_net.py)");
  c.draw_net->add_option("NET", c.net_path, "Net prototxt")->required();
  c.draw_net->add_option("--output,-o", c.net_output, "The drawing: *.png, *.svg, or *.dot "
                         "(Graphviz's text)")
      ->required();
  c.draw_net->add_option("--phase", c.net_phase, "The net's phase: TRAIN (the default) or TEST");
  c.draw_net->add_option("--rankdir", c.net_rankdir, "Direction of the graph: LR (the default, "
                         "left to right), TB, BT or RL");
}

std::optional<int> run_picture_command(const PictureCommands& c) {
  if (*c.plot) {
    plot::PlotOptions options = c.plot_options;
    options.x = plot::parse_x_axis(c.plot_x);
    if (!c.plot_size.empty()) plot::parse_size(c.plot_size, options.width, options.height);
    plot::plot_metrics(options).write(c.plot_output);
    std::cout << "wrote " << c.plot_output << " (" << options.width << "x" << options.height
              << ")\n";
    return 0;
  }
  if (*c.draw_net) {
    draw::DrawOptions options;
    options.phase = draw::parse_phase(c.net_phase);
    options.rankdir = draw::parse_rankdir(c.net_rankdir);
    const draw::NetGraph graph = draw::net_graph(c.net_path, options);
    if (!graph.shapes_note.empty())
      std::cerr << "lamina draw_net: drawn without blob shapes: the net could not be built ("
                << graph.shapes_note << ")\n";
    draw::write_graph(graph.dot, c.net_output);
    std::cout << "wrote " << c.net_output << "\n";
    return 0;
  }
  return std::nullopt;
}

}  // namespace lamina::cli
