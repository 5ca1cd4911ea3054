// NumPy arrays of Lamina's float32 memory.
//
// On a host backend (device "cpu") a blob or parameter is handed out as a view: no copy,
// writes through it change the net, and it stays valid while its base object lives and the
// blob keeps its size. Device memory and 16-bit storage (BF16, FP16 layers) cannot be
// viewed from the host: they are handed out as read-only copies, so that a write meant for
// the net fails instead of changing a copy; assigning the attribute (blob.data = x) writes
// on every device.
//
// Arrays pass between Lamina and NumPy through Python's buffer protocol and NumPy's Python
// functions, not NumPy's C API, so the module works with every NumPy (1.x and 2.x) whatever
// pybind11 it was built with.
#pragma once

#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "lamina/common.hpp"

namespace lamina::python {

namespace py = pybind11;

// Adds the class that exports Lamina's memory to NumPy (lamina._lamina._HostArray).
void add_arrays(py::module_& m);

// (d0, d1, ...) of a shape.
py::tuple shape_tuple(const Shape& shape);

// A writable NumPy view of float32 memory of `shape` at data, C order; base keeps it alive.
py::object view(float* data, const Shape& shape, py::handle base);

// A NumPy array holding values, of `shape`: writable, or read-only (a device blob's copy).
py::object copy_of(const std::vector<float>& values, const Shape& shape, bool writable);

// The values of `object` (a NumPy array, or anything NumPy makes one of: a list, a scalar)
// as float32 in C order, for a destination that `what` names ("blob 'data'"), and its shape.
// Integers, booleans and floats convert; another dtype is a TypeError naming what and the
// dtype given.
std::vector<float> values_of(py::handle object, const std::string& what, Shape* shape);
// The same for a destination of `shape`: another shape is a ValueError naming what and both
// shapes.
std::vector<float> values_for(py::handle object, const Shape& shape, const std::string& what);

}  // namespace lamina::python
