// A weights file of either format into a net (weights_file.hpp).
#include "lamina/weights_file.hpp"

#include <glog/logging.h>

#include <set>

#include "lamina/caffe_weights.hpp"

namespace lamina {

std::string some_names(const std::vector<std::string>& names, size_t limit) {
  if (names.empty()) return "none";
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i)
    out += (i ? ", " : "") + ("'" + names[i] + "'");
  if (names.size() > limit) out += " and " + std::to_string(names.size() - limit) + " more";
  return out;
}

WeightsLoadReport load_weights_file(Net& net, const std::string& path, WeightsMatch match,
                                    const std::string& net_label, bool allow_unmatched,
                                    const std::string& how_to_allow) {
  if (!weights_file_is_lamina(path)) {
    LOG(INFO) << path << " is not a Lamina file: reading it as a Caffe model";
    return load_caffe_weights(net, path, match, allow_unmatched);
  }
  const SnapshotFile file = read_snapshot_file(path, SnapshotKind::kWeights);
  std::vector<std::string> params, entries;
  for (const ParamInfo& info : net.arena().table()) params.push_back(info.name);
  const std::set<std::string> known(params.begin(), params.end());
  bool any = false;
  for (const SnapshotRecord& record : file.records) {
    entries.push_back(record.name);
    any = any || known.count(record.name) > 0;
  }
  if (!any && !allow_unmatched) {
    fail("weights file '", path, "' matches no parameter of the ", net_label, ": the net has ",
         params.size(), " parameter", params.size() == 1 ? "" : "s", " (", some_names(params),
         "), the file ", entries.size(), " entr", entries.size() == 1 ? "y" : "ies", " (",
         some_names(entries), "). Parameters are matched by name (<layer>/<role>): give "
         "weights trained for this net", how_to_allow, ".");
  }
  return load_weights(net.arena(), file, path, match);
}

}  // namespace lamina
