// Net construction, as named phases run in order by Net::build:
//   1. flatten_layers    the input header's Input layer; drop the layers the net's state
//                        excludes (net_state.hpp), expand Sequential containers, give each
//                        layer its key (net.hpp)
//   2. resolve_chaining  instantiate the layers, give implicit bottoms and tops their blobs
//   3. insert_splits     a Split after every blob version that feeds several layers
//   4. insert_conversions  each layer's storage (FP32 or 16 bits), a Convert wherever a
//                        layer reads a blob stored otherwise
//   5. set_up_layers     create the blobs, set every layer up in order, find the outputs
//   6. collect_losses    the scalar tops that count in the loss, with their weights
//   7. infer_backward    which layers need backward, and which bottoms get gradients
//                        (Caffe's rules, force_backward, propagate_down)
//   8. bind_params       build (or share) the parameter arena and bind every parameter
//      load_net_file_blobs  the parameters the net file gives (LayerParameter.blobs)
//   9. fuse_layers       a layer absorbs the layers after it (Linear + ReLU;
//                        BatchNorm + Scale + ReLU)
// Errors name the prototxt file, the line of the layer, its name and type (net.hpp).
#include <glog/logging.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "lamina/caffe_weights.hpp"
#include "lamina/counter_rng.hpp"
#include "lamina/filler.hpp"
#include "lamina/io.hpp"
#include "lamina/net.hpp"
#include "lamina/net_state.hpp"
#include "lamina/precision.hpp"
#include "lamina/registry.hpp"
#include "lamina/upgrade_v1.hpp"

