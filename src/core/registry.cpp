#include "lamina/registry.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

namespace lamina {
namespace {

std::map<std::string, LayerFactory>& factories() {
  static std::map<std::string, LayerFactory> map;
  return map;
}
std::set<std::string>& builtins() {
  static std::set<std::string> set;
  return set;
}
bool registering_builtins = false;  // under the registry mutex
std::recursive_mutex& registry_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}
std::vector<std::string>& load_errors() {  // add_at_load's, under the registry mutex
  static std::vector<std::string> errors;
  return errors;
}
void ensure_builtins() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::lock_guard<std::recursive_mutex> lock(registry_mutex());
    registering_builtins = true;
    register_builtin_layers();
    registering_builtins = false;
  });
}

}  // namespace

void LayerRegistry::add(const std::string& type, LayerFactory factory) {
  std::lock_guard<std::recursive_mutex> lock(registry_mutex());
  LAMINA_REQUIRE(!type.empty(), "a layer type needs a non-empty name");
  LAMINA_REQUIRE(type != "Sequential", "'Sequential' is the net's container and cannot be "
                 "registered as a layer type");
  auto inserted = factories().emplace(type, std::move(factory));
  LAMINA_REQUIRE(inserted.second, "layer type '", type, "' is registered twice");
  if (registering_builtins) builtins().insert(type);
}

void LayerRegistry::add_at_load(const std::string& type, LayerFactory factory) noexcept {
  try {
    add(type, std::move(factory));
  } catch (const std::exception& e) {
    std::lock_guard<std::recursive_mutex> lock(registry_mutex());
    load_errors().push_back(e.what());
  }
}

void LayerRegistry::throw_load_error() {
  std::lock_guard<std::recursive_mutex> lock(registry_mutex());
  if (load_errors().empty()) return;
  const std::string first = load_errors().front();
  load_errors().clear();
  fail(first);
}

bool LayerRegistry::has(const std::string& type) {
  ensure_builtins();
  throw_load_error();
  std::lock_guard<std::recursive_mutex> lock(registry_mutex());
  return factories().count(type) > 0;
}

std::vector<std::string> LayerRegistry::types() {
  ensure_builtins();
  throw_load_error();
  std::lock_guard<std::recursive_mutex> lock(registry_mutex());
  std::vector<std::string> names = {"Sequential"};
  for (const auto& entry : factories()) names.push_back(entry.first);
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<Layer> LayerRegistry::create(const LayerParameter& param,
                                             const LayerContext& context) {
  ensure_builtins();
  throw_load_error();
  LayerFactory factory;
  LayerContext built = context;
  {
    std::lock_guard<std::recursive_mutex> lock(registry_mutex());
    auto it = factories().find(param.type());
    if (it == factories().end()) {
      std::string known;
      for (const std::string& t : types()) known += (known.empty() ? "" : ", ") + t;
      fail("layer '", param.name(), "': unknown type '", param.type(), "'. Known types: ", known,
           ". A custom layer must be registered (LAMINA_REGISTER_LAYER) before the net is built, "
           "or its plugin loaded (lamina --plugin FILE, LAMINA_PLUGIN_PATH; docs/plugins.md).");
    }
    factory = it->second;
    built.builtin = builtins().count(param.type()) > 0;
  }
  return factory(param, built);
}

}  // namespace lamina
