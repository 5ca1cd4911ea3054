// Weights files without a net: lamina.read_weights (a Lamina or Caffe file as NumPy arrays)
// and lamina.write_weights (arrays as a Lamina weights file, which Net.load and `lamina test
// --weights` read). Net.load and Net.save (net.cpp) match files against a net's parameters.
#include <vector>

#include "arrays.hpp"
#include "handles.hpp"
#include "lamina/blob_proto.hpp"
#include "lamina/caffe_weights.hpp"
#include "lamina/snapshot.hpp"

namespace lamina::python {

namespace {

py::dict read_weights(const std::string& path) {
  py::dict arrays;
  if (weights_file_is_lamina(path)) {
    SnapshotFile file;
    {
      py::gil_scoped_release unlocked;
      file = read_snapshot_file(path, SnapshotKind::kWeights);
    }
    for (const SnapshotRecord& record : file.records) {
      LAMINA_REQUIRE(record.type == SnapshotRecord::Type::kFloat32, "weights file '", path,
                     "': record '", record.name, "' does not hold float32 values");
      arrays[py::str(record.name)] = copy_of(record.floats, record.shape, true);
    }
    return arrays;
  }
  NetParameter model;
  {
    py::gil_scoped_release unlocked;
    model = read_caffemodel(path);
  }
  for (const LayerParameter& layer : model.layer()) {
    for (int k = 0; k < layer.blobs_size(); ++k) {
      const BlobProto& blob = layer.blobs(k);
      std::vector<float> values(size_t(blob_value_count(blob)));
      copy_blob_values(blob, values.data());
      arrays[py::str(layer.name() + "/" + std::to_string(k))] =
          copy_of(values, blob_shape(blob), true);
    }
  }
  return arrays;
}

void write_weights(const std::string& path, const py::dict& arrays) {
  std::vector<SnapshotRecord> records;
  for (const auto& [key, value] : arrays) {
    const std::string name = py::str(key);
    Shape shape;
    std::vector<float> values = values_of(value, "weights '" + name + "'", &shape);
    records.push_back(SnapshotRecord::of_floats(name, shape, std::move(values)));
  }
  py::gil_scoped_release unlocked;
  write_file_atomically(path, encode_snapshot(SnapshotKind::kWeights, records));
}

}  // namespace

void add_weights(py::module_& m) {
  m.def("read_weights", &read_weights, py::arg("path"),
        "The arrays of a weights file: {'<layer>/<role>': array} for Lamina's files, "
        "{'<layer>/<k>': array} (the layer's k-th blob) for a Caffe model.");
  m.def("write_weights", &write_weights, py::arg("path"), py::arg("arrays"),
        "Writes {name: array} as a Lamina weights file (float32, atomically); Net.load reads "
        "the arrays whose names are the net's parameters.");
}

}  // namespace lamina::python
