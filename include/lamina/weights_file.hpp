// Loading a weights file a user names (lamina train --weights, lamina test, the inference
// API, Python's Net): Lamina's own weights (snapshot.hpp), or a Caffe model (.caffemodel,
// caffe_weights.hpp), told apart by weights_file_is_lamina (the file begins with "LAMINA",
// or is named *.lamina).
#pragma once

#include <string>

#include "lamina/net.hpp"
#include "lamina/snapshot.hpp"

namespace lamina {

// Loads the file at `path` into net's parameters. Lamina's files match parameters by name
// (<layer>/<role>), Caffe's by layer name, as Caffe does; `match` says which parameters must
// be there (snapshot.hpp). A file none of whose entries is a parameter of the net (trained
// for another net, or named differently) is an Error naming both sides, unless
// allow_unmatched. net_label names the net in messages ("net 'x'", "TEST net"); how_to_allow,
// when the caller can override the refusal, says how (", or give --flag to ...").
WeightsLoadReport load_weights_file(Net& net, const std::string& path, WeightsMatch match,
                                    const std::string& net_label = "net",
                                    bool allow_unmatched = false,
                                    const std::string& how_to_allow = {});

// Up to `limit` names, then how many more: "'a', 'b', 'c' and 12 more" ("none" if empty).
std::string some_names(const std::vector<std::string>& names, size_t limit = 5);

}  // namespace lamina
