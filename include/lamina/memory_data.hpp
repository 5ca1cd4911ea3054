// MemoryData: a data layer fed by the program that runs the net (Caffe's MemoryDataLayer).
//
//   layer { name: "input" type: "MemoryData" top: "data" top: "label"
//           memory_data_param { batch_size: 32 channels: 1 height: 28 width: 28 } }
//
//   lamina::Net net(param, lamina::TRAIN, backend, seed);
//   lamina::memory_data(net, "input").reset(images.data(), labels.data(), n);
//
// Tops: data (N, C, H, W) and label (N, 1, 1, 1), N = batch_size. reset() copies n examples
// into the backend's memory (the program's arrays may go once it returns; Caffe keeps the
// pointers instead); each forward pass then takes the next batch_size of them, wrapping
// around from the last to the first. n must be a multiple of batch_size (Caffe's check).
// The examples stay resident and each batch is chosen on the device (a PassCounter), so a
// training step with MemoryData can be captured as a CUDA graph. A later reset() with the
// same n reuses that memory (a recorded step stays valid); one with another n, after a
// step was recorded, turns recording off for the net's later steps (they run directly).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lamina/lamina.pb.h"

namespace lamina {

class Net;

class MemoryData {
 public:
  virtual ~MemoryData() = default;

  // data: n * channels * height * width floats, (n, C, H, W) row-major; labels: n floats.
  // The next forward takes examples 0 .. batch_size - 1.
  virtual void reset(const float* data, const float* labels, int64_t n) = 0;
  // Caffe's AddDatumVector: examples as Datum records of channels x height x width values
  // (uint8 `data` bytes or `float_data`, not encoded images) with their labels; as reset().
  virtual void add_datum_vector(const std::vector<Datum>& datums) = 0;

  virtual int64_t batch_size() const = 0;
  virtual int64_t channels() const = 0;
  virtual int64_t height() const = 0;
  virtual int64_t width() const = 0;
};

// The MemoryData layer named `name` in net (the first of that name). An Error names the
// net's MemoryData layers when none has that name.
MemoryData& memory_data(Net& net, const std::string& name);

}  // namespace lamina
