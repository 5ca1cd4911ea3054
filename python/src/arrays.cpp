// NumPy views and copies of float32 memory (arrays.hpp), through the buffer protocol.
#include "arrays.hpp"

#include <cstring>

#include <pybind11/stl.h>

namespace lamina::python {

namespace {

// Float32 memory in C order as a Python buffer: numpy.asarray of it is a view whose base
// holds the HostArray, which holds `owner` (the Blob or Param, and through it the net).
struct HostArray {
  float* data;
  Shape shape;
  bool writable;
  py::object owner;
};

py::module_ numpy() { return py::module_::import("numpy"); }

py::object array_over(float* data, const Shape& shape, bool writable, py::handle owner) {
  return numpy().attr("asarray")(
      HostArray{data, shape, writable, py::reinterpret_borrow<py::object>(owner)});
}

}  // namespace

void add_arrays(py::module_& m) {
  py::class_<HostArray>(m, "_HostArray", py::buffer_protocol())
      .def_buffer([](HostArray& a) {
        std::vector<py::ssize_t> strides(a.shape.size());
        py::ssize_t stride = sizeof(float);
        for (size_t i = a.shape.size(); i-- > 0;) {
          strides[i] = stride;
          stride *= py::ssize_t(a.shape[i]);
        }
        return py::buffer_info(a.data, sizeof(float), py::format_descriptor<float>::format(),
                               py::ssize_t(a.shape.size()),
                               std::vector<py::ssize_t>(a.shape.begin(), a.shape.end()), strides,
                               !a.writable);
      });
}

py::tuple shape_tuple(const Shape& shape) {
  py::tuple t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t[i] = py::int_(shape[i]);
  return t;
}

py::object view(float* data, const Shape& shape, py::handle base) {
  return array_over(data, shape, true, base);
}

py::object copy_of(const std::vector<float>& values, const Shape& shape, bool writable) {
  // numpy.array copies the buffer of `values` into an array of its own.
  py::object array = numpy().attr("array")(
      array_over(const_cast<float*>(values.data()), shape, false, py::none()));
  // Assignments into a read-only array raise "assignment destination is read-only".
  if (!writable) array.attr("setflags")(py::arg("write") = false);
  return array;
}

std::vector<float> values_of(py::handle object, const std::string& what, Shape* shape) {
  py::object array = numpy().attr("asarray")(object);
  const std::string kind = py::str(array.attr("dtype").attr("kind"));
  if (kind != "f" && kind != "i" && kind != "u" && kind != "b") {
    throw py::type_error(what + " takes numbers (stored as float32); got an array of dtype " +
                         std::string(py::str(array.attr("dtype"))));
  }
  *shape = array.attr("shape").cast<Shape>();
  py::object floats = numpy().attr("ascontiguousarray")(array, py::arg("dtype") = "float32");
  const py::buffer_info info = floats.cast<py::buffer>().request();
  const auto* first = static_cast<const float*>(info.ptr);
  return std::vector<float>(first, first + info.size);
}

std::vector<float> values_for(py::handle object, const Shape& shape, const std::string& what) {
  Shape given;
  std::vector<float> values = values_of(object, what, &given);
  if (given != shape) {
    throw py::value_error(what + " has shape " + shape_string(shape) +
                          "; got an array of shape " + shape_string(given));
  }
  return values;
}

}  // namespace lamina::python
