// Weights files and the arena's records: arena_records turns one array of a ParamArena into
// one record per parameter, arena_from_records checks a file's records against the arena's
// table (names, shapes; exact, resume or fine-tune matching) and lays them out as the arena.
// save_weights and load_weights are these over the snapshot container (snapshot.cpp).
#include <algorithm>
#include <map>
#include <set>

#include "lamina/snapshot.hpp"

namespace lamina {

std::vector<SnapshotRecord> arena_records(const ParamArena& arena, const float* array,
                                          const std::string& prefix) {
  const std::vector<float> host = arena.to_host(array);
  std::vector<SnapshotRecord> records;
  records.reserve(arena.table().size());
  for (const ParamInfo& info : arena.table()) {
    records.push_back(SnapshotRecord::of_floats(
        prefix + info.name, info.shape,
        std::vector<float>(host.begin() + info.offset, host.begin() + info.offset + info.count)));
  }
  return records;
}

std::vector<float> arena_from_records(const ParamArena& arena, const SnapshotFile& file,
                                      const std::string& path, const std::string& prefix,
                                      WeightsMatch match, WeightsLoadReport* report) {
  const std::string what = std::string(snapshot_kind_name(file.kind)) + " file '" + path + "': ";
  // "parameter 'x'" for weights, "the history of parameter 'x'" for optimizer state.
  const std::string kind = prefix.empty() ? "" : "the " + prefix.substr(0, prefix.size() - 1) + " of ";
  WeightsLoadReport local;
  WeightsLoadReport& r = report ? *report : local;
  r = WeightsLoadReport{};
  std::map<std::string, const SnapshotRecord*> by_name;
  for (const SnapshotRecord& rec : file.records)
    if (rec.name.compare(0, prefix.size(), prefix) == 0) by_name[rec.name.substr(prefix.size())] = &rec;
  std::vector<float> values(arena.count(), 0.0f);
  std::set<std::string> used;
  for (const ParamInfo& info : arena.table()) {
    auto it = by_name.find(info.name);
    if (it == by_name.end()) {
      if (match == WeightsMatch::kFineTune) {
        r.kept_filler.push_back(info.name);
        continue;
      }
      fail(what, "missing ", kind, "parameter '", info.name, "' of layer '", info.layer,
           "' (shape ", shape_string(info.shape), ")",
           match == WeightsMatch::kExact ? "; the file was written for a different net" : "");
    }
    const SnapshotRecord& rec = *it->second;
    LAMINA_REQUIRE(rec.type == SnapshotRecord::Type::kFloat32, what, "entry '", rec.name,
                   "' is not a float32 array");
    if (rec.shape != info.shape) {
      fail(what, "layer '", info.layer, "': ", kind, "parameter '", info.name, "' has shape ",
           shape_string(info.shape), " in the net but ", shape_string(rec.shape),
           " in the file",
           match == WeightsMatch::kFineTune
               ? "; rename the layer to train it from its filler instead"
               : "; it was written for a different net");
    }
    std::copy(rec.floats.begin(), rec.floats.end(), values.begin() + info.offset);
    r.loaded.push_back(info.name);
    used.insert(info.name);
  }
  for (const SnapshotRecord& rec : file.records) {
    if (rec.name.compare(0, prefix.size(), prefix) != 0) continue;
    if (used.count(rec.name.substr(prefix.size()))) continue;
    if (match == WeightsMatch::kExact)
      fail(what, "has ", kind, "parameter '", rec.name, "', which the net does not have; the "
           "file was written for a different net");
    r.ignored.push_back(rec.name);
  }
  return values;
}

uint32_t save_weights(const ParamArena& arena, const std::string& path) {
  uint32_t crc = 0;
  write_file_atomically(path, encode_snapshot(SnapshotKind::kWeights,
                                              arena_records(arena, arena.data(), ""), &crc));
  return crc;
}

WeightsLoadReport load_weights(ParamArena& arena, const SnapshotFile& file,
                               const std::string& path, WeightsMatch match) {
  WeightsLoadReport report;
  std::vector<float> values = arena_from_records(arena, file, path, "", match, &report);
  if (values.empty()) return report;
  if (!report.kept_filler.empty()) {
    // Keep the fillers' values where the file has nothing: start from the arena's weights.
    const std::vector<float> current = arena.to_host(arena.data());
    std::set<std::string> kept(report.kept_filler.begin(), report.kept_filler.end());
    for (const ParamInfo& info : arena.table()) {
      if (!kept.count(info.name)) continue;
      std::copy(current.begin() + info.offset, current.begin() + info.offset + info.count,
                values.begin() + info.offset);
    }
  }
  arena.from_host(values, arena.data());
  return report;
}

WeightsLoadReport load_weights(ParamArena& arena, const std::string& path, WeightsMatch match) {
  return load_weights(arena, read_snapshot_file(path, SnapshotKind::kWeights), path, match);
}

}  // namespace lamina
