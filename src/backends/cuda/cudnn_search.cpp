// Choosing a convolution's cuDNN algorithms, once per geometry (cudnn_plan.hpp), and the
// text form of the choices that a solver state keeps.
//
// cuDNN's heuristics (_v7) rank the algorithms for the shape, with the convolution's math
// restricted to its mode's (cudnn_plan.hpp; FP32: FMA only, as CUDNN_DEFAULT_MATH lets
// float convolutions run in TF32 on Ampere and newer, ~1e-3 off the CPU). Then every
// algorithm is timed on scratch arrays of the geometry's sizes and the mode's type
// (cudnnFind*AlgorithmEx, with a workspace as large as the largest a ranked algorithm within
// the limit asks for; the caller's arrays are never written, the filter gradient
// accumulates into them), and the fastest that runs in the mode's math,
// deterministic (as cuDNN reports and as documented: backward-data algorithm 0 and
// backward-filter algorithms 0 and 3 add with atomics) and within the workspace limit is
// taken. If the scratch arrays do not fit in memory the heuristics' order stands. Only if
// no deterministic algorithm qualifies is a non-deterministic one taken (with a warning); if
// none qualifies at all, that direction runs by im2col + cuBLAS. In BF16 and FP16 the
// graph API's plans (cudnn_graph.hpp) are timed too, and the legacy choice again by the same
// clock; the fastest plan replaces the legacy choice where it is faster or not deterministic.
//
// Timing can pick different algorithms in two runs, and different algorithms round
// differently. So that a resumed run repeats the interrupted one bit for bit, the solver
// state keeps the choices (Backend::algorithm_choices) and the resumed run takes them
// (reuse_conv_choices) instead of timing again.
#if defined(LAMINA_WITH_CUDNN)

#include <glog/logging.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <sstream>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cudnn_plan.hpp"
#include "backends/cuda/device_timer.hpp"

