// NumPy arrays of Lamina's float32 memory.
//
// On a host backend (device "cpu") a blob or parameter is handed out as a view: no copy,
// writes through it change the net, and it stays valid while its base object lives and the
// blob keeps its size. Device memory and 16-bit storage (BF16, FP16 layers) cannot be
// viewed from the host: they are handed out as read-only copies, so that a write meant for
// the net fails instead of changing a copy; assigning the attribute (blob.data = x) writes
// on every device.
#pragma once

#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "lamina/common.hpp"

namespace lamina::python {

namespace py = pybind11;

// (d0, d1, ...) of a shape.
py::tuple shape_tuple(const Shape& shape);

// A writable view of float32 memory of `shape` at data, C order; base keeps it alive.
py::array_t<float> view(float* data, const Shape& shape, py::handle base);

// An array holding values, of `shape`: writable, or read-only (a device blob's copy).
py::array_t<float> copy_of(const std::vector<float>& values, const Shape& shape, bool writable);

// The values of `array` (a NumPy array, or anything NumPy makes one of: a list, a scalar)
// as float32 in C order, for a destination of `shape` that `what` names ("blob 'data'").
// Integers, booleans and floats convert; another dtype is a TypeError, another shape a
// ValueError, both naming what and what was given.
std::vector<float> values_for(py::handle array, const Shape& shape, const std::string& what);

}  // namespace lamina::python
