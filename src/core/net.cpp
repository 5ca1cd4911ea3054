// Net construction: flatten containers, resolve implicit chaining, insert splits, set layers
// up, infer backward, lay out the parameter arena. See net.hpp for the rules.
#include "lamina/net.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <sstream>

#include "lamina/counter_rng.hpp"
#include "lamina/filler.hpp"
#include "lamina/io.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

constexpr int64_t kParamAlignment = 64;  // floats: every parameter starts on 256 bytes

struct FlatLayer {
  LayerParameter param;
  std::vector<int> index_path;  // position in the prototxt, for error messages
};

// "file:line: " of a layer in its prototxt, or "" when the net did not come from a file.
std::string location(const std::string& source, const std::vector<int>& path) {
  if (source.empty()) return {};
  const int line = layer_line(source, path);
  return source + ":" + (line ? std::to_string(line) + ":" : "") + " ";
}

bool included(const LayerParameter& p, Phase phase) {
  for (const NetStateRule& rule : p.exclude())
    if (!rule.has_phase() || rule.phase() == phase) return false;
  if (p.include_size() == 0) return true;
  for (const NetStateRule& rule : p.include())
    if (!rule.has_phase() || rule.phase() == phase) return true;
  return false;
}

// Appends the layers of `p` (a Sequential container expands into its children, chained in
// order and named "<container>/<child>").
void flatten(const LayerParameter& p, std::vector<int> path, Phase phase,
             const std::string& prefix, std::vector<FlatLayer>& out,
             const std::string& source) {
  if (!included(p, phase)) return;
  const std::string name = prefix + (p.has_name() ? p.name() : "layer" + std::to_string(path.back()));
  auto here = [&] { return location(source, path) + "layer '" + name + "' (" + p.type() + "): "; };
  if (p.type() != "Sequential") {
    LAMINA_REQUIRE(p.layer_size() == 0, here(), "only a Sequential container may hold layers");
    FlatLayer flat{p, path};
    flat.param.set_name(name);
    out.push_back(std::move(flat));
    return;
  }
  LAMINA_REQUIRE(p.param_size() == 0 && p.loss_weight_size() == 0,
                 here(), "a Sequential container takes name, bottom, top, include/exclude and "
                 "layer; put param and loss_weight on its children");
  LAMINA_REQUIRE(p.layer_size() > 0, here(), "the Sequential container is empty");
  LAMINA_REQUIRE(p.bottom_size() <= 1 && p.top_size() <= 1, here(),
                 "a Sequential container has at most one bottom and one top");
  const size_t first = out.size();
  for (int i = 0; i < p.layer_size(); ++i) {
    std::vector<int> child = path;
    child.push_back(i);
    flatten(p.layer(i), child, phase, name + "/", out, source);
  }
  LAMINA_REQUIRE(out.size() > first, here(), "no child layer is included in this phase");
  if (p.bottom_size() == 1 && out[first].param.bottom_size() == 0)
    out[first].param.add_bottom(p.bottom(0));
  if (p.top_size() == 1 && out.back().param.top_size() == 0) out.back().param.add_top(p.top(0));
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

}  // namespace

Net::Net(const NetParameter& param, Phase phase, Backend& backend, uint64_t seed,
         const Net* share_params_with, const std::string& source)
    : name_(param.name()), phase_(phase), backend_(backend) {
  build(param, seed, share_params_with, source);
}