namespace lamina::cuda_detail {
namespace {

// The algorithms documented as adding with atomics, whatever a perf struct reports.
bool known_nondeterministic(cudnnConvolutionFwdAlgo_t) { return false; }
bool known_nondeterministic(cudnnConvolutionBwdDataAlgo_t algo) {
  return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
}
bool known_nondeterministic(cudnnConvolutionBwdFilterAlgo_t algo) {
  return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
         algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

Choice legacy_choice(int algo, cudnnMathType_t math, size_t workspace, bool deterministic) {
  Choice c;
  c.algo = algo;
  c.math = math;
  c.workspace = workspace;
  c.deterministic = deterministic;
  return c;
}

// The first of cuDNN's ranked perf results that is supported, runs in `mode`,
// within the workspace limit and (first pass) deterministic; none: algo -1.
// workspace_of(algo, &bytes) asks cuDNN for the algorithm's workspace and returns its status.
template <class Perf, class WorkspaceOf>
Choice choose(const std::vector<Perf>& ranked, ConvMode mode, size_t limit,
              WorkspaceOf workspace_of) {
  for (const bool need_deterministic : {true, false}) {
    for (const Perf& perf : ranked) {
      if (perf.status != CUDNN_STATUS_SUCCESS || !runs_in(perf.mathType, mode)) continue;
      const bool deterministic =
          perf.determinism == CUDNN_DETERMINISTIC && !known_nondeterministic(perf.algo);
      if (need_deterministic && !deterministic) continue;
      size_t bytes = 0;
      if (workspace_of(perf.algo, perf.mathType, &bytes) != CUDNN_STATUS_SUCCESS) continue;
      if (bytes > limit) continue;
      return legacy_choice(static_cast<int>(perf.algo), perf.mathType, bytes, deterministic);
    }
  }
  return {};
}

void warn_about(const Choice& choice, ConvMode mode, const char* direction,
                const ConvGeometry& g) {
  if (!choice.in_cudnn()) {
    LOG(WARNING) << "cuDNN offers no " << mode_name(mode) << " " << direction << " algorithm "
                 << "within the workspace limit for " << describe(g) << "; using im2col + "
                 << "cuBLAS instead";
  } else if (!choice.deterministic) {
    LOG(WARNING) << "cuDNN offers no deterministic " << direction << " algorithm for "
                 << describe(g) << "; using algorithm " << choice.algo
                 << ", whose results may differ in the last bits from run to run";
  }
}

// Scratch device arrays to time algorithms on: x (also dx), w (also dw), y (also dy) of a
// geometry, and a workspace. Their values do not matter. Freed when it goes.
class ScratchArrays {
 public:
  ScratchArrays() = default;
  ScratchArrays(const ScratchArrays&) = delete;
  ScratchArrays& operator=(const ScratchArrays&) = delete;
  ~ScratchArrays() {
    for (void* p : {x, w, y, workspace})
      if (p) cudaFree(p);
  }
  // False (and nothing held) if the memory is not there.
  bool allocate(size_t x_bytes, size_t w_bytes, size_t y_bytes, size_t workspace_bytes) {
    bool ok = cudaMalloc(&x, x_bytes) == cudaSuccess && cudaMalloc(&w, w_bytes) == cudaSuccess &&
              cudaMalloc(&y, y_bytes) == cudaSuccess &&
              (workspace_bytes == 0 || cudaMalloc(&workspace, workspace_bytes) == cudaSuccess);
    if (!ok) {
      cudaGetLastError();  // clear the allocation error
      return false;
    }
    return true;
  }
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
  void* workspace = nullptr;
};

// The largest workspace an algorithm of `ranked` that runs in `mode` asks for, up to limit.
template <class Perf, class WorkspaceOf>
size_t largest_workspace(const std::vector<Perf>& ranked, ConvMode mode, size_t limit,
                         WorkspaceOf workspace_of) {
  size_t largest = 0;
  for (const Perf& perf : ranked) {
    size_t bytes = 0;
    if (perf.status != CUDNN_STATUS_SUCCESS || !runs_in(perf.mathType, mode)) continue;
    if (workspace_of(perf.algo, perf.mathType, &bytes) != CUDNN_STATUS_SUCCESS || bytes > limit)
      continue;
    largest = std::max(largest, bytes);
  }
  return largest;
}

// A remembered algorithm as a choice: -1 (that direction ran by im2col) as it is, an
// algorithm as one if it is one of cuDNN's and cuDNN accepts it for the plan within limit;
// nothing otherwise.
template <class Algo, int kCount, class WorkspaceOf>
std::optional<Choice> remembered_choice(Algorithm a, ConvMode mode, size_t limit,
                                        WorkspaceOf workspace_of) {
  if (a.algo == -1) return Choice{};
  size_t bytes = 0;
  if (a.algo < 0 || a.algo >= kCount || !runs_in(a.math, mode) ||
      workspace_of(static_cast<Algo>(a.algo), a.math, &bytes) != CUDNN_STATUS_SUCCESS ||
      bytes > limit) {
    return std::nullopt;
  }
  return legacy_choice(a.algo, a.math, bytes, !known_nondeterministic(static_cast<Algo>(a.algo)));
}

// cuDNN's ranking (heuristics) of one direction's algorithms, as many as it has.
template <class Perf, class MaxCount, class Get>
std::vector<Perf> ranked(MaxCount max_count, Get get) {
  int count = 0, returned = 0;
  LAMINA_CUDNN_CHECK(max_count(&count));
  std::vector<Perf> perfs(std::max(count, 1));
  LAMINA_CUDNN_CHECK(get(static_cast<int>(perfs.size()), &returned, perfs.data()));
  perfs.resize(std::clamp(returned, 0, static_cast<int>(perfs.size())));
  return perfs;
}

// Replaces `order` by cuDNN's timing of the same algorithms (fastest first), if it succeeds.
template <class Perf, class Find>
void time_algorithms(std::vector<Perf>& order, Find find) {
  std::vector<Perf> timed(std::max<size_t>(order.size(), 1));
  int returned = 0;
  const cudnnStatus_t status = find(static_cast<int>(timed.size()), &returned, timed.data());
  if (status != CUDNN_STATUS_SUCCESS) {
    cudaGetLastError();  // an error it left is not the next launch's
    LOG(WARNING) << "timing cuDNN's algorithms failed (" << cudnnGetErrorString(status)
                 << "); taking its heuristics' order";
    return;
  }
  timed.resize(std::clamp(returned, 0, static_cast<int>(timed.size())));
  for (const Perf& perf : timed) {  // what the choice was made from, for --v=2
    VLOG(2) << "  cuDNN algorithm " << static_cast<int>(perf.algo) << ": "
            << cudnnGetErrorString(perf.status) << ", " << perf.time << " ms, math "
            << static_cast<int>(perf.mathType) << ", "
            << (perf.determinism == CUDNN_DETERMINISTIC ? "deterministic" : "non-deterministic")
            << ", workspace " << perf.memory << " bytes";
  }
  order = std::move(timed);
}

// The index-th of plans as a choice.
Choice graph_choice(const std::vector<std::shared_ptr<GraphPlan>>& plans, int index) {
  Choice c;
  c.graph_list = fingerprint(plans);
  c.workspace = plans[index]->workspace();
  c.graph = plans[index];
  c.graph_index = index;
  return c;
}

}  // namespace

void search(CudaContext& context, size_t limit, const ConvGeometry& g, ConvMode mode,
            ConvPlan& plan, const ConvAlgorithms* remembered) {
  const cudnnMathType_t math_type = cudnn_math(mode);
  const cudnnDataType_t type = cudnn_data_type(mode);
  plan.x = std::make_unique<TensorDescriptor>();
  plan.y = std::make_unique<TensorDescriptor>();
  plan.w = std::make_unique<FilterDescriptor>();
  plan.conv = std::make_unique<ConvolutionDescriptor>();
  const cudnnTensorDescriptor_t x = plan.x->get(), y = plan.y->get();
  const cudnnFilterDescriptor_t w = plan.w->get();
  const cudnnConvolutionDescriptor_t conv = plan.conv->get();
  const auto i = [](int64_t v) { return static_cast<int>(v); };  // fits_cudnn checked them
  LAMINA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, i(g.n),
                                                i(g.c), i(g.h), i(g.w)));
  LAMINA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, i(g.n),
                                                i(g.k), i(g.out_h), i(g.out_w)));
  LAMINA_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, i(g.k),
                                                i(g.c / g.groups), i(g.kh), i(g.kw)));
  LAMINA_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      conv, i(g.pad_h), i(g.pad_w), i(g.stride_h), i(g.stride_w), i(g.dilation_h),
      i(g.dilation_w), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  LAMINA_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, i(g.groups)));
  LAMINA_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math_type));

  int on = 0, oc = 0, oh = 0, ow = 0;
  LAMINA_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv, x, w, &on, &oc, &oh, &ow));
  CHECK(on == g.n && oc == g.k && oh == g.out_h && ow == g.out_w)
      << "cuDNN computes the output (" << on << ", " << oc << ", " << oh << ", " << ow
      << ") for " << describe(g);

  const cudnnHandle_t handle = context.dnn();
  // Workspace sizes depend on the math type: each query sets it on the descriptor first.
  auto in_math = [&](cudnnMathType_t type, auto query) {
    const cudnnStatus_t set = cudnnSetConvolutionMathType(conv, type);
    return set != CUDNN_STATUS_SUCCESS ? set : query();
  };
  auto forward_workspace = [&](cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t type,
                               size_t* bytes) {
    return in_math(type, [&] {
      return cudnnGetConvolutionForwardWorkspaceSize(handle, x, w, conv, y, algo, bytes);
    });
  };
  auto data_workspace = [&](cudnnConvolutionBwdDataAlgo_t algo, cudnnMathType_t type,
                            size_t* bytes) {
    return in_math(type, [&] {
      return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, w, y, conv, x, algo, bytes);
    });
  };
  auto filter_workspace = [&](cudnnConvolutionBwdFilterAlgo_t algo, cudnnMathType_t type,
                              size_t* bytes) {
    return in_math(type, [&] {
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, x, y, conv, w, algo, bytes);
    });
  };

  // The solver state's algorithms, where cuDNN takes them; the others are chosen anew.
  std::optional<Choice> kept[3];
  if (remembered != nullptr) {
    for (int d = 0; d < 3; ++d) {
      const int index = (*remembered)[d].graph;
      if (index < 0) continue;
      auto plans = graph_plans(handle, g, mode, static_cast<ConvDirection>(d), limit);
      if (index < static_cast<int>(plans.size()) &&
          fingerprint(plans) == (*remembered)[d].graph_list)
        kept[d] = graph_choice(plans, index);
    }
    if ((*remembered)[0].graph < 0)
      kept[0] = remembered_choice<cudnnConvolutionFwdAlgo_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
          (*remembered)[0], mode, limit, forward_workspace);
    if ((*remembered)[1].graph < 0)
      kept[1] = remembered_choice<cudnnConvolutionBwdDataAlgo_t,
                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>((*remembered)[1], mode,
                                                                         limit, data_workspace);
    if ((*remembered)[2].graph < 0)
      kept[2] = remembered_choice<cudnnConvolutionBwdFilterAlgo_t,
                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
          (*remembered)[2], mode, limit, filter_workspace);
    if (kept[0] && kept[1] && kept[2]) {
      plan.forward = *kept[0];
      plan.backward_data = *kept[1];
      plan.backward_filter = *kept[2];
      return;
    }
    LOG(WARNING) << "cuDNN does not accept all of the solver state's algorithms for "
                 << "convolution " << describe(g) << "; the others are chosen anew (results "
                 << "may differ in the last bits from the interrupted run)";
  }

  // Ranked and timed with the descriptor in the plan's mode's math (the queries above change
  // it).
  const auto reset_math = [&] {
    LAMINA_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math_type));
  };
  reset_math();
  auto forward = ranked<cudnnConvolutionFwdAlgoPerf_t>(
      [&](int* n) { return cudnnGetConvolutionForwardAlgorithmMaxCount(handle, n); },
      [&](int n, int* returned, cudnnConvolutionFwdAlgoPerf_t* perfs) {
        return cudnnGetConvolutionForwardAlgorithm_v7(handle, x, w, conv, y, n, returned, perfs);
      });
  auto data = ranked<cudnnConvolutionBwdDataAlgoPerf_t>(
      [&](int* n) { return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, n); },
      [&](int n, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perfs) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w, y, conv, x, n, returned,
                                                           perfs);
      });
  auto filter = ranked<cudnnConvolutionBwdFilterAlgoPerf_t>(
      [&](int* n) { return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, n); },
      [&](int n, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perfs) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, x, y, conv, w, n, returned,
                                                             perfs);
      });

  const size_t scratch =
      std::max({largest_workspace(forward, mode, limit, forward_workspace),
                largest_workspace(data, mode, limit, data_workspace),
                largest_workspace(filter, mode, limit, filter_workspace)});
  reset_math();
  ScratchArrays arrays;
  const size_t e = element_bytes(mode);
  if (arrays.allocate(e * g.n * g.c * g.h * g.w, e * g.k * (g.c / g.groups) * g.kh * g.kw,
                      e * g.n * g.k * g.out_h * g.out_w, scratch)) {
    time_algorithms(forward, [&](int n, int* returned, cudnnConvolutionFwdAlgoPerf_t* perfs) {
      return cudnnFindConvolutionForwardAlgorithmEx(handle, x, arrays.x, w, arrays.w, conv, y,
                                                    arrays.y, n, returned, perfs,
                                                    arrays.workspace, scratch);
    });
    time_algorithms(data, [&](int n, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perfs) {
      return cudnnFindConvolutionBackwardDataAlgorithmEx(handle, w, arrays.w, y, arrays.y, conv,
                                                         x, arrays.x, n, returned, perfs,
                                                         arrays.workspace, scratch);
    });
    time_algorithms(filter, [&](int n, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perfs) {
      return cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, x, arrays.x, y, arrays.y,
                                                           conv, w, arrays.w, n, returned,
                                                           perfs, arrays.workspace, scratch);
    });
  } else {
    LOG(WARNING) << "no device memory to time cuDNN's algorithms for convolution " << describe(g)
                 << "; taking its heuristics' choice";
  }
  plan.forward = kept[0] ? *kept[0] : choose(forward, mode, limit, forward_workspace);
  plan.backward_data = kept[1] ? *kept[1] : choose(data, mode, limit, data_workspace);
  plan.backward_filter = kept[2] ? *kept[2] : choose(filter, mode, limit, filter_workspace);

  // The graph API's plans replace a legacy choice they beat, both timed the same way on the
  // same arrays, or a legacy choice that is not deterministic.
  Choice* choices[3] = {&plan.forward, &plan.backward_data, &plan.backward_filter};
  if (arrays.x != nullptr) {
    cudaStream_t stream = nullptr;
    LAMINA_CUDNN_CHECK(cudnnGetStream(handle, &stream));
    // The legacy algorithm of direction d, on the arrays (-1 where it has none).
    auto legacy_ms = [&](int d) -> float {
      const Choice& c = *choices[d];
      if (c.algo < 0) return -1;
      return mean_ms(stream, 3, [&] {
        return run_choice(handle, plan, static_cast<ConvDirection>(d), c, arrays.x, arrays.w,
                          arrays.y, arrays.workspace, 0.0f) == CUDNN_STATUS_SUCCESS;
      });
    };
    for (int d = 0; d < 3; ++d) {
      if (kept[d]) continue;
      auto plans = graph_plans(handle, g, mode, static_cast<ConvDirection>(d), limit);
      const auto [best, ms] = fastest_graph_plan(handle, plans, arrays.x, arrays.w, arrays.y);
      if (best < 0) continue;
      const Choice& legacy = *choices[d];
      const float legacy_time = legacy_ms(d);
      if (legacy_time < 0 || !legacy.deterministic || ms < legacy_time) {
        VLOG(1) << mode_name(mode) << " convolution " << describe(g) << ": direction " << d
                << " runs cuDNN graph plan " << best << " (" << ms << " ms) instead of legacy "
                << "algorithm " << legacy.algo << " (" << legacy_time << " ms)";
        *choices[d] = graph_choice(plans, best);
      }
    }
    reset_math();
  }
  const char* directions[3] = {"forward", "backward-data", "backward-filter"};
  for (int d = 0; d < 3; ++d)
    if (!kept[d]) warn_about(*choices[d], mode, directions[d], g);
}

