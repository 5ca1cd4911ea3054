// Reading prototxt files. Parse errors name file:line:column; messages about a layer name
// the file and line where that layer starts.
//
// Files are opened through file_access.hpp: a directory, FIFO, device, symlink loop or a
// file over kMaxTextFileBytes (64 MiB) is refused with the path and the problem. Messages
// nest at most kMaxPrototxtDepth deep; a deeper file is refused by the parser, so nothing
// that walks a parsed message (protobuf itself, the net builder flattening Sequential
// containers) recurses deeper than that.
#pragma once

#include <string>
#include <vector>

#include "lamina/lamina.pb.h"

namespace lamina {

// The deepest nesting of messages a prototxt may have. Each message inside another is one
// level: `layer { }` in a net is 1, a layer in a Sequential 2, its `*_param { }` 3, a
// filler in that 4. Real nets stay under 20.
constexpr int kMaxPrototxtDepth = 100;

NetParameter read_net_parameter(const std::string& path);
SolverParameter read_solver_parameter(const std::string& path);
// Parses prototxt text; `source` names it in errors. A net in Caffe's V1 syntax comes back
// upgraded (upgrade_v1.hpp, whose log line names source).
NetParameter parse_net_parameter(const std::string& text, const std::string& source);
SolverParameter parse_solver_parameter(const std::string& text, const std::string& source);

// The 1-based line where a layer starts in a net prototxt file; index_path is the layer's
// index in NetParameter.layer, then in each enclosing Sequential's layer list. 0 if unknown
// (also when the file can no longer be read: it is only used in messages).
int layer_line(const std::string& path, const std::vector<int>& index_path);

// A whole text file of at most kMaxTextFileBytes; `what` names its use in messages.
std::string read_text_file(const std::string& path, const std::string& what = "text file");
// Resolves path against the directory of relative_to (a file path) unless it is absolute
// or exists as given.
std::string resolve_path(const std::string& path, const std::string& relative_to);

}  // namespace lamina
