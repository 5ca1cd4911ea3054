// Parameter initialisation. Fillers run on the host with a seeded generator, so every backend
// starts from the same weights; the result is uploaded once when the net is built.
#pragma once

#include <random>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

// Fills values (resized to the shape's count) per the filler, as Caffe 1.0's fillers do:
// constant, uniform, gaussian (with sparse >= 0: each value kept with probability
// sparse / shape[0], the others 0), xavier and msra (fan-in is count / shape[0], fan-out
// count / shape[1]; a Linear weight is (K_out, K_in)), positive_unitball (each of the
// shape[0] rows uniform, divided by its sum) and bilinear (a Deconvolution's upsampling
// kernel; 4 axes, square kernel). A parameter a filler cannot apply is an Error that names
// the filler and the field.
void fill(const FillerParameter& filler, const Shape& shape, std::mt19937_64& rng,
          std::vector<float>& values);

}  // namespace lamina
