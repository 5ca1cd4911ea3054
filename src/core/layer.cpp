#include "lamina/layer.hpp"

#include <glog/logging.h>

#include <algorithm>

namespace lamina {

Layer::Layer(const LayerParameter& param, const LayerContext& context)
    : param_(param),
      backend_(context.backend),
      phase_(context.phase),
      seed_(context.seed),
      builtin_(context.builtin) {}

Tensor& Layer::add_param(const std::string& role, const Shape& shape,
                         const FillerParameter& filler) {
  if (reshaping_param_ >= 0) {
    const int i = reshaping_param_++;
    LAMINA_REQUIRE(i < int(params_.size()), where(), "it declares more parameters when its "
                   "bottoms change shape; it cannot follow a layer whose tops change shape "
                   "from pass to pass (Filter)");
    Tensor& t = *params_[i].tensor;
    LAMINA_REQUIRE(t.shape() == shape, where(), "its parameter '", t.name(), "' would change "
                   "shape from ", t.shape_string(), " to ", shape_string(shape), " as its bottoms "
                   "change shape from pass to pass (behind a Filter); a parameter's shape must "
                   "not depend on the number of rows");
    return t;
  }
  Param p;
  p.tensor = std::make_unique<Tensor>(shape, name() + "/" + role);
  p.filler = filler;
  params_.push_back(std::move(p));
  return *params_.back().tensor;
}

void Layer::warn(const std::string& message) const {
  if (!reshaping()) LOG(WARNING) << where() << message;
}

void Layer::reshape(const Tensors& bottom, const Tensors& top) {
  reshaping_param_ = 0;
  try {
    setup(bottom, top);
  } catch (...) {
    reshaping_param_ = -1;
    throw;
  }
  const int declared = reshaping_param_;
  reshaping_param_ = -1;
  LAMINA_REQUIRE(declared == int(params_.size()), where(), "it declares fewer parameters when "
                 "its bottoms change shape; it cannot follow a layer whose tops change shape "
                 "from pass to pass (Filter)");
}

bool Layer::set_worker(int /*rank*/, int workers) { return workers == 1 || max_bottoms() != 0; }

std::optional<std::string> Layer::capture_blocker() const {
  if (builtin_) return std::string();
  return std::nullopt;
}

void Layer::set_state(const std::vector<int64_t>& state) {
  LAMINA_REQUIRE(state.empty(), where(), "the snapshot holds ", state.size(),
                 " state value(s) for this layer, which keeps no state");
}

std::string Layer::where() const { return "layer '" + name() + "' (" + type() + "): "; }

void Layer::require_custom_keys(const std::vector<std::string>& known) const {
  for (const auto& entry : param_.custom_param().entry()) {
    if (std::find(known.begin(), known.end(), entry.key()) != known.end()) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    fail(where(), "unknown custom_param key '", entry.key(), "'; this layer takes: ",
         list.empty() ? "none" : list);
  }
}

bool Layer::has_custom(const std::string& key) const {
  for (const auto& entry : param_.custom_param().entry())
    if (entry.key() == key) return true;
  return false;
}

std::string Layer::custom_string(const std::string& key, const std::string& fallback) const {
  const std::string* found = nullptr;
  for (const auto& entry : param_.custom_param().entry()) {
    if (entry.key() != key) continue;
    LAMINA_REQUIRE(!found, where(), "custom_param key '", key, "' is given twice");
    found = &entry.value();
  }
  return found ? *found : fallback;
}

double Layer::custom_number(const std::string& key, double fallback) const {
  if (!has_custom(key)) return fallback;
  const std::string text = custom_string(key, "");
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  LAMINA_REQUIRE(used > 0 && used == text.size(), where(), "custom_param '", key, "' is '", text,
                 "', not a number");
  return value;
}

bool works_in_place(const Tensors& bottom, const Tensors& top) {
  for (const Tensor* t : top)
    if (std::find(bottom.begin(), bottom.end(), t) != bottom.end()) return true;
  return false;
}

void check_in_place(const Layer& layer, const Tensors& bottom, const Tensors& top,
                    const std::vector<EarlierLayer>& earlier) {
  const std::string where = "layer '" + layer.name() + "' (" + layer.type() + "): ";
  for (const Tensor* t : top) {
    const auto b = std::find(bottom.begin(), bottom.end(), t);
    if (b == bottom.end()) continue;
    const std::string fix = "; give the top its own name (e.g. top: \"" + t->name() + "_" +
                            layer.name() + "\") and have the layers after it read that name";
    const std::string which =
        bottom.size() > 1 ? "bottom " + std::to_string(b - bottom.begin()) : "bottom";
    LAMINA_REQUIRE(layer.supports_in_place(), where, "cannot work in place: its top '",
                   t->name(), "' is also its ", which, fix);
    // The values are those of the first earlier layer that wrote t; a view (Flatten,
    // Reshape, Split) shares them with its bottom.
    const Layer* producer = nullptr;
    for (const EarlierLayer& e : earlier) {
      if (!producer && std::find(e.tops.begin(), e.tops.end(), t) != e.tops.end())
        producer = e.layer;
    }
    for (const EarlierLayer& e : earlier) {
      for (const Tensor* u : e.tops) {
        if (&u->data_memory() != &t->data_memory()) continue;
        LAMINA_REQUIRE(u == t, where, "cannot work in place on '", t->name(), "': it shares "
                       "its values with '", u->name(), "' (",
                       producer ? "layer '" + producer->name() + "' (" + producer->type() + ")"
                                : std::string("the layer that made it"),
                       " outputs a view, not a copy), and writing it would change '", u->name(),
                       "' too", fix);
        const Layer::TopUse use = e.layer->backward_reads_top();
        const bool kept = use == Layer::TopUse::kNothing ||
                          (use == Layer::TopUse::kPositive && layer.keeps_positive_in_place());
        LAMINA_REQUIRE(kept, where, "cannot work in place on '", t->name(), "': layer '",
                       e.layer->name(), "' (", e.layer->type(), ") before it reads ",
                       use == Layer::TopUse::kPositive ? "which of those values are positive"
                                                       : "those values",
                       " in its backward pass, and this layer would overwrite them", fix);
      }
    }
  }
}

}  // namespace lamina