namespace lamina {

struct FlatLayer {
  LayerParameter param;
  std::vector<int> index_path;  // position in the prototxt, for error messages
  std::string key;              // unique in the net (Net::layer_key)
};

struct NetPlan {
  Backend& backend;
  Phase phase;
  uint64_t seed;
  std::string source;  // the prototxt file, or ""
  std::vector<FlatLayer> flat;
  std::vector<std::unique_ptr<Layer>> layers;          // one per flat layer
  std::vector<std::vector<std::string>> bottoms, tops;  // blob names, per layer
  std::vector<DType> storage;  // per layer, how its tops are stored (insert_conversions)
  // per layer, whether it stores its tops in FP32 because a layer with no 16-bit path works
  // on them in place (fp32_producers), or because every layer reading them reads FP32 (a
  // Split: fp32_splits)
  std::vector<bool> fp32_for_in_place, fp32_for_readers;
};

namespace {

// "file:line: " of a layer in its prototxt, or "" when the net did not come from a file.
std::string location(const std::string& source, const std::vector<int>& path) {
  if (source.empty()) return {};
  const int line = layer_line(source, path);
  return source + ":" + (line ? std::to_string(line) + ":" : "") + " ";
}

// Rethrows a layer's error with "file:line: [TEST net: ]layer 'name' (type): " in front.
[[noreturn]] void rethrow(const NetPlan& plan, const FlatLayer& f, const Error& e) {
  std::string what = e.what();
  if (what.rfind("layer '", 0) != 0)
    what = "layer '" + f.param.name() + "' (" + f.param.type() + "): " + what;
  throw Error(location(plan.source, f.index_path) +
              (plan.phase == TEST ? "TEST net: " : "") + what);
}

// Appends the layers of `p` (a Sequential container expands into its children, chained in
// order and named "<container>/<child>"). The prototxt parser's depth limit bounds the
// recursion.
void flatten(const LayerParameter& p, std::vector<int> path, const std::string& prefix,
             const NetState& state, NetPlan& plan) {
  const std::string name = prefix + (p.has_name() ? p.name() : "layer" + std::to_string(path.back()));
  auto here = [&] {
    return location(plan.source, path) + (plan.phase == TEST ? "TEST net: " : "") + "layer '" +
           name + "' (" + p.type() + "): ";
  };
  if (!layer_included(p, state, here())) return;
  std::vector<FlatLayer>& out = plan.flat;
  if (p.has_precision()) {
    try {
      math_of(p.precision());
    } catch (const Error& e) {
      fail(here(), e.what());
    }
  }
  if (p.type() != "Sequential") {
    LAMINA_REQUIRE(p.layer_size() == 0, here(), "only a Sequential container may hold layers");
    FlatLayer flat{p, path, {}};
    flat.param.set_name(name);
    out.push_back(std::move(flat));
    return;
  }
  LAMINA_REQUIRE(p.param_size() == 0 && p.loss_weight_size() == 0 &&
                     p.propagate_down_size() == 0,
                 here(), "a Sequential container takes name, bottom, top, include/exclude and "
                 "layer; put param, loss_weight and propagate_down on its children");
  LAMINA_REQUIRE(p.blobs_size() == 0, here(), "a Sequential container has no parameters of "
                 "its own; give its children the blobs");
  LAMINA_REQUIRE(p.layer_size() > 0, here(), "the Sequential container is empty");
  LAMINA_REQUIRE(p.bottom_size() <= 1 && p.top_size() <= 1, here(),
                 "a Sequential container has at most one bottom and one top");
  const size_t first = out.size();
  for (int i = 0; i < p.layer_size(); ++i) {
    std::vector<int> child = path;
    child.push_back(i);
    if (p.has_precision() && !p.layer(i).has_precision()) {  // the container's precision
      LayerParameter inherits = p.layer(i);
      inherits.set_precision(p.precision());
      flatten(inherits, child, name + "/", state, plan);
    } else {
      flatten(p.layer(i), child, name + "/", state, plan);
    }
  }
  LAMINA_REQUIRE(out.size() > first, here(), "no child layer is included in this phase");
  if (p.bottom_size() == 1 && out[first].param.bottom_size() == 0)
    out[first].param.add_bottom(p.bottom(0));
  if (p.top_size() == 1 && out.back().param.top_size() == 0) out.back().param.add_top(p.top(0));
}

// Each layer's key: its name, or "<name>#k" for the k-th layer of that name (k >= 2), with
// as many '#' as it takes to be no other layer's name.
void assign_keys(std::vector<FlatLayer>& flat) {
  std::set<std::string> taken;
  for (const FlatLayer& f : flat) taken.insert(f.param.name());
  std::map<std::string, int> seen;
  for (FlatLayer& f : flat) {
    const int k = ++seen[f.param.name()];
    f.key = f.param.name();
    if (k == 1) continue;
    std::string key = f.param.name() + "#" + std::to_string(k);
    while (taken.count(key)) key = f.param.name() + "#" + key.substr(f.param.name().size());
    taken.insert(key);
    f.key = key;
  }
}

// 1.
void flatten_layers(const NetParameter& param, const std::string& net_name,
                    const NetState& state, NetPlan& plan) {
  if (param.layers_size() > 0)  // Caffe's V1 syntax in a net made in code (files: io.hpp)
    return flatten_layers(upgrade_v1_net(param, plan.source), net_name, state, plan);
  if (std::optional<LayerParameter> input = input_header_layer(param, plan.source))
    plan.flat.push_back(FlatLayer{std::move(*input), {}, {}});
  for (int i = 0; i < param.layer_size(); ++i) flatten(param.layer(i), {i}, "", state, plan);
  LAMINA_REQUIRE(!plan.flat.empty(), plan.source.empty() ? "net" : plan.source, ": the net '",
                 net_name, "' has no layers in its state (", state_string(state), ")");
  assign_keys(plan.flat);
  std::string engines;
  for (const FlatLayer& f : plan.flat) {
    const std::string engine = engine_of(f.param);
    if (!engine.empty()) engines += (engines.empty() ? "" : "; ") + f.param.name() + ": " + engine;
  }
  if (!engines.empty())
    LOG(INFO) << Phase_Name(plan.phase) << " net '" << net_name << "': engine fields are hints ("
              << engines << "); Lamina runs its own CUDA backend (cuDNN where it helps) on a "
              << "GPU and its Native backend on the CPU, whatever the engine";
}

// Rejects a *_param message the layer does not read: no setting is silently ignored.
void check_parameter_messages(const LayerParameter& p, const std::vector<std::string>& reads) {
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  p.GetReflection()->ListFields(p, &fields);
  for (const auto* field : fields) {
    const std::string& name = field->name();
    if (name.size() < 6 || name.compare(name.size() - 6, 6, "_param") != 0) continue;
    if (std::find(reads.begin(), reads.end(), name) != reads.end()) continue;
    std::string list;
    for (const std::string& r : reads) list += (list.empty() ? "" : ", ") + r;
    fail("layer '", p.name(), "' (", p.type(), ") does not use ", name,
         list.empty() ? "; it takes no parameter message" : "; it reads only " + list);
  }
}

// 2. A layer without bottoms takes the previous layer's top (a loss or accuracy also takes
//    "label"); a layer without tops gets a top named after itself.
void resolve_chaining(NetPlan& plan) {
  std::string previous_top;
  for (size_t i = 0; i < plan.flat.size(); ++i) {
    const LayerParameter& p = plan.flat[i].param;
    try {
      LAMINA_REQUIRE(p.has_type() && !p.type().empty(), "layer '", p.name(), "' has no type");
      LayerContext context{plan.backend, plan.phase, counter_hash(plan.seed, i)};
      plan.layers.push_back(LayerRegistry::create(p, context));
      Layer& layer = *plan.layers.back();
      check_parameter_messages(p, layer.parameter_messages());
      for (Operation op : layer.operations())
        LAMINA_REQUIRE(plan.backend.supports(op), "layer '", p.name(), "' (", p.type(),
                       ") needs ", operation_name(op), ", which the ", plan.backend.name(),
                       " backend does not implement");
      LAMINA_REQUIRE(plan.backend.supports_math(math_of(p.precision())), "layer '", p.name(),
                     "' (", p.type(), ") runs in ", Precision_Name(p.precision()), ", which the ",
                     plan.backend.name(), " backend does not implement; train in FP32 (the "
                     "layer's, its container's or the solver's precision, or --precision fp32)");
      std::vector<std::string> b(p.bottom().begin(), p.bottom().end());
      std::vector<std::string> t(p.top().begin(), p.top().end());
      if (b.empty() && layer.min_bottoms() > 0) {
        LAMINA_REQUIRE(!previous_top.empty(), "layer '", p.name(),
                       "' names no bottom and no layer comes before it");
        b.push_back(previous_top);
        if (layer.min_bottoms() >= 2) b.push_back("label");
      }
      if (t.empty() && layer.min_tops() > 0) t.push_back(p.name());
      auto count_ok = [](int n, int lo, int hi) { return n >= lo && (hi < 0 || n <= hi); };
      LAMINA_REQUIRE(count_ok(int(b.size()), layer.min_bottoms(), layer.max_bottoms()),
                     "layer '", p.name(), "' (", p.type(), ") takes ", layer.min_bottoms(),
                     (layer.max_bottoms() == layer.min_bottoms() ? "" : " or more"),
                     " bottom(s), got ", b.size());
      LAMINA_REQUIRE(count_ok(int(t.size()), layer.min_tops(), layer.max_tops()), "layer '",
                     p.name(), "' (", p.type(), ") takes ", layer.min_tops(),
                     (layer.max_tops() == layer.min_tops() ? "" : " or more"), " top(s), got ",
                     t.size());
      LAMINA_REQUIRE(p.propagate_down_size() == 0 || p.propagate_down_size() == int(b.size()),
                     "layer '", p.name(), "' (", p.type(), ") has ", p.propagate_down_size(),
                     " propagate_down value(s) for ", b.size(), " bottom(s); give one per "
                     "bottom, in order (false skips that bottom's gradient), or none");
      for (size_t j = 0; j < b.size() && j < size_t(p.propagate_down_size()); ++j)
        LAMINA_REQUIRE(!p.propagate_down(int(j)) || layer.accepts_gradient(int(j)), "layer '",
                       p.name(), "' (", p.type(), ") takes no gradient for bottom ", j, " ('",
                       b[j], "'), but propagate_down ", j, " is true; set it to false");
      if (!t.empty()) previous_top = t[0];
      plan.bottoms.push_back(std::move(b));
      plan.tops.push_back(std::move(t));
    } catch (const Error& e) {
      rethrow(plan, plan.flat[i], e);
    }
  }
}

// 3. A Split after every blob version that feeds several layers, so each layer writes its
//    bottom gradients with = and the split sums them.
void insert_splits(NetPlan& plan) {
  const size_t n = plan.layers.size();
  // (producer layer, top index) of the current version of each blob name, and its consumers.
  std::map<std::string, std::pair<int, int>> producer;
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> consumers;
  for (size_t i = 0; i < n; ++i) {
    const FlatLayer& f = plan.flat[i];
    for (size_t j = 0; j < plan.bottoms[i].size(); ++j) {
      auto it = producer.find(plan.bottoms[i][j]);
      if (it == producer.end()) {
        std::string known;
        for (const auto& p : producer) known += (known.empty() ? "" : ", ") + p.first;
        rethrow(plan, f,
                Error("layer '" + f.param.name() + "' (" + f.param.type() + "): unknown bottom '" +
                      plan.bottoms[i][j] + "'; blobs produced before it: " +
                      (known.empty() ? "none" : known)));
      }
      consumers[it->second].push_back({int(i), int(j)});
    }
    for (size_t j = 0; j < plan.tops[i].size(); ++j) {
      const std::string& t = plan.tops[i][j];
      const auto& b = plan.bottoms[i];
      const bool in_place = std::find(b.begin(), b.end(), t) != b.end();
      if (producer.count(t) && !in_place) {
        rethrow(plan, f,
                Error("layer '" + f.param.name() + "': top '" + t +
                      "' is already produced by an earlier layer (only in-place layers, whose "
                      "bottom and top are the same blob, may reuse a name)"));
      }
      producer[t] = {int(i), int(j)};
    }
  }
  NetPlan out{plan.backend, plan.phase, plan.seed, plan.source, {}, {}, {}, {}, {}, {}, {}};
  // Consumer renames are applied as layers are emitted; producers come first.
  std::map<std::pair<int, int>, std::string> rename;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < plan.bottoms[i].size(); ++j) {
      auto r = rename.find({int(i), int(j)});
      if (r != rename.end()) plan.bottoms[i][j] = r->second;
    }
    out.layers.push_back(std::move(plan.layers[i]));
    out.bottoms.push_back(plan.bottoms[i]);
    out.tops.push_back(plan.tops[i]);
    out.flat.push_back(plan.flat[i]);
    for (size_t j = 0; j < plan.tops[i].size(); ++j) {
      auto c = consumers.find({int(i), int(j)});
      if (c == consumers.end() || c->second.size() < 2) continue;
      const std::string blob = plan.tops[i][j];
      LayerParameter split;
      split.set_name(blob + "_" + plan.flat[i].key + "_" + std::to_string(j) + "_split");
      split.set_type("Split");
      split.add_bottom(blob);
      if (plan.flat[i].param.has_precision()) split.set_precision(plan.flat[i].param.precision());
      std::vector<std::string> split_tops;
      for (size_t k = 0; k < c->second.size(); ++k) {
        split_tops.push_back(split.name() + "_" + std::to_string(k));
        split.add_top(split_tops.back());
        rename[c->second[k]] = split_tops.back();
      }
      LayerContext context{plan.backend, plan.phase, counter_hash(plan.seed, 1000003 + i)};
      out.layers.push_back(LayerRegistry::create(split, context));
      out.bottoms.push_back({blob});
      out.tops.push_back(split_tops);
      out.flat.push_back(FlatLayer{split, plan.flat[i].index_path, split.name()});
    }
  }
  plan.flat = std::move(out.flat);
  plan.layers = std::move(out.layers);
  plan.bottoms = std::move(out.bottoms);
  plan.tops = std::move(out.tops);
}