// "conv n c h w k kh kw stride_h stride_w pad_h pad_w dilation_h dilation_w groups out_h out_w
// = forward backward-data backward-filter", a line per planned geometry; "conv-tf32 ...",
// "conv-bf16 ..." and "conv-fp16 ..." for the other modes, whose algorithms carry a "t" where
// they run in tensor-op math; "g<i>@<fingerprint>" names a TF32 or 16-bit mode's graph API
// plan, the i-th of a list with that fingerprint (cudnn_graph.hpp).
constexpr const char* kChoiceWord[] = {"conv", "conv-tf32", "conv-bf16", "conv-fp16"};
static_assert(std::size(kChoiceWord) == static_cast<size_t>(ConvMode::kFP16) + 1,
              "a word per ConvMode, in its order");

std::string conv_choices(CudaContext& context) {
  std::ostringstream out;
  for (const auto& [key, plan] : context.conv_plans().by_geometry) {
    if (!plan->conv) continue;  // runs by im2col: nothing chosen
    out << kChoiceWord[key.back()];
    for (size_t i = 0; i + 1 < key.size(); ++i) out << ' ' << key[i];
    out << " =";
    for (const Choice* c : {&plan->forward, &plan->backward_data, &plan->backward_filter}) {
      if (c->graph) {
        out << " g" << c->graph_index << '@' << std::hex << c->graph_list << std::dec;
      } else {
        out << ' ' << c->algo << (c->math == CUDNN_TENSOR_OP_MATH ? "t" : "");
      }
    }
    out << '\n';
  }
  return out.str();
}