void Net::build(const NetParameter& param, uint64_t seed, const Net* share_with,
                const std::string& source) {
  std::vector<FlatLayer> flat;
  for (int i = 0; i < param.layer_size(); ++i) flatten(param.layer(i), {i}, phase_, "", flat, source);
  LAMINA_REQUIRE(!flat.empty(), source.empty() ? "net" : source, ": the net '", name_,
                 "' has no layers in phase ", Phase_Name(phase_));

  // Adds "file:line: layer 'name' (type): " to a layer's error.
  auto rethrow = [&](const FlatLayer& f, const Error& e) -> void {
    std::string what = e.what();
    if (what.rfind("layer '", 0) != 0)
      what = "layer '" + f.param.name() + "' (" + f.param.type() + "): " + what;
    throw Error(location(source, f.index_path) + what);
  };

  // 1. Instantiate, then resolve implicit bottoms and tops.
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<std::vector<std::string>> bottoms, tops;
  std::string previous_top;
  std::set<std::string> names;
  for (size_t i = 0; i < flat.size(); ++i) {
    FlatLayer& f = flat[i];
    try {
      LAMINA_REQUIRE(f.param.has_type() && !f.param.type().empty(), "layer '", f.param.name(),
                     "' has no type");
      LAMINA_REQUIRE(names.insert(f.param.name()).second, "layer '", f.param.name(),
                     "': another layer has the same name");
      LayerContext context{backend_, phase_, counter_hash(seed, i)};
      layers.push_back(LayerRegistry::create(f.param, context));
      Layer& layer = *layers.back();
      check_parameter_messages(f.param, layer.parameter_messages());
      for (Operation op : layer.operations())
        LAMINA_REQUIRE(backend_.supports(op), "layer '", f.param.name(), "' (", f.param.type(),
                       ") needs ", operation_name(op), ", which the ", backend_.name(),
                       " backend does not implement");
      std::vector<std::string> b(f.param.bottom().begin(), f.param.bottom().end());
      std::vector<std::string> t(f.param.top().begin(), f.param.top().end());
      if (b.empty() && layer.min_bottoms() > 0) {
        LAMINA_REQUIRE(!previous_top.empty(), "layer '", f.param.name(),
                       "' names no bottom and no layer comes before it");
        b.push_back(previous_top);
        if (layer.min_bottoms() >= 2) b.push_back("label");
      }
      if (t.empty() && layer.min_tops() > 0) t.push_back(f.param.name());
      auto count_ok = [](int n, int lo, int hi) { return n >= lo && (hi < 0 || n <= hi); };
      LAMINA_REQUIRE(count_ok(int(b.size()), layer.min_bottoms(), layer.max_bottoms()),
                     "layer '", f.param.name(), "' (", f.param.type(), ") takes ",
                     layer.min_bottoms(), (layer.max_bottoms() == layer.min_bottoms() ? "" : " or more"),
                     " bottom(s), got ", b.size());
      LAMINA_REQUIRE(count_ok(int(t.size()), layer.min_tops(), layer.max_tops()), "layer '",
                     f.param.name(), "' (", f.param.type(), ") takes ", layer.min_tops(),
                     (layer.max_tops() == layer.min_tops() ? "" : " or more"), " top(s), got ",
                     t.size());
      if (!t.empty()) previous_top = t[0];
      bottoms.push_back(std::move(b));
      tops.push_back(std::move(t));
    } catch (const Error& e) {
      rethrow(f, e);
    }
  }

  // 2. Insert a Split after every blob version that feeds several layers, so each layer
  //    writes its bottom gradients with = and the split sums them.
  {
    // (producer layer, top index) of the current version of each blob name.
    std::map<std::string, std::pair<int, int>> producer;
    std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> consumers;
    for (size_t i = 0; i < layers.size(); ++i) {
      for (size_t j = 0; j < bottoms[i].size(); ++j) {
        auto it = producer.find(bottoms[i][j]);
        if (it == producer.end()) {
          std::string known;
          for (const auto& p : producer) known += (known.empty() ? "" : ", ") + p.first;
          try {
            fail("layer '", flat[i].param.name(), "' (", flat[i].param.type(),
                 "): unknown bottom '", bottoms[i][j], "'; blobs produced before it: ",
                 known.empty() ? "none" : known);
          } catch (const Error& e) {
            rethrow(flat[i], e);
          }
        }
        consumers[it->second].push_back({int(i), int(j)});
      }
      for (size_t j = 0; j < tops[i].size(); ++j) {
        const std::string& t = tops[i][j];
        const bool in_place =
            std::find(bottoms[i].begin(), bottoms[i].end(), t) != bottoms[i].end();
        if (producer.count(t) && !in_place) {
          try {
            fail("layer '", flat[i].param.name(), "': top '", t,
                 "' is already produced by an earlier layer (only in-place layers, whose bottom "
                 "and top are the same blob, may reuse a name)");
          } catch (const Error& e) {
            rethrow(flat[i], e);
          }
        }
        producer[t] = {int(i), int(j)};
      }
    }
    std::vector<std::unique_ptr<Layer>> with_splits;
    std::vector<std::vector<std::string>> new_bottoms, new_tops;
    std::vector<FlatLayer> new_flat;
    // Consumer renames are applied as layers are emitted; producers come first.
    std::map<std::pair<int, int>, std::string> rename;
    for (size_t i = 0; i < layers.size(); ++i) {
      for (size_t j = 0; j < bottoms[i].size(); ++j) {
        auto r = rename.find({int(i), int(j)});
        if (r != rename.end()) bottoms[i][j] = r->second;
      }
      with_splits.push_back(std::move(layers[i]));
      new_bottoms.push_back(bottoms[i]);
      new_tops.push_back(tops[i]);
      new_flat.push_back(flat[i]);
      for (size_t j = 0; j < tops[i].size(); ++j) {
        auto c = consumers.find({int(i), int(j)});
        if (c == consumers.end() || c->second.size() < 2) continue;
        const std::string blob = tops[i][j];
        LayerParameter split;
        split.set_name(blob + "_" + flat[i].param.name() + "_" + std::to_string(j) + "_split");
        split.set_type("Split");
        split.add_bottom(blob);
        std::vector<std::string> split_tops;
        for (size_t k = 0; k < c->second.size(); ++k) {
          split_tops.push_back(split.name() + "_" + std::to_string(k));
          split.add_top(split_tops.back());
          rename[c->second[k]] = split_tops.back();
        }
        LayerContext context{backend_, phase_, counter_hash(seed, 1000003 + i)};
        with_splits.push_back(LayerRegistry::create(split, context));
        new_bottoms.push_back({blob});
        new_tops.push_back(split_tops);
        new_flat.push_back(FlatLayer{split, flat[i].index_path});
      }
    }
    layers = std::move(with_splits);
    bottoms = std::move(new_bottoms);
    tops = std::move(new_tops);
    flat = std::move(new_flat);
  }

  // 3. Create blobs and set every layer up in order.
  std::vector<int> consumed;
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerIO io;
    Tensors bottom_tensors, top_tensors;
    for (const std::string& b : bottoms[i]) {
      io.bottoms.push_back(blob_index_.at(b));
      bottom_tensors.push_back(blobs_[io.bottoms.back()].get());
      consumed.push_back(io.bottoms.back());
    }
    for (const std::string& t : tops[i]) {
      auto in_place = std::find(bottoms[i].begin(), bottoms[i].end(), t);
      if (in_place != bottoms[i].end()) {
        io.tops.push_back(blob_index_.at(t));
      } else {
        blobs_.push_back(std::make_unique<Tensor>(backend_, Shape{0}, t));
        blob_needs_grad_.push_back(false);
        io.tops.push_back(int(blobs_.size()) - 1);
        blob_index_[t] = io.tops.back();
      }
      top_tensors.push_back(blobs_[io.tops.back()].get());
    }
    // In place (a top that is also a bottom): refused before setup where the result would be
    // wrong (the layer does not support it, or it would overwrite values that another blob
    // shares or an earlier layer's backward reads). See check_in_place in layer.hpp.
    if (works_in_place(bottom_tensors, top_tensors)) {
      std::vector<EarlierLayer> earlier;
      for (size_t j = 0; j < i; ++j) {
        earlier.push_back({layers[j].get(), {}});
        for (int t : io_[j].tops) earlier.back().tops.push_back(blobs_[t].get());
      }
      try {
        check_in_place(*layers[i], bottom_tensors, top_tensors, earlier);
      } catch (const Error& e) {
        rethrow(flat[i], e);
      }
    }
    try {
      layers[i]->setup(bottom_tensors, top_tensors);
    } catch (const Error& e) {
      rethrow(flat[i], e);
    }
    io_.push_back(std::move(io));
  }
  layers_ = std::move(layers);

  // Outputs: blobs whose last version no layer consumes.
  std::set<int> consumed_set(consumed.begin(), consumed.end());
  for (size_t b = 0; b < blobs_.size(); ++b)
    if (!consumed_set.count(int(b))) output_names_.push_back(blobs_[b]->name());

  // 4. Losses.
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerParameter& p = flat[i].param;
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
        loss_blobs_.push_back({io_[i].tops[j], weight});
      }
    } catch (const Error& e) {
      rethrow(flat[i], e);
    }
  }
  loss_ = std::make_unique<Tensor>(backend_, Shape{}, "loss");

  // 5. Which layers need backward: a layer does when its tops lead to a loss and it has
  //    learnable parameters or a bottom that needs a gradient.
  std::vector<bool> blob_to_loss(blobs_.size(), false);
  for (const auto& l : loss_blobs_) blob_to_loss[l.first] = true;
  std::vector<bool> layer_to_loss(layers_.size(), false);
  for (int i = int(layers_.size()) - 1; i >= 0; --i) {
    for (int t : io_[i].tops) layer_to_loss[i] = layer_to_loss[i] || blob_to_loss[t];
    if (layer_to_loss[i])
      for (int b : io_[i].bottoms) blob_to_loss[b] = true;
  }
  needs_backward_.assign(layers_.size(), false);
  propagate_.resize(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    // The layer's own copy: a layer may add param { } blocks itself (BatchNorm freezes its
    // statistics with lr_mult 0, as Caffe does).
    const LayerParameter& p = layers_[i]->param();
    bool learnable = false;
    for (size_t k = 0; k < layers_[i]->params().size(); ++k)
      learnable = learnable || (int(k) >= p.param_size() || p.param(k).lr_mult() != 0);
    learnable_.push_back(learnable);
    bool input_grad = false;
    propagate_[i].assign(io_[i].bottoms.size(), false);
    for (size_t j = 0; j < io_[i].bottoms.size(); ++j) {
      const bool wants = blob_needs_grad_[io_[i].bottoms[j]] && layers_[i]->accepts_gradient(int(j));
      propagate_[i][j] = wants && layer_to_loss[i];
      input_grad = input_grad || wants;
    }
    needs_backward_[i] = layer_to_loss[i] && (learnable || input_grad);
    if (learnable || input_grad)
      for (int t : io_[i].tops) blob_needs_grad_[t] = true;
  }

  allocate_params(seed, share_with);
  for (size_t i = 0; i < layers_.size(); ++i)
    VLOG(1) << "layer " << layers_[i]->name() << " (" << layers_[i]->type() << ")"
            << (needs_backward_[i] ? " needs backward" : "");
}

