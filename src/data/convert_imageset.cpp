// Caffe's convert_imageset (data_tools.hpp): a list file of images to a database of Datums.
#include <algorithm>
#include <cctype>
#include <vector>

#include "datum_writer.hpp"
#include "lamina/data_tools.hpp"
#include "lamina/datum.hpp"
#include "lamina/file_access.hpp"
#include "lamina/image.hpp"
#include "lamina/image_list.hpp"
#include "lamina/seeded_shuffle.hpp"

namespace lamina {
namespace {

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return text;
}

// The text after the last '.' (the whole name without one), lowercase, as Caffe's matchExt.
std::string extension(const std::string& path) {
  const size_t dot = path.rfind('.');
  return lowercase(dot == std::string::npos ? path : path.substr(dot + 1));
}

// Caffe's matchExt: "jpeg" counts as "jpg".
bool has_type(const std::string& path, const std::string& type) {
  const std::string ext = extension(path);
  return ext == type || (type == "jpg" && ext == "jpeg");
}

void check_options(const ImagesetOptions& o) {
  LAMINA_REQUIRE(o.resize_height >= 0 && o.resize_width >= 0 &&
                     (o.resize_height > 0) == (o.resize_width > 0),
                 "--resize_height ", o.resize_height, " and --resize_width ", o.resize_width,
                 ": give both (positive), or neither to keep each image's size");
  LAMINA_REQUIRE(o.resize_height <= kMaxImagePixels / std::max<int64_t>(o.resize_width, 1),
                 "--resize_height ", o.resize_height, " x --resize_width ", o.resize_width,
                 " is more than the ", kMaxImagePixels, " pixels an image may have");
  const std::string type = lowercase(o.encode_type);
  LAMINA_REQUIRE(type.empty() || type == "jpg" || type == "jpeg" || type == "png",
                 "--encode_type '", o.encode_type, "': Lamina encodes jpg and png");
}

// One image to a Datum, as Caffe's ReadImageToDatum. Returns the decoded (resized) shape.
class ImageConverter {
 public:
  ImageConverter(std::string root, const ImagesetOptions& options)
      : root_(std::move(root)), options_(options), type_(lowercase(options.encode_type)) {
    if (type_ == "jpeg") type_ = "jpg";
  }

  DatumShape convert(const ImageListEntry& entry, Datum& datum) {
    const std::string file = root_ + entry.path;
    const std::string bytes = read_file(file);
    decode_image(bytes, options_.gray ? ImageMode::kGray : ImageMode::kColor,
                 "image " + quoted_path(file), image_);
    const bool resize = options_.resize_height > 0;
    if (resize) resize_image(image_, options_.resize_height, options_.resize_width, resized_);
    const Image& pixels = resize ? resized_ : image_;
    datum.Clear();
    datum.set_label(entry.label);
    if (!options_.encoded && type_.empty()) {
      datum.set_channels(int(pixels.channels));
      datum.set_height(int(pixels.height));
      datum.set_width(int(pixels.width));
      datum.mutable_data()->resize(size_t(pixels.count()));
      image_to_chw(pixels, reinterpret_cast<uint8_t*>(datum.mutable_data()->data()));
      datum.set_encoded(false);  // Caffe's CVMatToDatum writes the field
    } else if (!resize && (type_.empty() || has_type(entry.path, type_))) {
      datum.set_data(bytes);  // Caffe's ReadFileToDatum: the file itself
      datum.set_encoded(true);
    } else {
      datum.set_data(encode_image(pixels, type_.empty() ? extension(entry.path) : type_));
      datum.set_encoded(true);
    }
    return {pixels.channels, pixels.height, pixels.width};
  }

 private:
  std::string read_file(const std::string& file) const {
    try {
      return read_image_file(file);
    } catch (const Error& e) {
      if (root_.empty() || root_.back() == '/') throw;
      throw Error(std::string(e.what()) + " (ROOT " + quoted_path(root_) + " is prepended as "
                  "it is: end it with / for a folder)");
    }
  }

  std::string root_;
  const ImagesetOptions& options_;
  std::string type_;  // encode_type, "jpeg" as "jpg"
  Image image_, resized_;
};

// The records of the images, in order, into a new database at path.
void write_imageset(const std::string& root, const std::string& list,
                    const std::vector<ImageListEntry>& entries, const std::string& path,
                    const ImagesetOptions& options) {
  ImageConverter converter(root, options);
  DatumShape first;
  write_datums(path, options.backend, "list file " + quoted_path(list),
               int64_t(entries.size()), [&](int64_t i, Datum& datum) {
                 const ImageListEntry& entry = entries[size_t(i)];
                 try {
                   const DatumShape shape = converter.convert(entry, datum);
                   if (i == 0) first = shape;
                   LAMINA_REQUIRE(!options.check_size || shape == first, "image '",
                                  entry.path, "' is ", shape_text(shape),
                                  " (C x H x W), but the first is ", shape_text(first),
                                  " (--check_size)");
                 } catch (const Error& e) {
                   throw Error(image_list_prefix(list, entry) + e.what());
                 }
                 return "_" + entry.path;
               });
}

}  // namespace

int64_t convert_imageset(const std::string& root, const std::string& list,
                         const std::string& db_path, const ImagesetOptions& options) {
  check_options(options);
  std::vector<ImageListEntry> entries = read_image_list(list);
  if (options.shuffle) {
    const std::vector<int32_t> order =
        epoch_permutation(options.seed, 0, int64_t(entries.size()));
    std::vector<ImageListEntry> shuffled;
    shuffled.reserve(entries.size());
    for (int32_t i : order) shuffled.push_back(std::move(entries[size_t(i)]));
    entries = std::move(shuffled);
  }
  write_imageset(root, list, entries, db_path, options);
  return int64_t(entries.size());
}

}  // namespace lamina