// How layer i stores its tops, given how its first bottom is stored (Layer::half_support).
DType storage_of_layer(const NetPlan& plan, size_t i, DType first_bottom) {
  const Layer& layer = *plan.layers[i];
  const LayerParameter& p = plan.flat[i].param;
  switch (layer.half_support()) {
    case Layer::HalfSupport::kNone: return DType::kF32;
    case Layer::HalfSupport::kFollows: return first_bottom;
    case Layer::HalfSupport::kConverts: return storage_of(p.precision());
    case Layer::HalfSupport::kHalf: break;
  }
  const DType storage = storage_of(p.precision());
  LAMINA_REQUIRE(!is_half(storage) || plan.backend.supports_half(half_format(storage)),
                 "layer '", p.name(), "' (", p.type(), ") runs in ", dtype_name(storage),
                 ", which the ", plan.backend.name(), " backend does not store; train in FP32 "
                 "or TF32 (the layer's, its container's or the solver's precision)");
  return storage;
}

// The layers written for 16 bits that must run in FP32 all the same: those whose top a layer
// without a 16-bit path then works on in place (a Dropout in place on a Linear layer's
// output), which could not have a Convert before it. A layer in place on a
// view's top would write the viewed blob too, and check_in_place (layer.cpp) refuses it.
std::set<size_t> fp32_producers(const NetPlan& plan) {
  std::set<size_t> out;
  std::map<std::string, size_t> origin;  // the layer that wrote each blob, not in place
  const auto support = [&](size_t i) { return plan.layers[i]->half_support(); };
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const auto& tops = plan.tops[i];
    for (const std::string& b : plan.bottoms[i]) {
      if (support(i) != Layer::HalfSupport::kNone ||
          std::find(tops.begin(), tops.end(), b) == tops.end())
        continue;  // not in place, or in place in 16 bits
      const auto o = origin.find(b);
      if (o != origin.end() && support(o->second) == Layer::HalfSupport::kHalf)
        out.insert(o->second);
    }
    const auto& bottoms = plan.bottoms[i];
    for (const std::string& t : tops)
      if (std::find(bottoms.begin(), bottoms.end(), t) == bottoms.end()) origin[t] = i;
  }
  return out;
}

