#include "lamina/layer.hpp"

#include <algorithm>

namespace lamina {

Layer::Layer(const LayerParameter& param, const LayerContext& context)
    : param_(param), backend_(context.backend), phase_(context.phase), seed_(context.seed) {}

Tensor& Layer::add_param(const std::string& role, const Shape& shape,
                         const FillerParameter& filler) {
  Param p;
  p.tensor = std::make_unique<Tensor>(shape, name() + "/" + role);
  p.filler = filler;
  params_.push_back(std::move(p));
  return *params_.back().tensor;
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

}  // namespace lamina
