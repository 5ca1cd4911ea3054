// Layer plugins (plugin.hpp): the custom-layer example built as a plugin is loaded and its
// layer runs in a net; files that are not plugins of this Lamina are refused, by name, before
// they are opened.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/plugin.hpp"
#include "lamina/registry.hpp"
#include "lamina/version.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

// The plugins this build made; the environment may name copies (a build run elsewhere).
std::string path_of(const char* variable, const char* built) {
  const char* env = std::getenv(variable);
  return env && *env ? env : built;
}
const std::string kSquarePlugin = path_of("LAMINA_SQUARE_PLUGIN", LAMINA_SQUARE_PLUGIN);
const std::string kStaticPlugin =
    path_of("LAMINA_STATIC_SQUARE_PLUGIN", LAMINA_STATIC_SQUARE_PLUGIN);

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Plugin, LoadsTheSquareLayerWhichThenRunsInANet) {
  load_plugin(kSquarePlugin);  // the first test to run may be another
  ASSERT_TRUE(LayerRegistry::has("Square"));
  EXPECT_TRUE(load_plugin(kSquarePlugin).empty()) << "a loaded plugin loads once";
  const NetParameter param = parse_net_parameter(R"(
    layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
    layer { name: "sq" type: "Square" bottom: "x" top: "y"
            custom_param { entry { key: "scale" value: "0.5" } } })", "square");
  NativeBackend backend;
  Net net(param, Phase::TEST, backend, 1);
  const std::vector<float> x = {1, -2, 3, 0.5f, -0.25f, 4};
  net.blob("x").copy_data_from_host(x);
  net.forward();
  const std::vector<float> y = net.blob("y").copy_data_to_host();
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], 0.5f * x[i] * x[i]) << i;
}

TEST(Plugin, AnotherVersionIsRefusedNamingBoth) {
  TempDir dir;
  std::string bytes = read_all(kSquarePlugin);
  const std::string mark = std::string(LAMINA_PLUGIN_MARK_PREFIX) + version();
  const size_t at = bytes.find(mark);
  ASSERT_NE(at, std::string::npos) << "the plugin carries its version mark";
  bytes.replace(at, mark.size(), std::string(LAMINA_PLUGIN_MARK_PREFIX) + "9.8.7");
  const std::string old_plugin = dir / "libold.so";
  write_bytes(old_plugin, bytes);
  const std::string message = error_of([&] { load_plugin(old_plugin); });
  EXPECT_NE(message.find("built against Lamina 9.8.7"), std::string::npos) << message;
  EXPECT_NE(message.find(std::string("this is Lamina ") + version()), std::string::npos)
      << message;
  EXPECT_NE(message.find(old_plugin), std::string::npos) << message;
}

TEST(Plugin, APluginWithLaminaLinkedStaticallyIsRefusedBeforeItIsOpened) {
  const std::string message = error_of([&] { load_plugin(kStaticPlugin); });
  EXPECT_NE(message.find("does not link liblamina.so"), std::string::npos) << message;
  EXPECT_NE(message.find("Lamina::lamina"), std::string::npos) << message;
}

TEST(Plugin, FilesThatAreNotPluginsAreRefused) {
  TempDir dir;
  EXPECT_NE(error_of([&] { load_plugin(dir / "missing.so"); }).find("does not exist"),
            std::string::npos);
  const std::string text = dir.write("notes.so", "not a shared object");
  EXPECT_NE(error_of([&] { load_plugin(text); }).find("is not a Lamina plugin"),
            std::string::npos);
}

TEST(Plugin, ATypeRegisteredTwiceIsAnErrorNamingThePlugin) {
  load_plugin(kSquarePlugin);
  TempDir dir;
  const std::string copy = dir / "libsquare_again.so";
  std::filesystem::copy_file(kSquarePlugin, copy);
  const std::string message = error_of([&] { load_plugin(copy); });
  EXPECT_NE(message.find("layer type 'Square' is registered twice"), std::string::npos)
      << message;
  EXPECT_NE(message.find(copy), std::string::npos) << message;
}

TEST(Plugin, PluginPathListsFilesAndTheSharedObjectsOfFolders) {
  TempDir dir;
  dir.write("folder/libb.so", "");
  dir.write("folder/liba.so", "");
  dir.write("folder/readme.txt", "");
  const std::string single = dir.write("single.so", "");
  const std::vector<std::string> files =
      plugin_path_files(single + "::" + (dir / "folder") + ":");
  const std::vector<std::string> expected = {single, dir / "folder/liba.so",
                                             dir / "folder/libb.so"};
  EXPECT_EQ(files, expected);
  const std::string message = error_of([&] { plugin_path_files(dir / "nowhere.so"); });
  EXPECT_NE(message.find("LAMINA_PLUGIN_PATH names '" + (dir / "nowhere.so")),
            std::string::npos) << message;
}

}  // namespace
}  // namespace lamina
