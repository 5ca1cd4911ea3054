// The Native backend's losses share these (native_backend.cpp, caffe_loss_ops.cpp): how a
// label stored as a float names a class, and what a loss is divided by.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/common.hpp"

namespace lamina::native {

// Labels are class indices stored as floats; the integer part counts, as a cast to int would
// take it (without a cast's undefined behaviour for NaN or huge values).
inline bool is_ignored(const LossOptions& options, float label) {
  return options.has_ignore_label && std::trunc(label) == double(options.ignore_label);
}

// A label's class index, or -1 when it names none of the cols classes (negative, NaN, or
// past the last class: scores with fewer outputs than the data has classes).
inline int64_t class_index(float label, int64_t cols) {
  return label >= 0 && double(label) < double(cols) ? static_cast<int64_t>(label) : -1;
}

[[noreturn]] inline void bad_label(const char* what, int64_t row, float label, int64_t cols) {
  fail(what, ": label ", label, " of row ", row, " is not a class index: the scores have ",
       cols, " classes (0..", cols - 1, "); does the layer that produces the scores have as "
       "many outputs (num_output) as the data has classes?");
}

// What a loss over `count` values (rows, or targets), `valid` of them not ignored, is
// divided by (LossParameter.normalization): at least 1, as in Caffe. BATCH_SIZE divides by
// options.batch where it is set, else by count.
inline float loss_normalizer(const LossOptions& options, int64_t count, int64_t valid) {
  int64_t norm = 1;
  switch (options.normalization) {
    case Normalization::kFull: norm = count; break;
    case Normalization::kBatchSize: norm = options.batch > 0 ? options.batch : count; break;
    case Normalization::kValid: norm = valid; break;
    case Normalization::kNone: norm = 1; break;
  }
  return static_cast<float>(std::max<int64_t>(norm, 1));
}

// Adds per-row values in row order, so the result does not depend on the thread count.
inline double serial_sum(const std::vector<double>& values) {
  double total = 0;
  for (double v : values) total += v;
  return total;
}

}  // namespace lamina::native
