// Fuzz target: bytes -> a .caffemodel -> parse_caffemodel and load_caffe_weights into a small
// net, in each matching mode (exact, require-all, fine-tune).
//
// Every malformed file must end in a lamina::Error that leaves the net's weights as they
// were (caffe_weights.hpp); anything else is a bug. The net has the layers whose blobs Caffe
// orders in its own ways (Convolution, BatchNorm, Scale with its bias, shared PReLU) and a
// parameter two layers share. Seeds: LAMINA_FUZZ_WRITE_SEEDS=DIR writes the net's own model,
// in Caffe 1.0's form and in the V1 form with old 4-D blob shapes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_loading.hpp"
#include "fuzz_util.hpp"
#include "lamina/caffe_weights.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"

namespace lamina::fuzz {
namespace {

constexpr const char* kNet = R"(
name: "fuzz_caffemodel"
layer { name: "data" type: "Input" top: "x" top: "label"
        input_param { shape { dim: 2 dim: 1 dim: 3 dim: 3 } shape { dim: 2 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "conv"
        convolution_param { num_output: 2 kernel_size: 2 } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "sc" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "prelu" type: "PReLU" bottom: "conv" top: "conv"
        prelu_param { channel_shared: true } }
layer { name: "ip1" type: "InnerProduct" bottom: "conv" top: "ip1" param { name: "shared" }
        inner_product_param { num_output: 8 bias_term: false } }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" param { name: "shared" }
        inner_product_param { num_output: 8 bias_term: false } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" }
)";

struct Fixture {
  NativeBackend backend;
  std::unique_ptr<Net> net;
  std::vector<float> initial;  // the arena as filled
};

// The model in the V1 form: `layers` with Caffe's enum types and blobs as (n, c, h, w).
std::string v1_form(const NetParameter& model) {
  NetParameter v1;
  v1.set_name(model.name());
  for (const LayerParameter& layer : model.layer()) {
    V1LayerParameter& old = *v1.add_layers();
    old.set_name(layer.name());
    old.set_type(layer.type() == "Convolution" ? V1LayerParameter::CONVOLUTION
                                               : V1LayerParameter::INNER_PRODUCT);
    for (const BlobProto& blob : layer.blobs()) {
      BlobProto& b = *old.add_blobs();
      Shape shape = blob_shape(blob);
      while (shape.size() < 4) shape.insert(shape.begin(), 1);
      if (shape.size() > 4) continue;
      b.set_num(int(shape[0]));
      b.set_channels(int(shape[1]));
      b.set_height(int(shape[2]));
      b.set_width(int(shape[3]));
      *b.mutable_data() = blob.data();
    }
  }
  return v1.SerializeAsString();
}

Fixture& fixture() {
  static const std::unique_ptr<Fixture> f = [] {
    quiet_logging();
    auto fx = std::make_unique<Fixture>();
    fx->net = std::make_unique<Net>(parse_net_parameter(kNet, "fuzz_caffemodel"), TEST,
                                    fx->backend, 3);
    const float* w = fx->net->arena().data();
    fx->initial.assign(w, w + fx->net->arena().count());
    const NetParameter model = caffemodel_of(*fx->net);
    write_seed("seed.caffemodel", model.SerializeAsString());
    NetParameter with_params;  // conv and the shared InnerProduct only: the V1 types
    for (const LayerParameter& layer : model.layer())
      if (layer.name() == "conv" || layer.name() == "ip1" || layer.name() == "ip2")
        *with_params.add_layer() = layer;
    write_seed("seed-v1.caffemodel", v1_form(with_params));
    return fx;
  }();
  return *f;
}

void run(const uint8_t* data, size_t size) {
  Fixture& fx = fixture();
  Net& net = *fx.net;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  NetParameter model;
  try {
    model = parse_caffemodel(bytes, "fuzz");
    accepted("parse_caffemodel");
  } catch (const Error& e) {
    rejected("parse_caffemodel", e);
    return;
  }
  load_in_every_mode(net, "load_caffe_weights", fx.initial, [&](WeightsMatch match) {
    (void)load_caffe_weights(net, model, "fuzz", match);
  });
}

}  // namespace
}  // namespace lamina::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lamina::fuzz::run(data, size);
  return 0;
}