void Net::allocate_params(uint64_t seed, const Net* share_with) {
  struct Slot {
    Tensor* tensor;
    const FillerParameter* filler;
    int entry;  // index in param_table_
  };
  std::map<std::string, int> by_name;
  std::vector<Slot> slots;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& layer = *layers_[i];
    const LayerParameter& p = layer.param();
    LAMINA_REQUIRE(p.param_size() <= int(layer.params().size()), "layer '", layer.name(),
                   "' has ", layer.params().size(), " parameter(s) but ", p.param_size(),
                   " param { } blocks");
    for (size_t k = 0; k < layer.params().size(); ++k) {
      Param& param = layer.params()[k];
      ParamSpec spec = int(k) < p.param_size() ? p.param(k) : ParamSpec();
      const std::string name = spec.name().empty() ? param.tensor->name() : spec.name();
      auto found = by_name.find(name);
      if (found != by_name.end()) {
        const ParamInfo& owner = param_table_[found->second];
        LAMINA_REQUIRE(owner.shape == param.tensor->shape(), "layer '", layer.name(),
                       "': shared parameter '", name, "' has shape ", shape_string(owner.shape), " where it was first declared and ",
                       param.tensor->shape_string(), " here");
        LAMINA_REQUIRE(owner.lr_mult == spec.lr_mult() && owner.decay_mult == spec.decay_mult(),
                       "layer '", layer.name(), "': shared parameter '", name,
                       "' has lr_mult/decay_mult ", spec.lr_mult(), "/", spec.decay_mult(),
                       " here but ", owner.lr_mult, "/", owner.decay_mult, " where first declared");
        slots.push_back({param.tensor.get(), &param.filler, found->second});
        continue;
      }
      ParamInfo info{name, param.tensor->shape(), spec.lr_mult(), spec.decay_mult(), 0,
                     param.tensor->count(), layer.name()};
      info.offset = arena_count_;
      const int64_t padded = (info.count + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
      LAMINA_REQUIRE(arena_count_ <= kMaxElements - padded, "layer '", layer.name(),
                     "': parameter '", name, "' ", shape_string(info.shape),
                     " makes the parameters exceed ", kMaxElements, " values in all");
      arena_count_ += padded;
      by_name[name] = int(param_table_.size());
      slots.push_back({param.tensor.get(), &param.filler, int(param_table_.size())});
      param_table_.push_back(std::move(info));
    }
  }

  if (share_with) {
    // View the other net's arena; every parameter must exist there with the same shape.
    std::map<std::string, const ParamInfo*> theirs;
    for (const ParamInfo& info : share_with->param_table_) theirs[info.name] = &info;
    for (const ParamInfo& info : param_table_) {
      auto it = theirs.find(info.name);
      LAMINA_REQUIRE(it != theirs.end(), "parameter '", info.name, "' of the ",
                     Phase_Name(phase_), " net does not exist in the ",
                     Phase_Name(share_with->phase_), " net it shares weights with");
      LAMINA_REQUIRE(it->second->shape == info.shape, "parameter '", info.name, "' has shape ",
                     shape_string(info.shape), " in the ", Phase_Name(phase_), " net but ",
                     shape_string(it->second->shape), " in the ", Phase_Name(share_with->phase_),
                     " net");
    }
    auto& other = const_cast<Net&>(*share_with);
    for (Slot& s : slots) {
      const ParamInfo& mine = param_table_[s.entry];
      const ParamInfo& source = *theirs.at(mine.name);
      s.tensor->bind(backend_, other.param_data() + source.offset,
                     other.param_diff() + source.offset);
    }
    for (ParamInfo& info : param_table_) info.offset = theirs.at(info.name)->offset;
    arena_count_ = 0;
    return;
  }

  param_data_ = Buffer(backend_, sizeof(float) * arena_count_);
  param_diff_ = Buffer(backend_, sizeof(float) * arena_count_);
  if (arena_count_ == 0) return;
  // Fill on the host (same numbers on every backend), upload once.
  std::vector<float> host(arena_count_, 0.0f), values;
  std::mt19937_64 rng(seed);
  std::vector<bool> filled(param_table_.size(), false);
  for (Slot& s : slots) {
    const ParamInfo& info = param_table_[s.entry];
    s.tensor->bind(backend_, param_data() + info.offset, param_diff() + info.offset);
    if (filled[s.entry]) continue;
    try {
      fill(*s.filler, info.shape, rng, values);
    } catch (const Error& e) {
      fail("parameter '", info.name, "': ", e.what());
    }
    std::copy(values.begin(), values.end(), host.begin() + info.offset);
    filled[s.entry] = true;
  }
  backend_.copy_from_host(sizeof(float) * arena_count_, host.data(), param_data());
  zero_param_diffs();
}

