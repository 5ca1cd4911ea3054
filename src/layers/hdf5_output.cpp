// HDF5Output (Caffe's): writes its two bottoms to an HDF5 file.
//
//   layer { name: "out" type: "HDF5Output" bottom: "data" bottom: "label"
//           hdf5_output_param { file_name: "features.h5" } }
//
// The file is created (an existing one emptied) at setup. Every forward pass writes the
// bottoms as the float datasets "data" and "label", each with Caffe's four axes (num,
// channels, height, width: a bottom of fewer axes padded with 1s, as Caffe's Blob::num() ...
// read it; more than four is an error), replacing what the previous pass wrote: the file
// holds the last batch. (Caffe 1.0 writes with H5LTmake_dataset, which refuses a name that
// exists, so its second forward pass fails; Lamina replaces the datasets instead.) The two
// bottoms need the same first axis. No gradient flows back to them.
//
// The values are read back to the host to be written, every pass: the layer's passes are
// not captured as a CUDA graph (capture_blocker).
#include <optional>

#include "core/hdf5_file.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class Hdf5OutputLayer final : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override {
    return {"hdf5_output_param"};
  }
  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  int min_tops() const override { return 0; }
  int max_tops() const override { return 0; }
  bool accepts_gradient(int /*bottom_index*/) const override { return false; }

  void setup(const Tensors& bottom, const Tensors& /*top*/) override {
    const std::string& file = param_.hdf5_output_param().file_name();
    LAMINA_REQUIRE(!file.empty(), where(), "hdf5_output_param.file_name must name the .h5 "
                   "file to write");
    const char* roles[2] = {"data", "label"};
    for (int i = 0; i < 2; ++i) {
      LAMINA_REQUIRE(bottom[i]->num_axes() >= 1 && bottom[i]->num_axes() <= 4, where(),
                     "the ", roles[i], " bottom has shape ", bottom[i]->shape_string(),
                     "; HDF5Output writes Caffe's (num, channels, height, width): 1 to 4 axes");
    }
    LAMINA_REQUIRE(bottom[0]->dim(0) == bottom[1]->dim(0), where(), "data ",
                   bottom[0]->shape_string(), " and label ", bottom[1]->shape_string(),
                   " need the same first axis (the batch)");
    writer_ = Hdf5Writer(where(), file);
  }

  void forward(const Tensors& bottom, const Tensors& /*top*/) override {
    writer_.write("data", four_axes(bottom[0]->shape()), bottom[0]->copy_data_to_host().data());
    writer_.write("label", four_axes(bottom[1]->shape()), bottom[1]->copy_data_to_host().data());
  }

  void backward_input(const Tensors& /*top*/, const std::vector<bool>& /*propagate*/,
                      const Tensors& /*bottom*/) override {}

  std::optional<std::string> capture_blocker() const override {
    return std::string("HDF5Output copies its bottoms to the host and writes them to '") +
           param_.hdf5_output_param().file_name() + "' every pass";
  }

 private:
  // Caffe's legacy (num, channels, height, width): the shape padded with 1s to four axes.
  static Shape four_axes(Shape shape) {
    shape.resize(4, 1);
    return shape;
  }

  Hdf5Writer writer_;
};

}  // namespace

void register_hdf5_output_layer() { register_layer<Hdf5OutputLayer>("HDF5Output"); }

}  // namespace lamina