// The Splits whose every consumer reads FP32 (a 16-bit score read by the loss and by
// Accuracy): they store in FP32, with one Convert before them instead of one per consumer.
std::set<size_t> fp32_splits(const NetPlan& plan, const std::set<size_t>& fp32_tops) {
  const auto reads_fp32 = [&](size_t j) {
    switch (plan.layers[j]->half_support()) {
      case Layer::HalfSupport::kNone: return true;
      case Layer::HalfSupport::kHalf:
        return fp32_tops.count(j) > 0 || !is_half(storage_of(plan.flat[j].param.precision()));
      default: return false;  // views follow the Split, Converts take any storage
    }
  };
  std::set<size_t> out;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    if (plan.flat[i].param.type() != "Split") continue;
    const auto& tops = plan.tops[i];
    bool all = true;
    for (size_t j = i + 1; j < plan.layers.size() && all; ++j)
      for (const std::string& b : plan.bottoms[j])
        if (std::find(tops.begin(), tops.end(), b) != tops.end() && !reads_fp32(j)) all = false;
    if (all) out.insert(i);
  }
  return out;
}

// 4. Every layer reads its bottoms stored as it needs them: a layer not written for 16 bits
//    in FP32, one running in 16 bits in its format, a view as its producer stores them. A
//    Convert goes before a layer whose bottom is stored otherwise. An in-place layer cannot
//    have one: it runs in its blob's storage if it can run in 16 bits; one that cannot makes
//    its blob's producer store it in FP32 (fp32_producers), and is refused on a 16-bit blob
//    whose producer has no FP32 to fall back on (a Convert to 16 bits).
void insert_conversions(NetPlan& plan) {
  const std::set<size_t> fp32_tops = fp32_producers(plan);
  const std::set<size_t> fp32_split = fp32_splits(plan, fp32_tops);
  std::map<std::string, DType> stored;         // the current version of each blob
  std::map<std::string, std::string> producer;  // ... and the layer that wrote it
  std::set<std::string> names;  // every blob and layer name, which a Convert must not take
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    names.insert(plan.tops[i].begin(), plan.tops[i].end());
    names.insert(plan.flat[i].param.name());
  }
  NetPlan out{plan.backend, plan.phase, plan.seed, plan.source, {}, {}, {}, {}, {}, {}, {}};
  std::set<std::string> unread;  // blobs whose current version no layer has read yet
  // Appends a Convert of blob b to `to`; returns its top, "<b>_BF16" or "<b>_FP32".
  auto convert = [&](const std::string& b, DType to, const std::vector<int>& index_path) {
    std::string name = b + "_" + dtype_name(is_half(to) ? to : DType::kF32);
    while (names.count(name)) name += "_";
    names.insert(name);
    LayerParameter p;
    p.set_name(name);
    p.set_type("Convert");
    p.add_bottom(b);
    p.add_top(name);
    p.set_precision(to == DType::kBF16 ? BF16 : (to == DType::kFP16 ? FP16 : FP32));
    LayerContext context{plan.backend, plan.phase, counter_hash(plan.seed, 2000003 + names.size())};
    out.layers.push_back(LayerRegistry::create(p, context));
    out.bottoms.push_back({b});
    out.tops.push_back({name});
    out.flat.push_back(FlatLayer{p, index_path, name});
    out.storage.push_back(to);
    out.fp32_for_in_place.push_back(false);
    out.fp32_for_readers.push_back(false);
    stored[name] = to;
    producer[name] = name;
    unread.erase(b);
    return name;
  };
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const FlatLayer& f = plan.flat[i];
    std::vector<std::string>& bottoms = plan.bottoms[i];
    DType storage = DType::kF32;
    try {
      const bool fp32 = fp32_tops.count(i) > 0 || fp32_split.count(i) > 0;
      storage = fp32 ? DType::kF32
                     : storage_of_layer(plan, i, bottoms.empty() ? DType::kF32
                                                                 : stored.at(bottoms[0]));
      const Layer::HalfSupport support = plan.layers[i]->half_support();
      const bool follows = (support == Layer::HalfSupport::kFollows && !fp32) ||
                           support == Layer::HalfSupport::kConverts;
      const auto& t = plan.tops[i];
      for (const std::string& b : bottoms) {
        if (std::find(t.begin(), t.end(), b) == t.end()) continue;  // not in place on b
        const DType have = stored.at(b);
        if (support == Layer::HalfSupport::kHalf) storage = have;
        LAMINA_REQUIRE(follows || have == storage, "layer '", f.param.name(), "' (",
                       f.param.type(), ") has no 16-bit path, so it cannot work in place on '", b,
                       "', which layer '", producer.at(b), "' stores in ", dtype_name(have),
                       ": give its top a name of its own (a Convert then goes before it), or "
                       "run layer '", producer.at(b), "' in FP32");
      }
      for (std::string& b : bottoms)
        if (!follows && stored.at(b) != storage) b = convert(b, storage, f.index_path);
    } catch (const Error& e) {
      rethrow(plan, f, e);
    }
    for (const std::string& b : bottoms) unread.erase(b);
    for (const std::string& t : plan.tops[i]) {
      stored[t] = storage;
      producer[t] = f.param.name();
      unread.insert(t);
    }
    out.layers.push_back(std::move(plan.layers[i]));
    out.bottoms.push_back(bottoms);
    out.tops.push_back(plan.tops[i]);
    out.flat.push_back(f);
    out.storage.push_back(storage);
    out.fp32_for_in_place.push_back(fp32_tops.count(i) > 0);
    out.fp32_for_readers.push_back(fp32_split.count(i) > 0);
  }
  // The net's outputs (tops no layer reads: the solver sums them, tools print them) are
  // FP32: a 16-bit one gets a Convert, whose top "<name>_FP32" is the output instead.
  for (size_t i = 0, n = out.layers.size(); i < n; ++i) {
    const std::vector<std::string> tops = out.tops[i];  // convert() appends to out.tops
    for (const std::string& t : tops)
      if (unread.count(t) && is_half(stored.at(t))) {
        unread.erase(t);
        convert(t, DType::kF32, std::vector<int>(out.flat[i].index_path));
      }
  }
  plan.flat = std::move(out.flat);
  plan.layers = std::move(out.layers);
  plan.bottoms = std::move(out.bottoms);
  plan.tops = std::move(out.tops);
  plan.storage = std::move(out.storage);
  plan.fp32_for_in_place = std::move(out.fp32_for_in_place);
  plan.fp32_for_readers = std::move(out.fp32_for_readers);
}

