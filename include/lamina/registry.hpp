// Layer types by their prototxt `type` string.
//
// Built-in layers are registered explicitly (register_builtin_layers, called on first use) so
// static linking cannot drop them. A user's layer registers itself from its own source file:
//   LAMINA_REGISTER_LAYER(SquareLayer, "Square");
// or by calling LayerRegistry::add before building a net.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lamina/layer.hpp"

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
  explicit LayerRegistrar(const char* type) { register_layer<LayerClass>(type); }
};
}  // namespace detail

#define LAMINA_REGISTER_LAYER(LayerClass, type_string) \
  static ::lamina::detail::LayerRegistrar<LayerClass> lamina_registrar_##LayerClass(type_string)

}  // namespace lamina