bool reuse_conv_choice(CudaContext& context, const std::string& line) {
  std::istringstream in(line);
  std::string word, equals;
  GeometryKey key{};
  ConvAlgorithms algorithms{};
  std::string tokens[3];
  in >> word;
  for (size_t i = 0; i + 1 < key.size(); ++i) in >> key[i];
  in >> equals >> tokens[0] >> tokens[1] >> tokens[2];
  if (!in || equals != "=" || !(in >> std::ws).eof()) return false;
  const auto* word_end = std::end(kChoiceWord);
  const auto* found = std::find(std::begin(kChoiceWord), word_end, word);
  if (found == word_end) return false;
  const auto mode = static_cast<ConvMode>(found - std::begin(kChoiceWord));
  key.back() = static_cast<int64_t>(mode);
  // "7": the algorithm in the mode's plain math (plain_math); "7t": in tensor-op math; "g2":
  // the graph API's plan 2 (TF32 and 16-bit modes).
  for (int i = 0; i < 3; ++i) {
    size_t used = 0;
    if (tokens[i].size() > 1 && tokens[i][0] == 'g') {  // "g<index>@<list, hex>"
      if (mode == ConvMode::kFP32) return false;
      const size_t at = tokens[i].find('@');
      if (at == std::string::npos || at + 1 == tokens[i].size()) return false;
      size_t hex_used = 0;
      try {
        algorithms[i].graph = std::stoi(tokens[i].substr(1, at - 1), &used);
        algorithms[i].graph_list = std::stoull(tokens[i].substr(at + 1), &hex_used, 16);
      } catch (const std::exception&) {
        return false;
      }
      if (used + 1 != at || at + 1 + hex_used != tokens[i].size() || algorithms[i].graph < 0)
        return false;
      algorithms[i].algo = -1;
      algorithms[i].math = plain_math(mode);
      continue;
    }
    try {
      algorithms[i].algo = std::stoi(tokens[i], &used);
    } catch (const std::exception&) {
      return false;
    }
    const std::string rest = tokens[i].substr(used);
    if (rest != "" && !(rest == "t" && mode != ConvMode::kFP32)) return false;
    algorithms[i].math = rest == "t" ? CUDNN_TENSOR_OP_MATH : plain_math(mode);
  }
  ConvPlans& plans = context.conv_plans();
  plans.remembered[key] = algorithms;
  // A plan made already with other algorithms is made again at its next call.
  const auto made = plans.by_geometry.find(key);
  if (made != plans.by_geometry.end() && made->second->conv &&
      !(algorithms_of(*made->second) == algorithms)) {
    plans.by_geometry.erase(made);
  }
  return true;
}

}  // namespace lamina::cuda_detail

#else  // !LAMINA_WITH_CUDNN: convolutions run by im2col; nothing is chosen.

#include "backends/cuda/cuda_context.hpp"

namespace lamina::cuda_detail {

std::string conv_choices(CudaContext&) { return {}; }
bool reuse_conv_choice(CudaContext&, const std::string&) { return false; }

}  // namespace lamina::cuda_detail

#endif  // LAMINA_WITH_CUDNN
