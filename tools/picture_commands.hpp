// `lamina plot` and `lamina draw_net` (docs/seeing_training.md): their options on the
// command line, and running them.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "plot.hpp"

namespace lamina::cli {

struct PictureCommands {
  CLI::App* plot = nullptr;
  plot::PlotOptions plot_options;
  std::string plot_output, plot_x = "iteration", plot_size;
  CLI::App* draw_net = nullptr;
  std::string net_path, net_output, net_phase = "TRAIN", net_rankdir = "LR";
};

// Adds both subcommands to `app`, their values going to `commands`.
void add_picture_commands(CLI::App& app, PictureCommands& commands);

// Runs the subcommand given, if one of these: its exit status.
std::optional<int> run_picture_command(const PictureCommands& commands);

}  // namespace lamina::cli
