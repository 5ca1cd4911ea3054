// Parameter initialisation. Fillers run on the host with a seeded generator, so every backend
// starts from the same weights; the result is uploaded once when the net is built.
#pragma once

#include <random>
#include <vector>

#include "lamina/common.hpp"
#include "lamina.pb.h"

namespace lamina {

// Fills values (resized to the shape's count) per the filler. As in Caffe, fan-in is
// count / shape[0] and fan-out is count / shape[1] (a Linear weight is (K_out, K_in)).
void fill(const FillerParameter& filler, const Shape& shape, std::mt19937_64& rng,
          std::vector<float>& values);

}  // namespace lamina