void Net::forward_layer(int i) {
  Tensors bottom, top;
  for (int b : io_[i].bottoms) bottom.push_back(blobs_[b].get());
  for (int t : io_[i].tops) top.push_back(blobs_[t].get());
  layers_[i]->forward(bottom, top);
}

void Net::backward_layer(int i) {
  if (!needs_backward_[i]) return;
  Tensors bottom, top;
  for (int b : io_[i].bottoms) bottom.push_back(blobs_[b].get());
  for (int t : io_[i].tops) top.push_back(blobs_[t].get());
  // Parameters first: an in-place layer's backward_input overwrites the top diff. A frozen
  // layer (every parameter at lr_mult 0) computes no parameter gradients: they would cost a
  // gemm and count in the clipping norm, as they do not in Caffe or PyTorch.
  if (learnable_[i]) layers_[i]->backward_params(top, bottom);
  if (std::find(propagate_[i].begin(), propagate_[i].end(), true) != propagate_[i].end())
    layers_[i]->backward_input(top, propagate_[i], bottom);
}

void Net::forward() {
  for (int i = 0; i < num_layers(); ++i) forward_layer(i);
  float* loss = loss_->mutable_data();
  backend_.zero(sizeof(float), loss);
  for (const auto& l : loss_blobs_) backend_.axpy(1, l.second, blobs_[l.first]->data(), loss);
}

