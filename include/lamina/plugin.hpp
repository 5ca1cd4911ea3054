// Layer plugins: shared objects holding custom layers, loaded into a program at run time.
//
// A plugin is a shared library whose layers register with LAMINA_REGISTER_LAYER
// (registry.hpp) and which links liblamina.so (CMake: Lamina::lamina), so that its layers
// land in the one registry of the program that loads it:
//   add_library(mylayers MODULE my_layer.cpp)
//   target_link_libraries(mylayers PRIVATE Lamina::lamina)
// The lamina tool loads plugins named by --plugin FILE and by LAMINA_PLUGIN_PATH
// (docs/plugins.md). Plugins are never unloaded: their layers' code must stay.
#pragma once

#include <string>
#include <vector>

namespace lamina {

// Loads the plugin at `path` and returns the layer types it registered (sorted). Before
// the file is opened, the Lamina version it was compiled against (the mark
// LAMINA_REGISTER_LAYER leaves in it) must be this library's: a plugin built against
// another version is refused, naming both, and so is one that does not link liblamina.so
// (a copy of the library in it would keep a registry of its own). Errors (lamina::Error)
// name the file: missing, not a plugin (no mark), another version, not linking
// liblamina.so, a library the loader cannot open (with the loader's reason), a type
// registered twice, or no layer type registered. Loading a file that
// is already loaded does nothing and returns no types. Thread-safe.
std::vector<std::string> load_plugin(const std::string& path);

// The plugin files LAMINA_PLUGIN_PATH's value names, in order: a colon-separated list of
// plugin files and of folders, which stand for the *.so files in them (sorted by name).
// Empty entries are skipped; an entry that does not exist is an error naming it.
std::vector<std::string> plugin_path_files(const std::string& value);

// Loads every plugin of the LAMINA_PLUGIN_PATH environment variable (none when unset) and
// returns the files loaded.
std::vector<std::string> load_plugins_from_environment();

}  // namespace lamina