// 8b. The values a net file gives its layers (LayerParameter.blobs: a NetParameter Caffe
//     wrote, or one built in code) replace their fillers', as Caffe's Layer constructor
//     does, after the checks a .caffemodel's blobs pass (caffe_weights.hpp). A parameter
//     that layers share has the values of the first layer that declares it (Caffe's owner:
//     its blobs, else its filler). A net viewing another net's arena keeps that net's values
//     (Caffe's test nets take the train net's); its blobs are checked all the same.
void load_net_file_blobs(Net& net, const NetPlan& plan, bool shared_arena) {
  const auto carries = [](const FlatLayer& f) { return f.param.blobs_size() > 0; };
  if (std::none_of(plan.flat.begin(), plan.flat.end(), carries)) return;
  const std::vector<std::vector<const ParamInfo*>> params = layer_params(net);
  for (size_t i = 0; i < plan.flat.size(); ++i) {
    if (!carries(plan.flat[i])) continue;
    const LayerParameter& p = plan.flat[i].param;
    try {
      check_layer_blobs(p, params[i], "layer '" + p.name() + "' (" + p.type() + "): ",
                        "net file");
    } catch (const Error& e) {
      rethrow(plan, plan.flat[i], e);
    }
  }
  if (shared_arena) return;
  ParamArena& arena = net.arena();
  std::vector<float> values = arena.to_host(arena.data());
  std::set<const ParamInfo*> declared;
  for (size_t i = 0; i < plan.flat.size(); ++i)
    for (size_t j = 0; j < params[i].size(); ++j)
      if (declared.insert(params[i][j]).second && carries(plan.flat[i]))
        copy_blob_values(plan.flat[i].param.blobs(int(j)), values.data() + params[i][j]->offset);
  arena.from_host(values, arena.data());
}

}  // namespace

Net::Net(const NetParameter& param, Phase phase, Backend& backend, uint64_t seed,
         std::shared_ptr<ParamArena> shared_arena, const std::string& source)
    : name_(param.name()), phase_(phase), backend_(backend) {
  // As Caffe's Net: the phase it is built for replaces the one in the file's state.
  if (param.state().has_phase() && param.state().phase() != phase) {
    LOG(INFO) << (source.empty() ? "net" : source) << ": the net '" << name_ << "' sets state "
              << "{ phase: " << Phase_Name(param.state().phase()) << " } but is built as a "
              << Phase_Name(phase) << " net; its state's phase is replaced by "
              << Phase_Name(phase) << ", as Caffe does (whoever builds the net chooses its "
              << "phase: the solver, lamina test, lamina time)";
  }
  state_ = merged_state(phase, param.state(), nullptr);
  debug_info_ = param.debug_info();
  fuse_ = !param.debug_info();
  build(param, seed, std::move(shared_arena), source);
}

void Net::build(const NetParameter& param, uint64_t seed, std::shared_ptr<ParamArena> shared,
                const std::string& source) {
  NetPlan plan{backend_, phase_, seed, source, {}, {}, {}, {}, {}, {}, {}};
  flatten_layers(param, name_, state_, plan);
  resolve_chaining(plan);
  insert_splits(plan);
  insert_conversions(plan);
  storage_ = plan.storage;
  set_up_layers(plan);
  collect_losses(plan);
  for (const FlatLayer& f : plan.flat) keys_.push_back(f.key);
  infer_backward(param.force_backward());
  const bool shared_arena = shared != nullptr;
  bind_params(seed, std::move(shared));
  load_net_file_blobs(*this, plan, shared_arena);
  fused_.assign(layers_.size(), false);
  if (fuse_) fuse_layers();
  for (size_t i = 0; i < layers_.size(); ++i)
    VLOG(1) << "layer " << layers_[i]->name() << " (" << layers_[i]->type() << ")"
            << (needs_backward_[i] ? " needs backward" : "");
  for (const FlatLayer& f : plan.flat) math_.push_back(math_of(f.param.precision()));
  log_precisions(plan);
}

