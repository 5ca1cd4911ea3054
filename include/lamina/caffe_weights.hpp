// Caffe's trained weights: .caffemodel files (docs/snapshots.md, "Caffe models").
//
// A .caffemodel is Caffe's NetParameter in protobuf's binary form, each layer carrying its
// learned arrays in blobs (BlobProto: a shape, or the older num/channels/height/width; the
// values as floats in data, or doubles in double_data). Files from before Caffe 1.0 hold
// V1 layers (NetParameter.layers), upgraded on reading (upgrade_v1.hpp).
//
// A layer's blobs are its parameters in the order the layer declares them (add_param), which
// is Caffe's blob order: Convolution, Deconvolution, InnerProduct and Embed (weight, bias),
// BatchNorm (mean, variance, moving-average factor), Scale (scale, then the bias of
// bias_term; the bias alone when the scale is bottom 1), Bias, PReLU, Parameter.
//
// Loading follows Caffe's Net::CopyTrainedLayersFrom: the file's layers are matched to the
// net's by name (the k-th file layer of a name to the k-th net layer of it: with unique
// names, by name), a file layer the net does not have is skipped (logged), and a matched
// layer must have as many blobs as the net's layer has parameters, each of the parameter's
// shape, compared as Caffe's Blob::ShapeEquals does: exactly, except that a blob in the old
// num/channels/height/width form is the parameter's shape padded with 1s in front ((1, 1,
// N, K) is the net's (N, K)), and PReLU's shared () is (1). Everything is checked
// before the net's weights change: an error leaves them untouched. Errors name the file.
#pragma once

#include <string>
#include <vector>

#include "lamina/blob_proto.hpp"
#include "lamina/net.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

// Whether weights at path are read as Lamina's: the file begins with "LAMINA" (the weights'
// magic "LAMINAW\0", or a solver state's, which the weights reader refuses by name), or is
// named *.lamina (a damaged one is then reported by Lamina's reader: bad magic). Anything
// else given as weights is read as a .caffemodel, whatever its name.
bool weights_file_is_lamina(const std::string& path);

// Parses bytes read from source (a path, for messages) as a .caffemodel, upgrading V1
// layers, and checks every blob (dimensions, and as many values as its shape holds).
// Throws lamina::Error naming source: not protobuf, truncated, no layers, a bad blob.
NetParameter parse_caffemodel(const std::string& bytes, const std::string& source);
NetParameter read_caffemodel(const std::string& path);

// Whether a file's blob fits a parameter's shape (see above).
bool caffe_shapes_match(const Shape& param, const BlobProto& blob);

// Each layer's parameters (net.layer(i).params()) as the arena's entries, in blob order.
std::vector<std::vector<const ParamInfo*>> layer_params(Net& net);

// Caffe's checks of one layer's blobs against its parameters (params, in blob order): as
// many blobs as parameters, each holding as many values as its shape says, of its
// parameter's shape (caffe_shapes_match). Errors start with where ("Caffe model 'x.caffemodel':
// layer 'ip' (InnerProduct): "), say where the blobs are (holder: "file", "net file") and
// both shapes, and end a wrong shape's message with hint.
void check_layer_blobs(const LayerParameter& layer, const std::vector<const ParamInfo*>& params,
                       const std::string& where, const std::string& holder,
                       const std::string& hint = {});

// Loads model's blobs (read from path) into net's weights. match: kFineTune as Caffe (the
// net's layers the file lacks keep their fillers); kRequireAll: every layer of the net with
// parameters must be in the file; kExact: and every file layer with blobs must be in the
// net. A file none of whose layers is a layer of the net with parameters is an Error
// ("written for another net") unless allow_unmatched. report: loaded and kept_filler list
// parameter names, ignored the file's layers the net does not have.
WeightsLoadReport load_caffe_weights(Net& net, const NetParameter& model,
                                     const std::string& path, WeightsMatch match,
                                     bool allow_unmatched = false);
WeightsLoadReport load_caffe_weights(Net& net, const std::string& path, WeightsMatch match,
                                     bool allow_unmatched = false);

// The net's weights as Caffe 1.0 writes a .caffemodel (Net::ToProto): the net's name and
// every layer (its parameter, bottoms and tops) with its parameters as blobs, shaped as
// Caffe's layers shape them, values as floats.
NetParameter caffemodel_of(Net& net);
// Writes caffemodel_of(net) to path atomically (write_file_atomically).
void save_caffemodel(Net& net, const std::string& path);

}  // namespace lamina
