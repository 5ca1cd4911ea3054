// A tensor's values and gradients as a layer stores them, for layers written once over their
// storage: T = float (FP32) or uint16_t (the bits of BF16 or FP16; Tensor::dtype says which).
#pragma once

#include <type_traits>

#include "lamina/tensor.hpp"

namespace lamina {

template <class T>
const T* values_of(const Tensor& t) {
  if constexpr (std::is_same_v<T, float>) {
    return t.data();
  } else {
    return t.half_data();
  }
}
template <class T>
T* mutable_values_of(Tensor& t) {
  if constexpr (std::is_same_v<T, float>) {
    return t.mutable_data();
  } else {
    return t.mutable_half_data();
  }
}
template <class T>
const T* gradients_of(const Tensor& t) {
  if constexpr (std::is_same_v<T, float>) {
    return t.diff();
  } else {
    return t.half_diff();
  }
}
template <class T>
T* mutable_gradients_of(Tensor& t) {
  if constexpr (std::is_same_v<T, float>) {
    return t.mutable_diff();
  } else {
    return t.mutable_half_diff();
  }
}
// A parameter's values as a product reads them: FP32, or the 16-bit copy the net bound
// (Tensor::half_copy).
template <class T>
const T* weights_of(const Tensor& t) {
  if constexpr (std::is_same_v<T, float>) {
    return t.data();
  } else {
    return t.half_copy();
  }
}

}  // namespace lamina