// "TRAIN net 'mlp': every layer in TF32", or "...: BF16 in fc1, fc2; FP32 in loss", naming
// apart the layers asked to run in 16 bits that run in FP32: those without a 16-bit path,
// those whose top such a layer works on in place, views and Splits of FP32 blobs, and those
// in place on an FP32 blob.
void Net::log_precisions(const NetPlan& plan) const {
  std::map<std::string, std::string> names;
  for (size_t i = 0; i < layers_.size(); ++i) {
    std::string label = is_half(storage_[i]) ? dtype_name(storage_[i]) : math_name(math_[i]);
    const Precision asked = plan.flat[i].param.precision();
    if (!is_half(storage_[i]) && (asked == BF16 || asked == FP16)) {
      const Layer::HalfSupport support = layers_[i]->half_support();
      if (support == Layer::HalfSupport::kNone)
        label += std::string(" (no ") + Precision_Name(asked) + " path)";
      else if (plan.fp32_for_readers[i])
        label += " (every layer reading it reads FP32)";
      else if (plan.fp32_for_in_place[i])
        label += " (its top is worked on in place by a layer with no 16-bit path)";
      else if (support == Layer::HalfSupport::kFollows)
        label += " (stored as its FP32 bottom)";
      else
        label += " (in place on an FP32 blob)";
    }
    std::string& list = names[label];
    list += (list.empty() ? "" : ", ") + layers_[i]->name();
  }
  std::string text;
  for (const auto& [label, list] : names)
    text += (text.empty() ? "" : "; ") + label + " in " + list;
  if (names.size() == 1) text = "every layer in " + names.begin()->first;
  LOG(INFO) << Phase_Name(phase_) << " net '" << name_ << "': " << text;
}

// 5.
void Net::set_up_layers(NetPlan& plan) {
  std::vector<int> consumed;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    LayerIO io;
    Tensors& bottom_tensors = io.bottom_tensors;
    Tensors& top_tensors = io.top_tensors;
    for (const std::string& b : plan.bottoms[i]) {
      io.bottoms.push_back(blob_index_.at(b));
      bottom_tensors.push_back(blobs_[io.bottoms.back()].get());
      consumed.push_back(io.bottoms.back());
    }
    for (const std::string& t : plan.tops[i]) {
      const auto& b = plan.bottoms[i];
      if (std::find(b.begin(), b.end(), t) != b.end()) {
        io.tops.push_back(blob_index_.at(t));
      } else {
        blobs_.push_back(std::make_unique<Tensor>(backend_, Shape{0}, t, plan.storage[i]));
        blob_needs_grad_.push_back(false);
        io.tops.push_back(int(blobs_.size()) - 1);
        blob_index_[t] = io.tops.back();
      }
      top_tensors.push_back(blobs_[io.tops.back()].get());
    }
    // In place (a top that is also a bottom): refused before setup where the result would be
    // wrong (the layer does not support it, or it would overwrite values that another blob
    // shares or an earlier layer's backward reads). See check_in_place in layer.hpp.
    try {
      if (works_in_place(bottom_tensors, top_tensors)) {
        std::vector<EarlierLayer> earlier;
        for (size_t j = 0; j < i; ++j)
          earlier.push_back({plan.layers[j].get(), io_[j].top_tensors});
        check_in_place(*plan.layers[i], bottom_tensors, top_tensors, earlier);
      }
      plan.layers[i]->setup(bottom_tensors, top_tensors);
    } catch (const Error& e) {
      rethrow(plan, plan.flat[i], e);
    }
    std::vector<Shape> shapes;
    for (const Tensor* b : bottom_tensors) shapes.push_back(b->shape());
    bottom_shapes_.push_back(std::move(shapes));
    shapes_vary_ = shapes_vary_ || plan.layers[i]->reshapes_each_pass();
    io_.push_back(std::move(io));
  }
  layers_ = std::move(plan.layers);
  // Layers set up again each pass keep their own work: no layer absorbs another.
  if (shapes_vary_) fuse_ = false;

  // Outputs: blobs whose last version no layer consumes.
  std::set<int> consumed_set(consumed.begin(), consumed.end());
  for (size_t b = 0; b < blobs_.size(); ++b)
    if (!consumed_set.count(int(b))) output_names_.push_back(blobs_[b]->name());
}

// 6.
void Net::collect_losses(const NetPlan& plan) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerParameter& p = plan.flat[i].param;
    try {
      LAMINA_REQUIRE(p.loss_weight_size() <= int(io_[i].tops.size()), "layer '", p.name(),
                     "' has ", p.loss_weight_size(), " loss_weight values for ",
                     io_[i].tops.size(), " top(s)");
      for (size_t j = 0; j < io_[i].tops.size(); ++j) {
        float weight = j < size_t(p.loss_weight_size()) ? p.loss_weight(j)
                                                        : (layers_[i]->is_loss() && j == 0 ? 1 : 0);
        if (weight == 0) continue;
        Tensor& top = *blobs_[io_[i].tops[j]];
        LAMINA_REQUIRE(top.count() == 1, "layer '", p.name(), "': loss_weight is set on top '",
                       top.name(), "' of shape ", top.shape_string(),
                       ", but a loss must be a scalar");
        LAMINA_REQUIRE(!is_half(top.dtype()), "layer '", p.name(), "': loss_weight is set on top '",
                       top.name(), "', which the layer stores in ", dtype_name(top.dtype()),
                       "; a loss is FP32: run the layer in FP32, or weight the output of a "
                       "loss layer");
        loss_blobs_.push_back({io_[i].tops[j], weight});
      }
    } catch (const Error& e) {
      rethrow(plan, plan.flat[i], e);
    }
  }
  // One loss of weight 1 is the total itself: no sum to compute each pass.
  if (loss_blobs_.size() == 1 && loss_blobs_[0].second == 1.0f) {
    total_ = blobs_[loss_blobs_[0].first].get();
  } else {
    loss_sum_ = std::make_unique<Tensor>(backend_, Shape{}, "loss");
    total_ = loss_sum_.get();
  }
}

