// Reading .caffemodel files and loading their blobs into a net's parameter arena
// (caffe_weights.hpp). Writing them is caffe_model_writer.cpp.
#include "lamina/caffe_weights.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "lamina/file_access.hpp"
#include "lamina/host_memory.hpp"
#include "lamina/upgrade_v1.hpp"

namespace lamina {
namespace {

// The start of both snapshot magics ("LAMINAW\0", "LAMINAS\0"; snapshot.hpp).
constexpr char kLaminaMagic[6] = {'L', 'A', 'M', 'I', 'N', 'A'};

std::string prefix_of(const std::string& path) { return "Caffe model '" + path + "': "; }

// "'conv1', 'conv2' and 3 more" (the first `limit` names).
std::string name_list(const std::vector<std::string>& names, size_t limit = 6) {
  if (names.empty()) return "none";
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > limit) out += " and " + std::to_string(names.size() - limit) + " more";
  return out;
}

// Checks a blob's dimensions and that it holds as many values as they say.
void check_blob(const BlobProto& blob, const std::string& where) {
  const Shape shape = blob_shape(blob);
  for (int64_t d : shape)
    LAMINA_REQUIRE(d >= 0, where, "has shape ", shape_string(shape), ": a negative dimension");
  int64_t count = 0;
  try {
    count = shape_count(shape);
  } catch (const Error& e) {
    fail(where, e.what());
  }
  const int64_t values = blob_value_count(blob);
  LAMINA_REQUIRE(values == count, where, "has shape ", shape_string(shape), " (", count,
                 " values) but holds ", values, " values");
}

// The shapes of a layer's parameters: "weight (20, 1, 5, 5), bias (20)".
std::string param_shapes(const std::vector<const ParamInfo*>& params) {
  std::string out;
  for (const ParamInfo* info : params)
    out += (out.empty() ? "" : ", ") + ("'" + info->name + "' " + shape_string(info->shape));
  return out.empty() ? "none" : out;
}

std::string blob_shapes(const LayerParameter& layer) {
  std::string out;
  for (const BlobProto& blob : layer.blobs())
    out += (out.empty() ? "" : ", ") + shape_string(blob_shape(blob));
  return out.empty() ? "none" : out;
}

}  // namespace

bool weights_file_is_lamina(const std::string& path) {
  InputFile file(path, "weights file");
  char head[sizeof(kLaminaMagic)] = {};
  return (file.read(head, sizeof(head)) == sizeof(head) &&
          std::memcmp(head, kLaminaMagic, sizeof(head)) == 0) ||
         std::filesystem::path(path).extension() == ".lamina";
}

bool caffe_shapes_match(const Shape& param, const BlobProto& blob) {
  const Shape shape = blob_shape(blob);
  // Caffe's 4-D form counts axes from the end: (1, 1, N, K) is (N, K).
  if (has_legacy_shape(blob)) {
    if (param.size() > 4) return false;
    Shape padded(4 - param.size(), 1);
    padded.insert(padded.end(), param.begin(), param.end());
    return padded == shape;
  }
  return shape == param || (shape.empty() && param == Shape{1});  // PReLU's shared ()
}

std::vector<std::vector<const ParamInfo*>> layer_params(Net& net) {
  const ParamArena& arena = net.arena();
  std::map<int64_t, const ParamInfo*> by_offset;
  for (const ParamInfo& info : arena.table()) by_offset[info.offset] = &info;
  std::vector<std::vector<const ParamInfo*>> params(net.num_layers());
  for (int i = 0; i < net.num_layers(); ++i)
    for (const Param& p : net.layer(i).params())
      params[i].push_back(by_offset.at(p.tensor->data() - arena.data()));
  return params;
}

void check_layer_blobs(const LayerParameter& layer, const std::vector<const ParamInfo*>& params,
                       const std::string& where, const std::string& holder,
                       const std::string& hint) {
  LAMINA_REQUIRE(layer.blobs_size() == int(params.size()), where, "the ", holder, " has ",
                 layer.blobs_size(), " blob(s) (", blob_shapes(layer), ") but the net's "
                 "layer has ", params.size(), " parameter(s) (", param_shapes(params), ")");
  for (int j = 0; j < layer.blobs_size(); ++j) {
    const BlobProto& blob = layer.blobs(j);
    check_blob(blob, where + "blob " + std::to_string(j) + " ");
    LAMINA_REQUIRE(caffe_shapes_match(params[j]->shape, blob), where, "blob ", j,
                   " has shape ", shape_string(blob_shape(blob)), " in the ", holder,
                   " but its parameter '", params[j]->name, "' has shape ",
                   shape_string(params[j]->shape), " in the net", hint);
  }
}

