// NumPy views and copies of float32 memory (arrays.hpp).
#include "arrays.hpp"

#include <cstring>

namespace lamina::python {

namespace {

std::vector<py::ssize_t> dims_of(const Shape& shape) {
  return std::vector<py::ssize_t>(shape.begin(), shape.end());
}

std::string shape_of(const py::array& array) {
  Shape shape(array.shape(), array.shape() + array.ndim());
  return shape_string(shape);
}

}  // namespace

py::tuple shape_tuple(const Shape& shape) {
  py::tuple t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t[i] = py::int_(shape[i]);
  return t;
}

py::array_t<float> view(float* data, const Shape& shape, py::handle base) {
  // Strides are left to NumPy: C order.
  return py::array_t<float>(dims_of(shape), data, base);
}

py::array_t<float> copy_of(const std::vector<float>& values, const Shape& shape, bool writable) {
  py::array_t<float> array(dims_of(shape));
  if (!values.empty()) std::memcpy(array.mutable_data(), values.data(), values.size() * 4);
  // Assignments into the array then raise "assignment destination is read-only".
  if (!writable) array.attr("setflags")(py::arg("write") = false);
  return array;
}

std::vector<float> values_for(py::handle object, const Shape& shape, const std::string& what) {
  py::array array = py::array::ensure(object);
  if (!array) {
    PyErr_Clear();
    throw py::type_error(what + " takes a NumPy array of numbers; got " +
                         std::string(py::str(py::type::of(object).attr("__name__"))));
  }
  const char kind = array.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b') {
    throw py::type_error(what + " takes numbers (stored as float32); got an array of dtype " +
                         std::string(py::str(array.dtype())));
  }
  const Shape given(array.shape(), array.shape() + array.ndim());
  if (given != shape) {
    throw py::value_error(what + " has shape " + shape_string(shape) +
                          "; got an array of shape " + shape_of(array));
  }
  auto floats = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(array);
  if (!floats) throw py::error_already_set();
  return std::vector<float>(floats.data(), floats.data() + floats.size());
}

}  // namespace lamina::python