// 7. Caffe 1.0's rules. Forward: a layer could run backward when it has learnable
//    parameters or a bottom whose blob needs a gradient (and takes one); its tops then
//    need gradients. A bottom gets its gradient when its blob needs one, or as its
//    propagate_down says when given (true asks for it even for an input blob; false skips
//    it). Backward, from the last layer: a layer runs backward only when a top leads to a
//    loss and some top's gradient is computed by the layers reading it (a layer whose every
//    top is skipped computes nothing); bottoms of a layer that leads to no loss get no
//    gradient. force_backward: every layer runs backward, each bottom that takes a
//    gradient gets one, and every parameter gradient is computed (frozen ones too).
void Net::infer_backward(bool force_backward) {
  const size_t n = layers_.size();
  auto learnable_of = [&](size_t i) {
    // The layer's own copy: a layer may add param { } blocks itself (BatchNorm freezes its
    // statistics with lr_mult 0, as Caffe does).
    const LayerParameter& p = layers_[i]->param();
    for (size_t k = 0; k < layers_[i]->params().size(); ++k)
      if (int(k) >= p.param_size() || p.param(k).lr_mult() != 0) return true;
    return false;
  };
  std::vector<bool>& blob_needs = blob_needs_grad_;
  needs_backward_.assign(n, false);
  propagate_.assign(n, {});
  learnable_.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const LayerParameter& p = layers_[i]->param();
    learnable_[i] = learnable_of(i);
    bool needs = learnable_[i];
    for (size_t j = 0; j < io_[i].bottoms.size(); ++j) {
      const bool wanted = blob_needs[io_[i].bottoms[j]] && layers_[i]->accepts_gradient(int(j));
      needs = needs || wanted;
      propagate_[i].push_back(p.propagate_down_size() > 0 ? p.propagate_down(int(j)) : wanted);
    }
    needs_backward_[i] = needs;
    if (needs)
      for (int t : io_[i].tops) blob_needs[t] = true;
  }
  std::vector<bool> under_loss(blobs_.size(), false), skipped(blobs_.size(), false);
  for (const auto& l : loss_blobs_) under_loss[l.first] = true;
  for (size_t i = n; i-- > 0;) {
    bool leads_to_loss = false, every_top_skipped = true;
    for (int t : io_[i].tops) {
      leads_to_loss = leads_to_loss || under_loss[t];
      every_top_skipped = every_top_skipped && skipped[t];
    }
    if (every_top_skipped) propagate_[i].assign(propagate_[i].size(), false);
    needs_backward_[i] = needs_backward_[i] && leads_to_loss && !every_top_skipped;
    for (size_t j = 0; j < io_[i].bottoms.size(); ++j) {
      const int b = io_[i].bottoms[j];
      if (leads_to_loss)
        under_loss[b] = true;
      else
        propagate_[i][j] = false;
      if (!propagate_[i][j]) skipped[b] = true;
    }
  }
  if (!force_backward) return;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < io_[i].bottoms.size(); ++j) {
      const bool takes = layers_[i]->accepts_gradient(int(j));
      propagate_[i][j] = propagate_[i][j] || takes;
      blob_needs[io_[i].bottoms[j]] = blob_needs[io_[i].bottoms[j]] || propagate_[i][j];
    }
    learnable_[i] = !layers_[i]->params().empty();
    needs_backward_[i] = learnable_[i] ||
        std::find(propagate_[i].begin(), propagate_[i].end(), true) != propagate_[i].end();
  }
}