NetParameter parse_caffemodel(const std::string& bytes, const std::string& source) {
  namespace io = google::protobuf::io;
  const std::string what = prefix_of(source);
  LAMINA_REQUIRE(bytes.size() <= size_t(INT_MAX), what, "is ", readable_bytes(bytes.size()),
                 "; protobuf reads at most 2 GiB in one message");
  NetParameter model;
  io::ArrayInputStream raw(bytes.data(), int(bytes.size()));
  io::CodedInputStream in(&raw);
  in.SetTotalBytesLimit(INT_MAX);  // VGG's 550 MB and the like; protobuf's default is 64 MB
  if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    fail(what, "does not parse as a Caffe model (a NetParameter in protobuf's binary form, "
         "as Caffe writes .caffemodel files): it is truncated or damaged, or neither a Caffe "
         "model nor Lamina's weights (which begin with \"LAMINAW\") (", bytes.size(),
         " bytes)");
  model = upgrade_v1_net(std::move(model), source);
  LAMINA_REQUIRE(model.layer_size() > 0, what, "holds no layers (", bytes.size(),
                 " bytes); it is not a trained Caffe model");
  for (const LayerParameter& layer : model.layer())
    for (int k = 0; k < layer.blobs_size(); ++k)
      check_blob(layer.blobs(k), what + "layer '" + layer.name() + "': blob " +
                                     std::to_string(k) + " ");
  return model;
}

NetParameter read_caffemodel(const std::string& path) {
  InputFile file(path, "Caffe model");
  // The bytes, then the message parsed from them: about twice the file.
  require_host_memory(2 * uint64_t(file.size()),
                      "the Caffe model '" + path + "' (" + readable_bytes(file.size()) + ")");
  return parse_caffemodel(file.read_all(file.size()), path);
}

WeightsLoadReport load_caffe_weights(Net& net, const NetParameter& model,
                                     const std::string& path, WeightsMatch match,
                                     bool allow_unmatched) {
  const std::string what = prefix_of(path);
  ParamArena& arena = net.arena();
  // The net's layers by name, in order, each with its parameters in blob order.
  std::map<std::string, std::vector<int>> by_name;
  const std::vector<std::vector<const ParamInfo*>> params = layer_params(net);
  std::vector<std::string> with_params;
  for (int i = 0; i < net.num_layers(); ++i) {
    by_name[net.layer(i).name()].push_back(i);
    if (!params[i].empty()) with_params.push_back(net.layer(i).name());
  }

  WeightsLoadReport report;
  std::vector<float> values = arena.to_host(arena.data());
  std::set<const ParamInfo*> loaded;
  std::map<std::string, size_t> seen;
  std::vector<std::string> file_layers;
  bool common = false;
  for (const LayerParameter& source : model.layer()) {
    file_layers.push_back(source.name());
    const size_t k = seen[source.name()]++;
    const auto found = by_name.find(source.name());
    if (found == by_name.end() || k >= found->second.size()) {
      LAMINA_REQUIRE(match != WeightsMatch::kExact || source.blobs_size() == 0, what,
                     "has layer '", source.name(), "' with ", source.blobs_size(), " blob(s), "
                     "which the net does not have; the file was written for a different net");
      report.ignored.push_back(source.name());
      continue;
    }
    const int i = found->second[k];
    const Layer& layer = net.layer(i);
    const std::string where = what + "layer '" + layer.name() + "' (" + layer.type() + "): ";
    common = common || !params[i].empty();
    check_layer_blobs(source, params[i], where, "file", match == WeightsMatch::kFineTune
                          ? "; rename the layer in the net to train it from its filler instead"
                          : "");
    for (int j = 0; j < source.blobs_size(); ++j) {
      const ParamInfo& info = *params[i][j];
      copy_blob_values(source.blobs(j), values.data() + info.offset);
      if (loaded.insert(&info).second) report.loaded.push_back(info.name);
    }
  }
  LAMINA_REQUIRE(common || with_params.empty() || allow_unmatched, what, "none of its ",
                 file_layers.size(), " layers (", name_list(file_layers), ") is a layer of "
                 "the net with parameters (", name_list(with_params), "); layers are matched "
                 "by name: the file was written for another net");
  for (const ParamInfo& info : arena.table()) {
    if (loaded.count(&info)) continue;
    LAMINA_REQUIRE(match == WeightsMatch::kFineTune, what, "has no blobs for layer '",
                   info.layer, "' (parameter '", info.name, "' ", shape_string(info.shape),
                   "); the file was written for a different net");
    report.kept_filler.push_back(info.name);
  }
  arena.from_host(values, arena.data());
  return report;
}

WeightsLoadReport load_caffe_weights(Net& net, const std::string& path, WeightsMatch match,
                                     bool allow_unmatched) {
  return load_caffe_weights(net, read_caffemodel(path), path, match, allow_unmatched);
}

}  // namespace lamina
