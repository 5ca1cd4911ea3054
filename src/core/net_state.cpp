// NetState rules, the input header and engine hints (net_state.hpp).
#include "lamina/net_state.hpp"

#include <algorithm>

#include "lamina/common.hpp"
#include "lamina/solver_config.hpp"

namespace lamina {
namespace {

namespace pb = google::protobuf;

bool has_stage(const NetState& state, const std::string& stage) {
  return std::find(state.stage().begin(), state.stage().end(), stage) != state.stage().end();
}

std::string quoted_list(const pb::RepeatedPtrField<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

}  // namespace

bool state_meets_rule(const NetState& state, const NetStateRule& rule) {
  if (rule.has_phase() && rule.phase() != state.phase()) return false;
  if (rule.has_min_level() && state.level() < rule.min_level()) return false;
  if (rule.has_max_level() && state.level() > rule.max_level()) return false;
  for (const std::string& stage : rule.stage())
    if (!has_stage(state, stage)) return false;
  for (const std::string& stage : rule.not_stage())
    if (has_stage(state, stage)) return false;
  return true;
}

bool layer_included(const LayerParameter& layer, const NetState& state,
                    const std::string& where) {
  LAMINA_REQUIRE(layer.include_size() == 0 || layer.exclude_size() == 0, where,
                 "the layer has both include and exclude rules; give either include rules "
                 "(the layer is kept when the net's state meets one) or exclude rules (it is "
                 "kept when the state meets none), as Caffe requires");
  if (layer.include_size() == 0) {
    for (const NetStateRule& rule : layer.exclude())
      if (state_meets_rule(state, rule)) return false;
    return true;
  }
  for (const NetStateRule& rule : layer.include())
    if (state_meets_rule(state, rule)) return true;
  return false;
}

NetState merged_state(Phase phase, const NetState& net, const NetState* solver) {
  NetState state;
  state.set_phase(phase);
  state.set_level(net.level());
  state.mutable_stage()->CopyFrom(net.stage());
  if (!solver) return state;
  if (solver->has_level()) state.set_level(solver->level());
  for (const std::string& stage : solver->stage()) state.add_stage(stage);
  return state;
}

std::string state_string(const NetState& state) {
  std::string text = std::string("phase ") + Phase_Name(state.phase()) + ", level " +
                     std::to_string(state.level());
  if (state.stage_size() == 0) return text + ", no stage";
  return text + (state.stage_size() == 1 ? ", stage " : ", stages ") +
         quoted_list(state.stage());
}

std::optional<LayerParameter> input_header_layer(const NetParameter& net,
                                                 const std::string& source) {
  const int inputs = net.input_size();
  if (inputs == 0 && net.input_shape_size() == 0 && net.input_dim_size() == 0) return {};
  // "file:line: " of a header field, or "" without a file.
  auto at = [&](const char* field) {
    const std::string where = field_location(source, NetParameter(), field);
    return where.empty() ? std::string("the net header: ") : where + ": ";
  };
  const std::string names = quoted_list(net.input());
  LAMINA_REQUIRE(inputs > 0, at(net.input_shape_size() ? "input_shape" : "input_dim"),
                 net.input_shape_size() ? "input_shape" : "input_dim", " is given but no "
                 "input names the blob it shapes; write input: \"data\" before it (or use an "
                 "Input layer: layer { name: \"data\" type: \"Input\" top: \"data\" "
                 "input_param { shape { dim: ... } } })");
  LAMINA_REQUIRE(net.input_shape_size() == 0 || net.input_dim_size() == 0, at("input_dim"),
                 "the net header gives both input_shape and input_dim; give one input_shape "
                 "per input, or four input_dim per input, not both");
  if (net.input_dim_size() > 0) {
    LAMINA_REQUIRE(net.input_dim_size() == 4 * inputs, at("input_dim"), "the net header "
                   "names ", inputs, " input(s) (", names, ") but gives ", net.input_dim_size(),
                   " input_dim values; give four (num, channels, height, width) per input, ",
                   4 * inputs, " in all, or one input_shape { dim ... } per input");
  } else {
    LAMINA_REQUIRE(net.input_shape_size() == inputs, at(net.input_shape_size() ? "input_shape"
                                                                               : "input"),
                   "the net header names ", inputs, " input(s) (", names, ") but gives ",
                   net.input_shape_size(), " input_shape; give one input_shape { dim ... } "
                   "per input, in the order of the inputs (or four input_dim per input)");
  }
  LayerParameter layer;
  layer.set_name("input");
  layer.set_type("Input");
  InputParameter* shapes = layer.mutable_input_param();
  for (int i = 0; i < inputs; ++i) {
    layer.add_top(net.input(i));
    BlobShape* shape = shapes->add_shape();
    if (net.input_dim_size() == 0) {
      shape->CopyFrom(net.input_shape(i));
    } else {
      for (int d = 0; d < 4; ++d) shape->add_dim(net.input_dim(4 * i + d));
    }
  }
  return layer;
}

std::string engine_of(const LayerParameter& layer) {
  std::vector<const pb::FieldDescriptor*> fields;
  const pb::Reflection* reflection = layer.GetReflection();
  reflection->ListFields(layer, &fields);
  std::string engines;
  for (const pb::FieldDescriptor* field : fields) {
    if (field->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE || field->is_repeated())
      continue;
    const pb::Message& message = reflection->GetMessage(layer, field);
    const pb::FieldDescriptor* engine = message.GetDescriptor()->FindFieldByName("engine");
    if (!engine || engine->cpp_type() != pb::FieldDescriptor::CPPTYPE_ENUM ||
        !message.GetReflection()->HasField(message, engine))
      continue;
    engines += (engines.empty() ? "" : ", ") + field->name() + ".engine: " +
               message.GetReflection()->GetEnum(message, engine)->name();
  }
  return engines;
}

}  // namespace lamina