// 8. Parameters named alike (param { name }) share one entry, so their gradient is the sum
//    of every use. Fillers run on the host with a seeded generator, so every backend starts
//    from the same weights, and the arena is uploaded once.
void Net::bind_params(uint64_t seed, std::shared_ptr<ParamArena> shared) {
  struct Slot {
    Param* param;
    int entry;      // index in table
    DType storage;  // the layer's: 16 bits read the parameter's 16-bit copy
  };
  std::vector<ParamInfo> table;
  std::map<std::string, int> by_name;
  std::vector<Slot> slots;
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = *layers_[l];
    const LayerParameter& p = layer.param();
    LAMINA_REQUIRE(p.param_size() <= int(layer.params().size()), "layer '", layer.name(),
                   "' has ", layer.params().size(), " parameter(s) but ", p.param_size(),
                   " param { } blocks");
    for (size_t k = 0; k < layer.params().size(); ++k) {
      Param& param = layer.params()[k];
      ParamSpec spec = int(k) < p.param_size() ? p.param(k) : ParamSpec();
      // "<key>/<role>": the tensor's "<name>/<role>" with the layer's key for its name.
      const std::string& own = param.tensor->name();
      const bool named_after_layer = own.compare(0, layer.name().size(), layer.name()) == 0;
      const std::string name = !spec.name().empty() ? spec.name()
                               : named_after_layer  ? keys_[l] + own.substr(layer.name().size())
                                                    : own;
      auto found = by_name.find(name);
      if (found != by_name.end()) {
        const ParamInfo& owner = table[found->second];
        // share_mode (Caffe's): STRICT, the default, the same shape; PERMISSIVE the same
        // count (the layers view the values in their own shapes).
        if (spec.share_mode() == ParamSpec::PERMISSIVE)
          LAMINA_REQUIRE(owner.count == param.tensor->count(), "layer '", layer.name(),
                         "': shared parameter '", name, "' has ", owner.count, " values (shape ",
                         shape_string(owner.shape), ") where it was first declared and ",
                         param.tensor->count(), " (shape ", param.tensor->shape_string(),
                         ") here; share_mode: PERMISSIVE needs the same count");
        else
          LAMINA_REQUIRE(owner.shape == param.tensor->shape(), "layer '", layer.name(),
                         "': shared parameter '", name, "' has shape ",
                         shape_string(owner.shape), " where it was first declared and ",
                         param.tensor->shape_string(), " here; shared parameters have the "
                         "same shape, or the same count with share_mode: PERMISSIVE");
        LAMINA_REQUIRE(owner.lr_mult == spec.lr_mult() && owner.decay_mult == spec.decay_mult(),
                       "layer '", layer.name(), "': shared parameter '", name,
                       "' has lr_mult/decay_mult ", spec.lr_mult(), "/", spec.decay_mult(),
                       " here but ", owner.lr_mult, "/", owner.decay_mult, " where first declared");
        slots.push_back({&param, found->second, storage_[l]});
        continue;
      }
      ParamInfo info;
      info.name = name;
      info.shape = param.tensor->shape();
      info.count = param.tensor->count();  // the arena sets it again when it lays them out
      info.lr_mult = spec.lr_mult();
      info.decay_mult = spec.decay_mult();
      info.layer = keys_[l];
      by_name[name] = int(table.size());
      slots.push_back({&param, int(table.size()), storage_[l]});
      table.push_back(std::move(info));
    }
  }
  std::vector<int> uses(table.size(), 0);
  for (const Slot& s : slots) ++uses[s.entry];
  for (Slot& s : slots) s.param->shared = uses[s.entry] > 1;
  // Parameters of layers running in 16 bits also view the arena's 16-bit copy, at the
  // offset of their FP32 values.
  auto bind_half_copies = [&] {
    for (Slot& s : slots) {
      if (!is_half(s.storage)) continue;
      Tensor& t = *s.param->tensor;
      const Half format = half_format(s.storage);
      t.bind_half_copy(arena_->half_copy(format) + (t.data() - arena_->data()), format);
      uses_half_copy_ = true;
    }
  };

  if (shared) {
    // View the other net's arena; every parameter must exist there with the same shape.
    const char* theirs = phase_ == TEST ? "TRAIN" : "other";
    for (Slot& s : slots) {
      const ParamInfo& mine = table[s.entry];
      const ParamInfo* source = shared->find(mine.name);
      LAMINA_REQUIRE(source, Phase_Name(phase_), " net: parameter '", mine.name, "' of layer '",
                     mine.layer, "' does not exist in the ", theirs,
                     " net it shares weights with");
      LAMINA_REQUIRE(source->shape == mine.shape, Phase_Name(phase_), " net: parameter '",
                     mine.name, "' has shape ", shape_string(mine.shape), " here but ",
                     shape_string(source->shape), " in the ", theirs, " net");
      s.param->tensor->bind(backend_, shared->data() + source->offset, shared->diff() + source->offset);
    }
    arena_ = std::move(shared);
    bind_half_copies();
    return;
  }

  arena_ = std::make_shared<ParamArena>(backend_, std::move(table));
  if (arena_->count() == 0) return;
  std::vector<float> host(arena_->count(), 0.0f), values;
  std::mt19937_64 rng(seed);
  std::vector<bool> filled(arena_->table().size(), false);
  for (Slot& s : slots) {
    const ParamInfo& info = arena_->table()[s.entry];
    s.param->tensor->bind(backend_, arena_->data() + info.offset, arena_->diff() + info.offset);
    if (filled[s.entry]) continue;
    try {
      fill(s.param->filler, info.shape, rng, values);
    } catch (const Error& e) {
      fail("parameter '", info.name, "': ", e.what());
    }
    std::copy(values.begin(), values.end(), host.begin() + info.offset);
    filled[s.entry] = true;
  }
  arena_->from_host(host, arena_->data());
  bind_half_copies();
}

// 9. A layer followed by a one-bottom, one-top layer that reads its only top may take over
//    that layer's work (Layer::absorb), and then that of further layers in place on the same
//    top (BatchNorm + Scale + ReLU); the net then skips the absorbed layers. The next
//    layer works in place on the top, or is the top's only reader, and the top is then made
//    to share the next top's values and gradients (in place in effect). A top that counts
//    in the loss keeps its own values. The layers store in the same precision. The first
//    layer's backward then does the absorbed ones' too: it runs where any needed it, and
//    computes parameter gradients where any has learnable parameters (BatchNorm + Scale).
void Net::fuse_layers() {
  fused_.assign(layers_.size(), false);
  std::vector<int> readers(blobs_.size(), 0);
  for (const LayerIO& io : io_)
    for (int b : io.bottoms) ++readers[b];
  for (size_t i = 0; i + 1 < layers_.size(); ++i) {
    if (fused_[i]) continue;
    // Layer i absorbs the layers after it while it can; after the first, only those in place.
    for (size_t k = i; k + 1 < layers_.size(); ++k) {
      const LayerIO& io = io_[k];
      const LayerIO& next = io_[k + 1];
      if (io.tops.size() != 1 || next.bottoms.size() != 1 || next.tops.size() != 1 ||
          next.bottoms[0] != io.tops[0] || storage_[i] != storage_[k + 1] ||
          layers_[k + 1]->param().propagate_down_size() > 0)  // it may skip the gradient
        break;
      const bool in_place = next.tops[0] == next.bottoms[0];
      if (!in_place && (k > i || readers[io.tops[0]] != 1)) break;
      const bool weighted = std::any_of(loss_blobs_.begin(), loss_blobs_.end(),
                                        [&](const auto& l) { return l.first == io.tops[0]; });
      if (weighted || !layers_[i]->absorb(*layers_[k + 1])) break;
      layers_[k + 1]->absorbed();
      fused_[k + 1] = true;
      needs_backward_[i] = needs_backward_[i] || needs_backward_[k + 1];
      learnable_[i] = learnable_[i] || learnable_[k + 1];
      if (!in_place) {
        // The first top takes the next top's memory, not the other way round: the layers
        // after the next one (a Split, a Flatten view) already hold that memory, and the
        // first top has no reader but the absorbed layer.
        Tensor& next_top = *blobs_[next.tops[0]];
        blobs_[io.tops[0]]->share_data(next_top);
        blobs_[io.tops[0]]->share_diff(next_top);
      }
      VLOG(1) << "layer " << layers_[i]->name() << " absorbs " << layers_[k + 1]->name();
    }
  }
}

}  // namespace lamina
