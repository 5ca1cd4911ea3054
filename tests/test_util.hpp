// Helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/common.hpp"
#include "lamina/cuda.hpp"
#include "lamina/native_backend.hpp"

namespace lamina::testing {

inline std::vector<float> random_values(int64_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// ||a - b|| / max(||b||, tiny), in double.
inline double normalized_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// Empty when a and b agree to rel_tol (normalised); otherwise the first differing values.
inline std::string compare(const std::vector<float>& a, const std::vector<float>& b,
                           double rel_tol) {
  std::ostringstream out;
  if (a.size() != b.size()) {
    out << "sizes differ: " << a.size() << " vs " << b.size();
    return out.str();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) {
      out << "NaN at " << i;
      return out.str();
    }
  }
  const double err = normalized_error(a, b);
  if (err <= rel_tol) return {};
  out << "normalized error " << err << " > " << rel_tol << "; first differences:";
  int shown = 0;
  for (size_t i = 0; i < a.size() && shown < 5; ++i) {
    if (std::abs(a[i] - b[i]) > rel_tol * (std::abs(b[i]) + 1e-6)) {
      out << " [" << i << "] " << a[i] << " vs " << b[i] << ";";
      ++shown;
    }
  }
  return out.str();
}

// The message of the lamina::Error fn throws; fails the test when it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a lamina::Error";
  return {};
}

// The CUDA backend for device 0, or a skip with the reason.
#define LAMINA_CUDA_BACKEND_OR_SKIP(var)                                           \
  if (!::lamina::cuda_compiled()) GTEST_SKIP() << "built without CUDA";            \
  if (::lamina::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device present"; \
  std::unique_ptr<::lamina::Backend> var = ::lamina::make_cuda_backend(0)

inline std::string source_dir() {
  const char* env = std::getenv("LAMINA_SOURCE_DIR");
  return env && *env ? env : LAMINA_SOURCE_DIR;
}
inline std::string mnist_dir() {
  const char* env = std::getenv("LAMINA_MNIST_DIR");
  return env ? env : source_dir() + "/data/mnist";
}

}  // namespace lamina::testing
