// `lamina export_onnx`: a deploy net with trained weights written as an ONNX model
// (docs/onnx.md). Built with ONNX (LAMINA_ONNX); without it the command says how to get it.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

struct ExportOnnxFlags {
  std::string model, weights, output;
};

// Adds the subcommand and its flags to app.
CLI::App* add_export_onnx_command(CLI::App& app, ExportOnnxFlags& flags);

// Runs it; a user mistake is a lamina::Error.
int export_onnx_command(const ExportOnnxFlags& flags);
