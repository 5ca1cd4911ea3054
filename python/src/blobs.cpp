// lamina.Blob (a net's named tensor) and lamina.Param (a learnable parameter in the net's
// arena): their values and gradients as NumPy arrays (arrays.hpp: views on the CPU, copies
// on a device), and assignment of new values on every device.
#include <vector>

#include "arrays.hpp"
#include "handles.hpp"

namespace lamina::python {

namespace {

// ---- blobs ----

std::string blob_label(const BlobRef& b) { return "blob '" + b.tensor->name() + "'"; }

py::object blob_values(const BlobRef& b, py::handle self, bool diff) {
  Tensor& t = *b.tensor;
  LAMINA_REQUIRE(t.has_memory(), blob_label(b), " has no memory yet");
  if (b.net->backend->is_host() && t.dtype() == DType::kF32)
    return view(diff ? t.mutable_diff() : t.mutable_data(), t.shape(), self);
  std::vector<float> values;
  {
    py::gil_scoped_release unlocked;
    values = diff ? t.copy_diff_to_host() : t.copy_data_to_host();
  }
  return copy_of(values, t.shape(), false);
}

void set_blob_values(const BlobRef& b, py::handle array, bool diff) {
  Tensor& t = *b.tensor;
  LAMINA_REQUIRE(t.has_memory(), blob_label(b), " has no memory yet");
  const std::vector<float> values =
      values_for(array, t.shape(), blob_label(b) + (diff ? " (its diff)" : ""));
  py::gil_scoped_release unlocked;
  if (diff) {
    t.copy_diff_from_host(values);
  } else {
    t.copy_data_from_host(values);
  }
}

std::string storage_name(DType t) {
  return t == DType::kF32 ? "float32" : (t == DType::kBF16 ? "bfloat16" : "float16");
}

// ---- parameters: slices of the arena's weights and gradients ----

float* param_array(const ParamRef& p, bool diff) {
  ParamArena& arena = p.net->net->arena();
  return (diff ? arena.diff() : arena.data()) + p.info->offset;
}

py::object param_values(const ParamRef& p, py::handle self, bool diff) {
  float* data = param_array(p, diff);
  Backend& backend = p.net->net->backend();
  if (backend.is_host()) return view(data, p.info->shape, self);
  std::vector<float> values(size_t(p.info->count));
  {
    py::gil_scoped_release unlocked;
    backend.copy_to_host(values.size() * sizeof(float), data, values.data());
  }
  return copy_of(values, p.info->shape, false);
}

void set_param_values(const ParamRef& p, py::handle array, bool diff) {
  const std::vector<float> values = values_for(
      array, p.info->shape, "parameter '" + p.info->name + "'" + (diff ? " (its diff)" : ""));
  Net& net = *p.net->net;
  py::gil_scoped_release unlocked;
  net.backend().copy_from_host(values.size() * sizeof(float), values.data(),
                               param_array(p, diff));
  if (diff) net.arena().gradients_written();
}

// The properties data and diff of a Blob or Param class: the array (`values`) and assignment.
template <class Ref, class Values, class SetValues>
void add_data_and_diff(py::class_<Ref>& cls, Values values, SetValues set_values) {
  for (const bool diff : {false, true}) {
    cls.def_property(
        diff ? "diff" : "data",
        [values, diff](py::object self) { return values(self.cast<const Ref&>(), self, diff); },
        [set_values, diff](const Ref& ref, py::handle array) { set_values(ref, array, diff); });
  }
}

}  // namespace

void add_blobs(py::module_& m) {
  py::class_<BlobRef> blob(m, "Blob",
                           "A named tensor of a net: net.blobs['data']. data and diff are NumPy "
                           "views on the CPU (no copy; writes change the net) and read-only "
                           "copies on a GPU; assigning them (blob.data = x) works on both.");
  blob.def_property_readonly("name", [](const BlobRef& b) { return b.tensor->name(); })
      .def_property_readonly("shape", [](const BlobRef& b) { return shape_tuple(b.tensor->shape()); })
      .def_property_readonly("count", [](const BlobRef& b) { return b.tensor->count(); })
      .def_property_readonly("storage", [](const BlobRef& b) { return storage_name(b.tensor->dtype()); },
                             "How the values are stored: float32, or bfloat16 / float16 in a "
                             "layer running in 16 bits (read as float32 copies)")
      .def("__repr__", [](const BlobRef& b) {
        return "<lamina.Blob '" + b.tensor->name() + "' " + b.tensor->shape_string() + " on " +
               b.net->device + ">";
      });
  add_data_and_diff(blob, &blob_values, &set_blob_values);

  py::class_<ParamRef> param(m, "Param",
                             "A learnable parameter of a net, named '<layer>/<role>' (or by "
                             "param { name }): net.params['fc1/weight']. data and diff as for "
                             "Blob.");
  param.def_property_readonly("name", [](const ParamRef& p) { return p.info->name; })
      .def_property_readonly("shape", [](const ParamRef& p) { return shape_tuple(p.info->shape); })
      .def_property_readonly("count", [](const ParamRef& p) { return p.info->count; })
      .def_property_readonly("layer", [](const ParamRef& p) { return p.info->layer; })
      .def_property_readonly("lr_mult", [](const ParamRef& p) { return p.info->lr_mult; })
      .def_property_readonly("decay_mult", [](const ParamRef& p) { return p.info->decay_mult; })
      .def("__repr__", [](const ParamRef& p) {
        return "<lamina.Param '" + p.info->name + "' " + shape_string(p.info->shape) + " on " +
               p.net->device + ">";
      });
  add_data_and_diff(param, &param_values, &set_param_values);
}

}  // namespace lamina::python
