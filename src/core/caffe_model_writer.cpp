// A net's weights as a Caffe 1.0 .caffemodel (caffe_weights.hpp): what Caffe's Net::ToProto
// writes, each layer's LayerParameter with its parameters as blobs, in Caffe's shapes.
#include <climits>

#include "lamina/caffe_weights.hpp"
#include "lamina/host_memory.hpp"

namespace lamina {
namespace {

// The shape Caffe's layer gives the parameter: Lamina's, except PReLU's shared slope,
// which Caffe keeps as a blob of no axes (one value) where Lamina has (1).
Shape caffe_shape(const Layer& layer, const Shape& shape) {
  if (layer.type() == "PReLU" && layer.param().prelu_param().channel_shared()) return {};
  return shape;
}

void set_blob(BlobProto& blob, const Shape& shape, const float* values, int64_t count) {
  for (int64_t d : shape) blob.mutable_shape()->add_dim(d);
  blob.mutable_data()->Add(values, values + count);
}

}  // namespace

NetParameter caffemodel_of(Net& net) {
  NetParameter model;
  model.set_name(net.name());
  const ParamArena& arena = net.arena();
  const std::vector<float> weights = arena.to_host(arena.data());
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer& layer = net.layer(i);
    LayerParameter& out = *model.add_layer();
    out = layer.param();
    out.clear_blobs();
    out.clear_bottom();
    out.clear_top();
    out.set_phase(net.phase());
    // The blobs as the net connected them (a chained layer's param names none).
    for (const Tensor* t : net.layer_bottoms(i)) out.add_bottom(t->name());
    for (const Tensor* t : net.layer_tops(i)) out.add_top(t->name());
    for (const Param& p : layer.params()) {
      const Tensor& t = *p.tensor;
      set_blob(*out.add_blobs(), caffe_shape(layer, t.shape()),
               weights.data() + (t.data() - arena.data()), t.count());
    }
  }
  return model;
}

void save_caffemodel(Net& net, const std::string& path) {
  const NetParameter model = caffemodel_of(net);
  const size_t bytes = model.ByteSizeLong();
  LAMINA_REQUIRE(bytes <= size_t(INT_MAX), "Caffe model '", path, "': the net's weights take ",
                 readable_bytes(bytes), "; protobuf writes at most 2 GiB in one message, so "
                 "Caffe cannot read it (keep Lamina's weights format)");
  std::string out;
  LAMINA_REQUIRE(model.SerializeToString(&out), "Caffe model '", path, "': the net '",
                 net.name(), "' could not be serialised");
  write_file_atomically(path, out);
}

}  // namespace lamina