void Net::backward() {
  for (const auto& l : loss_blobs_) backend_.fill(1, l.second, blobs_[l.first]->mutable_diff());
  for (int i = num_layers() - 1; i >= 0; --i) backward_layer(i);
}

void Net::zero_param_diffs() {
  if (arena_count_ > 0) backend_.zero(sizeof(float) * arena_count_, param_diff());
}

float Net::loss() {
  float value = 0;
  backend_.copy_to_host(sizeof(float), loss_->data(), &value);
  return value;
}

Tensors Net::layer_bottoms(int i) const {
  Tensors bottom;
  for (int b : io_[i].bottoms) bottom.push_back(blobs_[b].get());
  return bottom;
}

Tensors Net::layer_tops(int i) const {
  Tensors top;
  for (int t : io_[i].tops) top.push_back(blobs_[t].get());
  return top;
}

Net::LayerStates Net::layer_states() const {
  LayerStates states;
  for (const auto& layer : layers_) {
    std::vector<int64_t> s = layer->state();
    if (!s.empty()) states[layer->name()] = std::move(s);
  }
  return states;
}

void Net::set_layer_states(const LayerStates& states, const std::string& source) {
  const LayerStates before = layer_states();
  for (const auto& entry : states) {
    LAMINA_REQUIRE(before.count(entry.first), source, ": it holds a state for layer '",
                   entry.first, "', which the ", Phase_Name(phase_), " net '", name_,
                   "' has not (or which keeps no state); it was written for a different net");
  }
  for (const auto& entry : before) {
    auto it = states.find(entry.first);
    LAMINA_REQUIRE(it != states.end(), source, ": it holds no state for layer '", entry.first,
                   "' of the ", Phase_Name(phase_), " net '", name_,
                   "'; it was written for a different net");
    LAMINA_REQUIRE(it->second.size() == entry.second.size(), source, ": layer '", entry.first,
                   "' keeps ", entry.second.size(), " state values, the file holds ",
                   it->second.size());
  }
  std::vector<Layer*> done;
  try {
    for (auto& layer : layers_) {
      auto it = states.find(layer->name());
      if (it == states.end()) continue;
      layer->set_state(it->second);
      done.push_back(layer.get());
    }
  } catch (const Error& e) {
    for (Layer* layer : done) layer->set_state(before.at(layer->name()));  // roll back
    fail(source, ": ", e.what());
  }
}

