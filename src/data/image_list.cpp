// Caffe's image list files (image_list.hpp).
#include "lamina/image_list.hpp"

#include <cerrno>
#include <cstdlib>

#include "lamina/common.hpp"
#include "lamina/file_access.hpp"

namespace lamina {
namespace {

// A list file larger than this is not one: 4 GiB holds tens of millions of lines.
constexpr int64_t kMaxListBytes = int64_t{1} << 32;

// "-12" or "7" as an int32, or false.
bool parse_label(const std::string& text, int32_t& label) {
  if (text.empty() || text.find_first_not_of("+-0123456789") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value < INT32_MIN || value > INT32_MAX) return false;
  label = int32_t(value);
  return true;
}

}  // namespace

std::string image_list_prefix(const std::string& list, const ImageListEntry& entry) {
  return "list file " + quoted_path(list) + ", line " + std::to_string(entry.line) + ": ";
}

std::vector<ImageListEntry> read_image_list(const std::string& path) {
  InputFile file(path, "image list file");
  const std::string text = file.read_all(kMaxListBytes);
  std::vector<ImageListEntry> entries;
  int64_t line_number = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank
    ImageListEntry entry;
    entry.line = line_number;
    const std::string where = image_list_prefix(path, entry);
    const size_t space = line.rfind(' ');
    LAMINA_REQUIRE(space != std::string::npos, where, "'", line, "' has no label; a line is "
                   "PATH LABEL, the label after the last space");
    entry.path = line.substr(0, space);
    LAMINA_REQUIRE(!entry.path.empty(), where, "'", line, "' has no path; a line is PATH LABEL");
    LAMINA_REQUIRE(parse_label(line.substr(space + 1), entry.label), where, "the label '",
                   line.substr(space + 1), "' (after the last space) is not an integer",
                   " (in int32); a line is PATH LABEL");
    entries.push_back(std::move(entry));
  }
  LAMINA_REQUIRE(!entries.empty(), file.prefix(), "lists no images; a line is PATH LABEL");
  return entries;
}

}  // namespace lamina
