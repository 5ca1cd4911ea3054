// Caffe's V1 net syntax (`layers { type: CONVOLUTION blobs_lr: 1 ... }`, before Caffe 1.0's
// `layer`), upgraded to LayerParameter as Caffe's UpgradeV1Net does: the type enum becomes
// its type string, blobs_lr and weight_decay become param { lr_mult decay_mult }, the
// parameter names (param) and blob_share_mode become param { name share_mode }, and
// include/exclude, blobs, loss_weight, transform_param and every *_param move over. The
// data layers' older transform fields (data_param.scale, mean_file, crop_size, mirror, and
// the same in image_data_param and window_data_param) move into transform_param first, as
// Caffe's UpgradeNetDataTransformation does for V1 nets.
#pragma once

#include <string>

#include "lamina/lamina.pb.h"

namespace lamina {

// Caffe's type string for a V1 type ("Convolution" for CONVOLUTION; "" for NONE).
const char* v1_layer_type(V1LayerParameter::LayerType type);
// data_param's older transform fields (scale, mean_file, crop_size, mirror), each one given
// set in `to` over transform_param's own, and force_encoded_color as force_color: the Data
// layer reads them so in any net; the same for image_data_param's and the ImageData layer.
void copy_data_transform_fields(const DataParameter& from, TransformationParameter& to);
void copy_data_transform_fields(const ImageDataParameter& from, TransformationParameter& to);
// One V1 layer as a LayerParameter; its blobs are moved over, not copied.
LayerParameter upgrade_v1_layer(V1LayerParameter v1);
// The net with its `layers` upgraded into `layer` (everything else as it was), logging one
// line that names source. A net that has both `layer` and `layers` is an Error naming
// source (Caffe refuses to upgrade it too). A net without `layers` comes back unchanged.
// Taken by value: `net = upgrade_v1_net(std::move(net), source)` moves every blob instead of
// copying it.
NetParameter upgrade_v1_net(NetParameter net, const std::string& source);

}  // namespace lamina
