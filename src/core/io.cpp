#include "lamina/io.hpp"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lamina/common.hpp"

namespace lamina {
namespace {

namespace pb = google::protobuf;

// Collects the text parser's messages as "file:line:column: message".
class Collector : public pb::io::ErrorCollector {
 public:
  explicit Collector(const std::string& source) : source_(source) {}
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!text_.empty()) text_ += "\n";
    text_ += source_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) +
             ": " + message;
  }
  void AddWarning(int line, pb::io::ColumnNumber column, const std::string& message) override {
    AddError(line, column, "warning: " + message);
  }
  const std::string& text() const { return text_; }

 private:
  std::string source_;
  std::string text_;
};

template <class Message>
Message parse(const std::string& text, const std::string& source, const char* what) {
  Message message;
  Collector collector(source.empty() ? std::string("<text>") : source);
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  if (!parser.ParseFromString(text, &message)) {
    fail("cannot read ", what, " ", source, ":\n", collector.text());
  }
  return message;
}

}  // namespace

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  LAMINA_REQUIRE(in.good(), "cannot open '", path, "': ",
                 std::filesystem::exists(path) ? "permission denied" : "no such file");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string resolve_path(const std::string& path, const std::string& relative_to) {
  namespace fs = std::filesystem;
  if (path.empty() || fs::path(path).is_absolute() || fs::exists(path)) return path;
  const fs::path candidate = fs::path(relative_to).parent_path() / path;
  return fs::exists(candidate) ? candidate.string() : path;
}

NetParameter parse_net_parameter(const std::string& text, const std::string& source) {
  return parse<NetParameter>(text, source, "net");
}

SolverParameter parse_solver_parameter(const std::string& text, const std::string& source) {
  return parse<SolverParameter>(text, source, "solver");
}

NetParameter read_net_parameter(const std::string& path) {
  return parse_net_parameter(read_text_file(path), path);
}

SolverParameter read_solver_parameter(const std::string& path) {
  return parse_solver_parameter(read_text_file(path), path);
}

int layer_line(const std::string& path, const std::vector<int>& index_path) {
  if (path.empty() || index_path.empty()) return 0;
  std::ifstream in(path);
  if (!in.good()) return 0;
  std::ostringstream text;
  text << in.rdbuf();
  NetParameter param;
  pb::TextFormat::ParseInfoTree tree;
  pb::TextFormat::Parser parser;
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(text.str(), &param)) return 0;

  const pb::FieldDescriptor* net_layer = NetParameter::descriptor()->FindFieldByName("layer");
  const pb::FieldDescriptor* nested = LayerParameter::descriptor()->FindFieldByName("layer");
  const pb::TextFormat::ParseInfoTree* node = &tree;
  const pb::FieldDescriptor* field = net_layer;
  for (size_t i = 0; i + 1 < index_path.size(); ++i) {
    node = node->GetTreeForNested(field, index_path[i]);
    if (!node) return 0;
    field = nested;
  }
  const auto location = node->GetLocation(field, index_path.back());
  return location.line < 0 ? 0 : location.line + 1;
}

}  // namespace lamina
