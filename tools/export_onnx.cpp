// `lamina export_onnx --model DEPLOY --weights W --output net.onnx` (export_onnx.hpp).
#include "export_onnx.hpp"

#include <iostream>

#include "command_line.hpp"
#include "lamina/common.hpp"
#ifdef LAMINA_WITH_ONNX
#include "lamina/onnx_export.hpp"
#endif

CLI::App* add_export_onnx_command(CLI::App& app, ExportOnnxFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "export_onnx", "Write a deploy net with its trained weights as an ONNX model (opset 17) "
      "for ONNX Runtime and other runtimes (docs/onnx.md)");
  cmd->add_option("--model", flags.model, "Deploy net prototxt (its TEST phase): an Input "
                  "layer gives the graph's input shapes, the blobs no layer reads are its "
                  "outputs")
      ->required();
  cmd->add_option("--weights", flags.weights, "Trained weights: Lamina's (.lamina) or a Caffe "
                  "model (.caffemodel); every parameter of the net must be there")
      ->required()
      ->type_name("FILE");
  cmd->add_option("--output", flags.output, "The .onnx file to write")->required();
  return cmd;
}

int export_onnx_command(const ExportOnnxFlags& flags) {
#ifdef LAMINA_WITH_ONNX
  const lamina::OnnxModel model =
      lamina::export_onnx_file(flags.model, flags.weights, flags.output);
  std::cout << "Wrote " << flags.output << ": ONNX opset " << lamina::kOnnxOpset << ", "
            << model.nodes << " nodes, " << model.weights << " weights; inputs "
            << lamina::cli::join(model.inputs) << ", outputs "
            << lamina::cli::join(model.outputs) << "\n";
  return 0;
#else
  (void)flags;
  lamina::fail("this lamina was built without ONNX export: install Debian's libonnx-dev "
               "(apt-get install libonnx-dev) and configure again (cmake -DLAMINA_ONNX=ON)");
#endif
}