namespace {

// "" when every value of values is finite; else how many are not and the first of them.
std::string nonfinite_values(const std::vector<float>& values) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isfinite(values[i])) continue;
    if (first < 0) first = int64_t(i);
    ++bad;
  }
  if (bad == 0) return {};
  std::ostringstream out;
  const float v = values[first];
  out << bad << " of " << values.size() << " values are not finite, the first ("
      << (std::isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf") << ") at index " << first;
  return out.str();
}

}  // namespace

std::string Net::find_nonfinite() {
  auto describe = [&](int i) {
    return "layer '" + layers_[i]->name() + "' (" + layers_[i]->type() + ")";
  };
  for (int i = 0; i < num_layers(); ++i) {
    forward_layer(i);
    for (int t : io_[i].tops) {
      const std::string bad = nonfinite_values(blobs_[t]->copy_data_to_host());
      if (!bad.empty())
        return "the forward pass: " + describe(i) + " output '" + blobs_[t]->name() + "': " + bad;
    }
  }
  zero_param_diffs();
  for (const auto& l : loss_blobs_) backend_.fill(1, l.second, blobs_[l.first]->mutable_diff());
  for (int i = num_layers() - 1; i >= 0; --i) {
    if (!needs_backward_[i]) continue;
    backward_layer(i);
    for (const Param& p : layers_[i]->params()) {
      const std::string bad = nonfinite_values(p.tensor->copy_diff_to_host());
      if (!bad.empty())
        return "the backward pass: " + describe(i) + " gradient of parameter '" +
               p.tensor->name() + "': " + bad;
    }
    for (size_t j = 0; j < io_[i].bottoms.size(); ++j) {
      if (!propagate_[i][j]) continue;
      const Tensor& b = *blobs_[io_[i].bottoms[j]];
      const std::string bad = nonfinite_values(b.copy_diff_to_host());
      if (!bad.empty())
        return "the backward pass: " + describe(i) + " gradient of input '" + b.name() +
               "': " + bad;
    }
  }
  return {};
}

bool Net::has_blob(const std::string& name) const { return blob_index_.count(name) > 0; }

Tensor& Net::blob(const std::string& name) {
  auto it = blob_index_.find(name);
  if (it == blob_index_.end()) {
    std::string known;
    for (const auto& b : blob_index_) known += (known.empty() ? "" : ", ") + b.first;
    fail("net '", name_, "' has no blob '", name, "'; its blobs: ", known);
  }
  return *blobs_[it->second];
}

std::vector<std::string> Net::blob_names() const {
  std::vector<std::string> names;
  for (const auto& b : blobs_) names.push_back(b->name());
  return names;
}

}  // namespace lamina
