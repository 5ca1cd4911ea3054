// Helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
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
#include "lamina/net.hpp"
#include "lamina/param_arena.hpp"
#include "lamina/precision.hpp"
#include "lamina/rounding.hpp"
#include "lamina/solver.hpp"
#include "lamina/tensor.hpp"

namespace lamina::testing {

// A small MLP for training tests: 8 inputs of 24 values and their labels (Input, filled by
// the test), Linear to 16 with a ReLU, Linear to 5 classes, softmax loss.
inline constexpr const char* kSmallMlp = R"(
name: "mlp"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 8 dim: 24 } shape { dim: 8 } } }
layer { name: "ip1" type: "Linear" inner_product_param { num_output: 16
        weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu1" type: "ReLU" }
layer { name: "ip2" type: "Linear" inner_product_param { num_output: 5
        weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "SoftmaxWithLoss" }
)";


// count values of type T in a backend's memory, filled from and read back to the host.
template <class T>
class Array {
 public:
  Array(Backend& backend, const std::vector<T>& values)
      : backend_(&backend), count_(values.size()), buffer_(backend, sizeof(T) * values.size()) {
    backend.copy_from_host(sizeof(T) * count_, values.data(), buffer_.get());
  }
  Array(Backend& backend, size_t count, T value = T())
      : Array(backend, std::vector<T>(count, value)) {}

  T* get() const { return buffer_.as<T>(); }
  size_t count() const { return count_; }
  std::vector<T> host() const {
    std::vector<T> values(count_);
    backend_->copy_to_host(sizeof(T) * count_, buffer_.get(), values.data());
    return values;
  }

 private:
  Backend* backend_;
  size_t count_;
  Buffer buffer_;
};
using Floats = Array<float>;
using Ints = Array<int32_t>;

inline std::vector<float> random_values(int64_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A convolution geometry with the output size derived from the input.
inline ConvGeometry conv_geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                                  int64_t kh, int64_t kw, int64_t stride, int64_t pad,
                                  int64_t dilation = 1, int64_t groups = 1) {
  ConvGeometry g{};
  g.n = n, g.c = c, g.h = h, g.w = w, g.k = k, g.kh = kh, g.kw = kw;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  g.dilation_h = g.dilation_w = dilation;
  g.groups = groups;
  g.out_h = (h + 2 * pad - (dilation * (kh - 1) + 1)) / stride + 1;
  g.out_w = (w + 2 * pad - (dilation * (kw - 1) + 1)) / stride + 1;
  return g;
}

// The reference of the rounding tests (rounding.hpp): x rounded to nearest, ties to even,
// keeping `mantissa` bits after the binary point, with `min_exponent` the smallest binade
// (subnormal spacing below it), by double arithmetic (every step exact) rather than on bits.
// *overflow: the result's magnitude reached `limit`, the format's infinity.
inline double reference_round(float x, int mantissa, int min_exponent, double limit,
                              bool* overflow) {
  int e = 0;
  std::frexp(x, &e);  // |x| = m 2^e, m in [0.5, 1)
  const double spacing = std::ldexp(1.0, std::max(e - 1, min_exponent) - mantissa);
  const double q = double(x) / spacing;
  const double low = std::floor(q), above = q - low;
  const bool up = above > 0.5 || (above == 0.5 && std::fmod(low, 2.0) != 0);
  const double v = (up ? low + 1 : low) * spacing;
  *overflow = std::abs(v) >= limit;
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

// Empty when a and b hold the same bits; otherwise the first difference.
inline std::string compare_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return "sizes differ: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      std::ostringstream out;
      out.precision(9);
      out << "first difference at [" << i << "]: " << a[i] << " vs " << b[i];
      return out.str();
    }
  }
  return {};
}

