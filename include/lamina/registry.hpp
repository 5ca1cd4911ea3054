// Layer types by their prototxt `type` string.
//
// Built-in layers are registered explicitly (register_builtin_layers, called on first use) so
// static linking cannot drop them. A user's layer registers itself from its own source file:
//   LAMINA_REGISTER_LAYER(SquareLayer, "Square");
// or by calling LayerRegistry::add before building a net. A shared object whose layers register
// with the macro is a plugin the lamina tool can load (plugin.hpp): the macro also marks the
// object with the version of Lamina it was compiled against.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/version.hpp"

namespace lamina {

using LayerFactory =
    std::function<std::unique_ptr<Layer>(const LayerParameter&, const LayerContext&)>;

class LayerRegistry {
 public:
  // Throws if the type is already registered.
  static void add(const std::string& type, LayerFactory factory);
  static bool has(const std::string& type);
  // Throws an Error listing the known types when the type is unknown. The layer learns
  // whether its type is one of Lamina's own (LayerContext::builtin).
  static std::unique_ptr<Layer> create(const LayerParameter& param, const LayerContext& context);
  static std::vector<std::string> types();  // sorted
  // A registration made before main() or while a plugin is opened (LAMINA_REGISTER_LAYER):
  // an error is kept instead of thrown, where nothing could catch it, and is thrown by
  // the registry's next call (or by the plugin loader).
  static void add_at_load(const std::string& type, LayerFactory factory) noexcept;
  // Throws the first error kept by add_at_load, if any, and forgets them all.
  static void throw_load_error();
};

template <class LayerClass>
void register_layer(const std::string& type) {
  LayerRegistry::add(type, [](const LayerParameter& p, const LayerContext& c) {
    return std::unique_ptr<Layer>(new LayerClass(p, c));
  });
}

void register_builtin_layers();

namespace detail {
template <class LayerClass>
struct LayerRegistrar {
  explicit LayerRegistrar(const char* type) {
    LayerRegistry::add_at_load(type, [](const LayerParameter& p, const LayerContext& c) {
      return std::unique_ptr<Layer>(new LayerClass(p, c));
    });
  }
};
}  // namespace detail

// The mark the plugin loader reads from a plugin's file before opening it.
#define LAMINA_PLUGIN_MARK_PREFIX "lamina-plugin-version="

#define LAMINA_REGISTER_LAYER(LayerClass, type_string)                              \
  [[gnu::used]] static const char lamina_plugin_mark_##LayerClass[] =               \
      LAMINA_PLUGIN_MARK_PREFIX LAMINA_VERSION_STRING;                              \
  static ::lamina::detail::LayerRegistrar<LayerClass> lamina_registrar_##LayerClass( \
      type_string)

}  // namespace lamina
