// The state a net is built in, and the parts of Caffe's net header that become layers.
//
// NetState (phase, level, stages) decides which layers a net holds, as Caffe 1.0's FilterNet:
// a layer with include rules is kept when the state meets any of them; a layer with exclude
// rules when it meets none; a layer with neither is kept. A rule is met when its phase (if
// set) is the state's, the state's level is within [min_level, max_level] (each if set),
// every `stage` of the rule is among the state's stages and no `not_stage` is. One layer may
// not have both include and exclude rules.
//
// The state of a net: the phase its builder asks for (Net's constructor: TRAIN for the
// solver's training net, TEST for its test nets and `lamina test`), the level and stages
// of NetParameter.state, and for a solver's nets those of train_state / test_state merged
// over it (merged_state, as Caffe: the solver's level replaces the net's, its stages add).
//
// Caffe's older input header (`input: "data"` with `input_shape { dim ... }` or four
// `input_dim` per input) becomes one Input layer named "input" before every other layer,
// as Caffe's upgrade makes it.
#pragma once

#include <optional>
#include <string>

#include "lamina/lamina.pb.h"

namespace lamina {

bool state_meets_rule(const NetState& state, const NetStateRule& rule);

// Whether a layer belongs to a net built in `state`. Throws an Error starting with `where`
// when the layer has both include and exclude rules.
bool layer_included(const LayerParameter& layer, const NetState& state,
                    const std::string& where);

// The state of a net built in `phase` from a net file whose own state is `net` and a
// solver's train_state or test_state `solver` (null: none): phase from the argument, level
// from `solver` if it sets one, else from `net`; stages of both, the net's first.
NetState merged_state(Phase phase, const NetState& net, const NetState* solver);

// "phase TEST, level 0, stages 'a', 'b'", for messages.
std::string state_string(const NetState& state);

// The Input layer the header of `net` asks for, or nothing when it names no input. A header
// whose counts do not match (input_shape or input_dim without input, not one input_shape or
// four input_dim per input, both forms at once) is an Error naming `source` (the net file,
// with the line of the field where known) and what to write instead.
std::optional<LayerParameter> input_header_layer(const NetParameter& net,
                                                 const std::string& source);

// Caffe's `engine` fields (convolution_param, pooling_param, relu_param, ... engine: CUDNN)
// choose among Caffe's implementations; Lamina has one per backend and takes them as hints.
// The engine fields `layer` sets, found by reflection over its *_param messages
// ("convolution_param.engine: CUDNN"), or "" when it sets none.
std::string engine_of(const LayerParameter& layer);

}  // namespace lamina
