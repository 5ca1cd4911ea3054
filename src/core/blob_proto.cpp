// Reading Caffe's BlobProto arrays (blob_proto.hpp).
#include "lamina/blob_proto.hpp"

#include <algorithm>

#include "lamina/file_access.hpp"

namespace lamina {

bool has_legacy_shape(const BlobProto& blob) {
  return blob.has_num() || blob.has_channels() || blob.has_height() || blob.has_width();
}

Shape blob_shape(const BlobProto& blob) {
  if (has_legacy_shape(blob)) return {blob.num(), blob.channels(), blob.height(), blob.width()};
  return Shape(blob.shape().dim().begin(), blob.shape().dim().end());
}

int64_t blob_value_count(const BlobProto& blob) {
  return blob.double_data_size() > 0 ? blob.double_data_size() : blob.data_size();
}

void copy_blob_values(const BlobProto& blob, float* out) {
  if (blob.double_data_size() > 0)
    for (double v : blob.double_data()) *out++ = float(v);
  else
    std::copy(blob.data().begin(), blob.data().end(), out);
}

BlobFile read_blob_proto(const std::string& path, const std::string& what, int64_t max_bytes,
                         const std::string& if_missing) {
  InputFile file(path, what, if_missing);
  BlobProto proto;
  LAMINA_REQUIRE(proto.ParseFromString(file.read_all(max_bytes)), file.prefix(),
                 "is not a BlobProto (Caffe's binary .binaryproto format)");
  BlobFile blob{file.prefix(), blob_shape(proto), {}};
  blob.values.resize(size_t(blob_value_count(proto)));
  copy_blob_values(proto, blob.values.data());
  return blob;
}

}  // namespace lamina
