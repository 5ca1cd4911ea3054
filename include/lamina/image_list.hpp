// Caffe's image list files (convert_imageset's LISTFILE, ImageData's source): one image a
// line, "PATH LABEL", split at the last space so that paths may hold spaces, as Caffe does.
// Lamina refuses what Caffe would read as label 0 or skip later: a line without a space, a
// label that is not an integer (in int32), an empty path. Blank lines are skipped, and a
// line may end in CR (a list written on Windows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lamina {

struct ImageListEntry {
  std::string path;  // as listed (the root folder is prepended where it is read)
  int32_t label = 0;
  int64_t line = 0;  // 1-based, for messages
};

// The entries of a list file; every problem is an Error naming the file and the line. An
// empty list is an Error too.
std::vector<ImageListEntry> read_image_list(const std::string& path);

// "list file 'train.txt', line 12: ", the start of messages about an entry.
std::string image_list_prefix(const std::string& list, const ImageListEntry& entry);

}  // namespace lamina
