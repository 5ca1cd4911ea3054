// Loading layer plugins (plugin.hpp): check the version mark in the file, open it (its
// layers register as it is opened), report what it added.
#include "lamina/plugin.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <glog/logging.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>

#include "lamina/common.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

namespace fs = std::filesystem;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LAMINA_REQUIRE(in, "cannot read plugin '", path, "'");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The libraries a 64-bit ELF shared object names as needed (its DT_NEEDED entries), read
// from its section headers; empty when the bytes are not such an object.
std::vector<std::string> needed_libraries(const std::string& bytes) {
  std::vector<std::string> needed;
  Elf64_Ehdr header;
  if (bytes.size() < sizeof header) return needed;
  std::memcpy(&header, bytes.data(), sizeof header);
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_shentsize != sizeof(Elf64_Shdr))
    return needed;
  auto section = [&](size_t i, Elf64_Shdr& out) {
    const size_t at = header.e_shoff + i * sizeof(Elf64_Shdr);
    if (i >= header.e_shnum || at + sizeof out > bytes.size()) return false;
    std::memcpy(&out, bytes.data() + at, sizeof out);
    return out.sh_offset + out.sh_size <= bytes.size();
  };
  for (size_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr dynamic, strings;
    if (!section(i, dynamic) || dynamic.sh_type != SHT_DYNAMIC) continue;
    if (!section(dynamic.sh_link, strings)) continue;
    for (size_t d = 0; d + sizeof(Elf64_Dyn) <= dynamic.sh_size; d += sizeof(Elf64_Dyn)) {
      Elf64_Dyn entry;
      std::memcpy(&entry, bytes.data() + dynamic.sh_offset + d, sizeof entry);
      if (entry.d_tag == DT_NULL) break;
      if (entry.d_tag != DT_NEEDED || entry.d_un.d_val >= strings.sh_size) continue;
      const char* name = bytes.data() + strings.sh_offset + entry.d_un.d_val;
      needed.emplace_back(name, strnlen(name, strings.sh_size - entry.d_un.d_val));
    }
  }
  return needed;
}

// The versions of Lamina named by the marks in a file's bytes (one per registered layer).
std::set<std::string> marked_versions(const std::string& bytes) {
  const std::string prefix = LAMINA_PLUGIN_MARK_PREFIX;
  std::set<std::string> versions;
  for (size_t at = bytes.find(prefix); at != std::string::npos;
       at = bytes.find(prefix, at + 1)) {
    const size_t start = at + prefix.size();
    const size_t end = bytes.find('\0', start);
    if (end == std::string::npos || end - start > 32) continue;  // not a mark
    versions.insert(bytes.substr(start, end - start));
  }
  return versions;
}

// What can be checked before the file is opened: it is a plugin of this version of Lamina,
// and it links liblamina.so (a plugin with a copy of the library in it would register its
// layers, and its copy of Lamina's protobuf schema, a second time).
void check_plugin_file(const std::string& path) {
  const std::string bytes = read_bytes(path);
  const std::set<std::string> versions = marked_versions(bytes);
  LAMINA_REQUIRE(!versions.empty(), "'", path, "' is not a Lamina plugin: no layer in it is "
                 "registered with LAMINA_REGISTER_LAYER (docs/plugins.md)");
  for (const std::string& v : versions)
    LAMINA_REQUIRE(v == version(), "plugin '", path, "' was built against Lamina ", v,
                   ", but this is Lamina ", version(), ": rebuild the plugin against Lamina ",
                   version());
  const std::vector<std::string> needed = needed_libraries(bytes);
  LAMINA_REQUIRE(std::any_of(needed.begin(), needed.end(),
                             [](const std::string& name) {
                               return name.rfind("liblamina.so", 0) == 0;
                             }),
                 "plugin '", path, "' does not link liblamina.so (it needs: ",
                 needed.empty() ? std::string("nothing") : join(needed), "): link it with "
                 "liblamina.so (CMake: Lamina::lamina; pkg-config: lamina), not liblamina.a, "
                 "so that its layers register in the program's registry");
}

}  // namespace

std::vector<std::string> load_plugin(const std::string& path) {
  static std::mutex mutex;
  static std::set<std::string> loaded;  // canonical paths
  std::lock_guard<std::mutex> lock(mutex);
  std::error_code error;
  LAMINA_REQUIRE(fs::is_regular_file(path, error), "plugin '", path, "' does not exist or is "
                 "not a file");
  const std::string canonical = fs::canonical(path).string();
  if (loaded.count(canonical)) return {};
  check_plugin_file(path);

  const std::vector<std::string> before = LayerRegistry::types();
  // By path (a name without a slash would be searched for in the loader's folders).
  const std::string open_path = canonical;
  void* handle = dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  LAMINA_REQUIRE(handle, "cannot load plugin '", path, "': ", dlerror());
  loaded.insert(canonical);
  try {
    LayerRegistry::throw_load_error();
  } catch (const Error& e) {
    fail("plugin '", path, "': ", e.what());
  }
  const std::vector<std::string> after = LayerRegistry::types();
  std::vector<std::string> added;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(),
                      std::back_inserter(added));
  LAMINA_REQUIRE(!added.empty(), "plugin '", path, "' registered no layer type");
  LOG(INFO) << "Plugin " << path << ": layer types " << join(added);
  return added;
}

std::vector<std::string> plugin_path_files(const std::string& value) {
  std::vector<std::string> files;
  std::stringstream entries(value);
  std::string entry;
  while (std::getline(entries, entry, ':')) {
    if (entry.empty()) continue;
    std::error_code error;
    if (fs::is_directory(entry, error)) {
      std::vector<std::string> in_folder;
      for (const fs::directory_entry& e : fs::directory_iterator(entry))
        if (e.path().extension() == ".so") in_folder.push_back(e.path().string());
      std::sort(in_folder.begin(), in_folder.end());
      files.insert(files.end(), in_folder.begin(), in_folder.end());
      continue;
    }
    LAMINA_REQUIRE(fs::exists(entry, error), "LAMINA_PLUGIN_PATH names '", entry,
                   "', which does not exist (its entries are plugin files and folders of "
                   "them, separated by ':')");
    files.push_back(entry);
  }
  return files;
}

std::vector<std::string> load_plugins_from_environment() {
  const char* value = std::getenv("LAMINA_PLUGIN_PATH");
  if (value == nullptr) return {};
  const std::vector<std::string> files = plugin_path_files(value);
  for (const std::string& file : files) load_plugin(file);
  return files;
}

}  // namespace lamina
