#include "lamina/io.hpp"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <filesystem>

#include "lamina/common.hpp"
#include "lamina/file_access.hpp"
#include "lamina/upgrade_v1.hpp"

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
    // protobuf says "Message is too deep, the parser exceeded the configured recursion
    // limit of N."; say what counts as a level.
    if (message.find("recursion limit") != std::string::npos)
      text_ += " Messages nest at most " + std::to_string(kMaxPrototxtDepth) +
               " deep (each `layer { }` or `*_param { }` inside another is one level); "
               "flatten the nesting of Sequential containers";
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
  parser.SetRecursionLimit(kMaxPrototxtDepth);
  parser.RecordErrorsTo(&collector);
  if (!parser.ParseFromString(text, &message)) {
    fail("cannot read ", what, " ", source, ":\n", collector.text());
  }
  return message;
}

}  // namespace

std::string read_text_file(const std::string& path, const std::string& what) {
  return InputFile(path, what).read_all(kMaxTextFileBytes);
}

std::string resolve_path(const std::string& path, const std::string& relative_to) {
  namespace fs = std::filesystem;
  // The error_code overloads: a symlink loop or a name too long is "does not exist" here,
  // and reported by whoever opens the path.
  std::error_code ignored;
  if (path.empty() || fs::path(path).is_absolute() || fs::exists(path, ignored)) return path;
  const fs::path candidate = fs::path(relative_to).parent_path() / path;
  return fs::exists(candidate, ignored) ? candidate.string() : path;
}

NetParameter parse_net_parameter(const std::string& text, const std::string& source) {
  return upgrade_v1_net(parse<NetParameter>(text, source, "net"), source);
}

SolverParameter parse_solver_parameter(const std::string& text, const std::string& source) {
  return parse<SolverParameter>(text, source, "solver");
}

NetParameter read_net_parameter(const std::string& path) {
  return parse_net_parameter(read_text_file(path, "net file"), path);
}

SolverParameter read_solver_parameter(const std::string& path) {
  return parse_solver_parameter(read_text_file(path, "solver file"), path);
}

int layer_line(const std::string& path, const std::vector<int>& index_path) {
  if (path.empty() || index_path.empty()) return 0;
  std::string text;
  try {
    text = read_text_file(path, "net file");
  } catch (const Error&) {
    return 0;  // replaced since it was parsed: the message goes without a line
  }
  NetParameter param;
  pb::TextFormat::ParseInfoTree tree;
  pb::TextFormat::Parser parser;
  parser.SetRecursionLimit(kMaxPrototxtDepth);
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(text, &param)) return 0;

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
