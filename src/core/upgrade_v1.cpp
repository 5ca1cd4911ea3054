// Caffe's V1 layers upgraded to LayerParameter (upgrade_v1.hpp says what moves where).
#include "lamina/upgrade_v1.hpp"

#include <glog/logging.h>

#include <utility>
#include <vector>

#include "lamina/common.hpp"

namespace lamina {
namespace {

namespace pb = google::protobuf;

// The V1 layer's param block k, adding empty ones up to it (Caffe's V1 lists are per blob).
ParamSpec& spec(LayerParameter& layer, int k) {
  while (layer.param_size() <= k) layer.add_param();
  return *layer.mutable_param(k);
}

// Data layers of V1 nets kept their transforms in their own message (scale, mean_file,
// crop_size, mirror); Caffe moves them into transform_param.
template <class DataMessage>
void copy_transform_fields(const DataMessage& from, TransformationParameter& to) {
  if (from.has_scale()) to.set_scale(from.scale());
  if (from.has_mean_file()) to.set_mean_file(from.mean_file());
  if (from.has_crop_size()) to.set_crop_size(from.crop_size());
  if (from.has_mirror()) to.set_mirror(from.mirror());
}

template <class DataMessage>
void move_transform_fields(DataMessage& from, TransformationParameter& to) {
  copy_transform_fields(from, to);
  from.clear_scale();
  from.clear_mean_file();
  from.clear_crop_size();
  from.clear_mirror();
}

}  // namespace

void copy_data_transform_fields(const DataParameter& from, TransformationParameter& to) {
  copy_transform_fields(from, to);
  // Caffe's older way to decode encoded records in colour.
  if (from.force_encoded_color()) to.set_force_color(true);
}

void copy_data_transform_fields(const ImageDataParameter& from, TransformationParameter& to) {
  copy_transform_fields(from, to);
}

const char* v1_layer_type(V1LayerParameter::LayerType type) {
  switch (type) {
    case V1LayerParameter::NONE: return "";
    case V1LayerParameter::ABSVAL: return "AbsVal";
    case V1LayerParameter::ACCURACY: return "Accuracy";
    case V1LayerParameter::ARGMAX: return "ArgMax";
    case V1LayerParameter::BNLL: return "BNLL";
    case V1LayerParameter::CONCAT: return "Concat";
    case V1LayerParameter::CONTRASTIVE_LOSS: return "ContrastiveLoss";
    case V1LayerParameter::CONVOLUTION: return "Convolution";
    case V1LayerParameter::DATA: return "Data";
    case V1LayerParameter::DECONVOLUTION: return "Deconvolution";
    case V1LayerParameter::DROPOUT: return "Dropout";
    case V1LayerParameter::DUMMY_DATA: return "DummyData";
    case V1LayerParameter::EUCLIDEAN_LOSS: return "EuclideanLoss";
    case V1LayerParameter::ELTWISE: return "Eltwise";
    case V1LayerParameter::EXP: return "Exp";
    case V1LayerParameter::FLATTEN: return "Flatten";
    case V1LayerParameter::HDF5_DATA: return "HDF5Data";
    case V1LayerParameter::HDF5_OUTPUT: return "HDF5Output";
    case V1LayerParameter::HINGE_LOSS: return "HingeLoss";
    case V1LayerParameter::IM2COL: return "Im2col";
    case V1LayerParameter::IMAGE_DATA: return "ImageData";
    case V1LayerParameter::INFOGAIN_LOSS: return "InfogainLoss";
    case V1LayerParameter::INNER_PRODUCT: return "InnerProduct";
    case V1LayerParameter::LRN: return "LRN";
    case V1LayerParameter::MEMORY_DATA: return "MemoryData";
    case V1LayerParameter::MULTINOMIAL_LOGISTIC_LOSS: return "MultinomialLogisticLoss";
    case V1LayerParameter::MVN: return "MVN";
    case V1LayerParameter::POOLING: return "Pooling";
    case V1LayerParameter::POWER: return "Power";
    case V1LayerParameter::RELU: return "ReLU";
    case V1LayerParameter::SIGMOID: return "Sigmoid";
    case V1LayerParameter::SIGMOID_CROSS_ENTROPY_LOSS: return "SigmoidCrossEntropyLoss";
    case V1LayerParameter::SILENCE: return "Silence";
    case V1LayerParameter::SOFTMAX: return "Softmax";
    case V1LayerParameter::SOFTMAX_LOSS: return "SoftmaxWithLoss";
    case V1LayerParameter::SPLIT: return "Split";
    case V1LayerParameter::SLICE: return "Slice";
    case V1LayerParameter::TANH: return "TanH";
    case V1LayerParameter::WINDOW_DATA: return "WindowData";
    case V1LayerParameter::THRESHOLD: return "Threshold";
  }
  return "";  // not reached: the parser accepts only the enum's values
}

LayerParameter upgrade_v1_layer(V1LayerParameter v1) {
  LayerParameter layer;
  if (v1.has_name()) layer.set_name(v1.name());
  if (v1.has_type()) layer.set_type(v1_layer_type(v1.type()));
  *layer.mutable_bottom() = v1.bottom();
  *layer.mutable_top() = v1.top();
  *layer.mutable_include() = v1.include();
  *layer.mutable_exclude() = v1.exclude();
  layer.mutable_blobs()->Swap(v1.mutable_blobs());  // moved: a .caffemodel's weights
  *layer.mutable_loss_weight() = v1.loss_weight();
  for (int k = 0; k < v1.param_size(); ++k) spec(layer, k).set_name(v1.param(k));
  for (int k = 0; k < v1.blob_share_mode_size(); ++k)
    spec(layer, k).set_share_mode(v1.blob_share_mode(k) == V1LayerParameter::PERMISSIVE
                                      ? ParamSpec::PERMISSIVE
                                      : ParamSpec::STRICT);
  for (int k = 0; k < v1.blobs_lr_size(); ++k) spec(layer, k).set_lr_mult(v1.blobs_lr(k));
  for (int k = 0; k < v1.weight_decay_size(); ++k)
    spec(layer, k).set_decay_mult(v1.weight_decay(k));
  // Every *_param message (transform_param and loss_param included) has the same name and
  // type in LayerParameter.
  std::vector<const pb::FieldDescriptor*> fields;
  v1.GetReflection()->ListFields(v1, &fields);
  for (const pb::FieldDescriptor* field : fields) {
    const std::string& name = field->name();
    if (name.size() < 6 || name.compare(name.size() - 6, 6, "_param") != 0) continue;
    const pb::FieldDescriptor* target = LayerParameter::descriptor()->FindFieldByName(name);
    CHECK(target && target->message_type() == field->message_type())
        << "LayerParameter has no " << name << " of V1LayerParameter's type";
    layer.GetReflection()
        ->MutableMessage(&layer, target)
        ->CopyFrom(v1.GetReflection()->GetMessage(v1, field));
  }
  TransformationParameter transform = layer.transform_param();
  if (v1.type() == V1LayerParameter::DATA && layer.has_data_param())
    move_transform_fields(*layer.mutable_data_param(), transform);
  if (v1.type() == V1LayerParameter::IMAGE_DATA && layer.has_image_data_param())
    move_transform_fields(*layer.mutable_image_data_param(), transform);
  if (v1.type() == V1LayerParameter::WINDOW_DATA && layer.has_window_data_param())
    move_transform_fields(*layer.mutable_window_data_param(), transform);
  if (transform.ByteSizeLong() > 0) *layer.mutable_transform_param() = transform;
  return layer;
}

NetParameter upgrade_v1_net(NetParameter net, const std::string& source) {
  if (net.layers_size() == 0) return net;
  const std::string where = source.empty() ? std::string("net") : source;
  LAMINA_REQUIRE(net.layer_size() == 0, where, ": the net '", net.name(), "' has both `layer` "
                 "(", net.layer_size(), ") and Caffe's V1 `layers` (", net.layers_size(),
                 "); write every layer in one syntax (Caffe's upgrade_net_proto_text turns "
                 "`layers` into `layer`)");
  pb::RepeatedPtrField<V1LayerParameter> v1_layers;
  v1_layers.Swap(net.mutable_layers());
  for (V1LayerParameter& v1 : v1_layers) *net.add_layer() = upgrade_v1_layer(std::move(v1));
  LOG(INFO) << where << ": upgraded the net '" << net.name() << "' from Caffe's V1 syntax ("
            << v1_layers.size() << " `layers` to `layer`)";
  return net;
}

}  // namespace lamina