// Empty when the arena's 16-bit copy (in `backend`'s memory) holds its weights rounded to
// format, bit for bit, at every parameter element (padding aside); otherwise the first
// that does not.
inline std::string half_copy_mismatch(Backend& backend, ParamArena& arena, Half format) {
  std::vector<uint16_t> copy(arena.count());
  backend.copy_to_host(sizeof(uint16_t) * copy.size(), arena.half_copy(format), copy.data());
  const std::vector<float> w = arena.to_host(arena.data());
  for (const ParamInfo& info : arena.table()) {
    for (int64_t i = info.offset; i < info.offset + info.count; ++i) {
      const uint16_t want = format == Half::kBF16 ? float_to_bf16(w[i]) : float_to_fp16(w[i]);
      if (copy[i] != want) {
        return info.name + "[" + std::to_string(i - info.offset) + "]: copy " +
               std::to_string(copy[i]) + ", rounded weight " + std::to_string(want);
      }
    }
  }
  return {};
}

// One case of a product C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C.
struct GemmCase {
  int64_t m, n, k;
  Transpose trans_a, trans_b;
  float beta;
};

// Calls check for each shape {m, n, k} in all four transpositions with beta 0 and 0.5, the
// case named in a SCOPED_TRACE.
inline void for_each_gemm_case(const std::vector<std::array<int64_t, 3>>& shapes,
                               const std::function<void(const GemmCase&)>& check) {
  for (const auto& [m, n, k] : shapes) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        for (float beta : {0.0f, 0.5f}) {
          SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k
                                            << " trans_a " << (ta == Transpose::kYes)
                                            << " trans_b " << (tb == Transpose::kYes)
                                            << " beta " << beta);
          check(GemmCase{m, n, k, ta, tb, beta});
        }
      }
    }
  }
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

// A fresh directory under the system's temporary directory, removed (with everything in
// it, whatever its permissions) when the object goes.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("lamina_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ignored);
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }
  // Writes text to the file `name` (its directories created) and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path file = path_ / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string source_dir() {
  const char* env = std::getenv("LAMINA_SOURCE_DIR");
  return env && *env ? env : LAMINA_SOURCE_DIR;
}
inline std::string mnist_dir() {
  const char* env = std::getenv("LAMINA_MNIST_DIR");
  return env ? env : source_dir() + "/data/mnist";
}

// Runs `net` forward with `data` in its blob "data", then layer `layer` backward from the
// top gradient dy (the parameters' gradients zeroed first).
inline void forward_and_backward(Net& net, int layer, const std::vector<float>& data,
                                 const std::vector<float>& dy) {
  net.blob("data").copy_data_from_host(data);
  net.forward();
  net.arena().zero_diff();
  net.layer_tops(layer)[0]->copy_diff_from_host(dy);
  net.backward_layer(layer);
}

// The displayed losses of the same training on the CPU (a) and the GPU (b): `count` of them,
// each within `tolerance` relative, printed with `what`.
inline void expect_losses_close(const Solver& a, const Solver& b, size_t count,
                                double tolerance, const std::string& what) {
  const auto& x = a.loss_history();
  const auto& y = b.loss_history();
  ASSERT_EQ(x.size(), count);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double rel = std::abs(double(y[i].loss) - x[i].loss) / std::abs(double(x[i].loss));
    std::printf("%s iteration %3d: CPU %.6f, GPU %.6f, relative difference %.2e\n",
                what.c_str(), x[i].iteration, x[i].loss, y[i].loss, rel);
    EXPECT_LE(rel, tolerance) << "iteration " << x[i].iteration;
  }
}

// The names of the net's layers in order, and the index of one of them.
inline std::vector<std::string> layer_names(Net& net) {
  std::vector<std::string> out;
  for (int i = 0; i < net.num_layers(); ++i) out.push_back(net.layer(i).name());
  return out;
}
inline int layer_index(Net& net, const std::string& name) {
  for (int i = 0; i < net.num_layers(); ++i)
    if (net.layer(i).name() == name) return i;
  ADD_FAILURE() << "no layer '" << name << "'";
  return 0;
}

// BF16 and FP16, those the backend stores; each it does not is printed as skipped.
inline std::vector<Precision> half_precisions(const Backend& backend) {
  std::vector<Precision> out;
  for (Precision p : {BF16, FP16}) {
    if (backend.supports_half(half_format(storage_of(p)))) {
      out.push_back(p);
    } else {
      std::printf("this backend has no %s storage: skipped\n", Precision_Name(p).c_str());
    }
  }
  return out;
}

}  // namespace lamina::testing
