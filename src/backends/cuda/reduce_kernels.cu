// Reductions along the middle axis of x (outer, mid, inner) on CUDA (kTensorOps; semantics
// in backend.hpp): reduce_middle (Reduction, Tile's backward) and argmax (ArgMax), the
// backward of reduce_middle (elementwise) beside them.
//
// Which kernel runs depends on the shape alone, so a shape always sums in the same order:
//   - many outputs (outer * inner >= kManyOutputs) or a short axis (mid < kLongAxis): one
//     thread per output (o, i) walks the middle axis as the Native backend does
//     (tensor_ops.cpp), giving its bits;
//   - few outputs of a long axis (a Reduction to a scalar or to one value per sample, ArgMax
//     over a whole sample): blocks share each output's middle axis, so a long axis is not
//     one thread's.
// reduce_middle with few outputs: a block takes up to 32 positions i (a power of two, cw)
// and one piece of the middle axis; its kBlock / cw slices of threads stride over the piece
// (thread (s, i) sums m = s, s + slices, ... in double), a fixed tree adds the slices, and
// with several pieces (a long axis and few blocks) a second kernel adds the pieces' sums
// (from the context's workspace) in order. A fixed order, no atomics: bit-identical run to
// run, and within a rounding of the Native backend's double sum in order of m.
// argmax with few outputs: a block per output; for each pick, its threads stride over the
// channels keeping the best candidate (ranks_before's order), and the block reduces their
// picks. That order is total on values that are not NaN, so the result is the one the
// Native backend's scan finds (NaN follows the scan too: block_pick says how).
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "backends/tensor_ops_math.hpp"
#include "lamina/common.hpp"

namespace lamina::cuda_detail {
namespace {

using tensor_ops::ranks_before;
using tensor_ops::reduce_term;

// Below this many outputs, blocks share each output's middle axis if it holds at least
// kLongAxis values: one thread walks a shorter axis in about the time a block takes to
// reduce it, and ArgMax's block per output would leave most of its threads idle (over 21
// classes at each pixel, 21 of 256 busy).
constexpr int64_t kManyOutputs = int64_t{1} << 16;
constexpr int64_t kLongAxis = kBlock;
bool thread_per_output(int64_t outputs, int64_t axis) {
  return outputs >= kManyOutputs || axis < kLongAxis;
}
// reduce_middle with few outputs splits the middle axis into pieces until about
// kTargetBlocks blocks run, keeping at least kMinTerms terms per thread.
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kMinTerms = 8;

// ---- reduce_middle ----

// y (outer, inner) = coeff * sum over m of op(x (outer, mid, inner)), one thread per (o, i).
template <ReduceOp Op>
__global__ void reduce_middle_kernel(int64_t outer, int64_t mid, int64_t inner, float coeff,
                                     const float* x, float* y) {
  LAMINA_GRID_STRIDE_LOOP(p, outer * inner) {
    const int64_t o = p / inner, i = p - o * inner;
    const float* xs = x + o * mid * inner + i;
    double sum = 0;
    for (int64_t m = 0; m < mid; ++m) sum += reduce_term<Op>(xs[m * inner]);
    y[p] = static_cast<float>(static_cast<double>(coeff) * sum);
  }
}

// How blocks share the outputs of reduce_middle with few outputs: block b takes positions
// [tile cw, tile cw + cw) of row o and piece `piece` of the middle axis, m in
// [piece length, piece length + length), b = (o tiles + tile) pieces + piece.
struct ReducePieces {
  int64_t outer, mid, inner;
  int cw;               // positions per block: a power of two, at most 32
  int64_t tiles;        // blocks across inner: ceil(inner / cw)
  int64_t pieces;       // blocks along the middle axis
  int64_t length;       // of a piece (the last may be shorter)
  __host__ __device__ int64_t blocks() const { return outer * tiles * pieces; }
};

ReducePieces reduce_pieces(int64_t outer, int64_t mid, int64_t inner) {
  ReducePieces r{outer, mid, inner, 1, 0, 1, mid};
  while (r.cw < inner && r.cw < 32) r.cw *= 2;
  r.tiles = (inner + r.cw - 1) / r.cw;
  const int64_t slices = kBlock / r.cw, groups = outer * r.tiles;
  if (groups < kTargetBlocks) {  // mid >= kLongAxis here
    const int64_t wanted = (kTargetBlocks + groups - 1) / groups;
    const int64_t most = (mid + slices * kMinTerms - 1) / (slices * kMinTerms);
    r.pieces = std::max<int64_t>(1, std::min(wanted, most));
    r.length = (mid + r.pieces - 1) / r.pieces;
    r.pieces = (mid + r.length - 1) / r.length;  // no empty piece
  }
  return r;
}

// Each block's sum of its piece for its cw positions: coeff times it into y when there is
// one piece, else into piece_sums (outer, pieces, inner). kBlock threads.
template <ReduceOp Op>
__global__ void reduce_pieces_kernel(ReducePieces r, float coeff, const float* x, float* y,
                                     double* piece_sums) {
  __shared__ double partial[kBlock];
  const int slices = kBlock / r.cw;
  const int lane = threadIdx.x % r.cw, s = threadIdx.x / r.cw;
  LAMINA_BLOCK_STRIDE_LOOP(b, r.blocks()) {
    const int64_t piece = b % r.pieces, group = b / r.pieces;
    const int64_t o = group / r.tiles, i = (group % r.tiles) * r.cw + lane;
    const int64_t m0 = piece * r.length, m1 = min(r.mid, m0 + r.length);
    double sum = 0;
    if (i < r.inner) {
      const float* xs = x + o * r.mid * r.inner + i;
      for (int64_t m = m0 + s; m < m1; m += slices) sum += reduce_term<Op>(xs[m * r.inner]);
    }
    // The slices' sums by a fixed tree; each thread reads back only its own entry later.
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = slices / 2; half > 0; half /= 2) {
      if (s < half) partial[threadIdx.x] += partial[threadIdx.x + half * r.cw];
      __syncthreads();
    }
    if (s == 0 && i < r.inner) {
      const double total = partial[threadIdx.x];
      if (r.pieces == 1) {
        y[o * r.inner + i] = static_cast<float>(static_cast<double>(coeff) * total);
      } else {
        piece_sums[(o * r.pieces + piece) * r.inner + i] = total;
      }
    }
  }
}

// y (outer, inner) = coeff * the sum of the pieces' sums in order, one thread per output.
__global__ void reduce_pieces_finish_kernel(ReducePieces r, float coeff,
                                            const double* piece_sums, float* y) {
  LAMINA_GRID_STRIDE_LOOP(p, r.outer * r.inner) {
    const int64_t o = p / r.inner, i = p - o * r.inner;
    double sum = 0;
    for (int64_t c = 0; c < r.pieces; ++c) sum += piece_sums[(o * r.pieces + c) * r.inner + i];
    y[p] = static_cast<float>(static_cast<double>(coeff) * sum);
  }
}

template <ReduceOp Op>
void launch_reduce_middle(cudaStream_t s, CudaContext& context, int64_t outer, int64_t mid,
                          int64_t inner, float coeff, const float* x, float* y) {
  if (thread_per_output(outer * inner, mid)) {
    reduce_middle_kernel<Op><<<elementwise_grid(outer * inner), kBlock, 0, s>>>(
        outer, mid, inner, coeff, x, y);
    LAMINA_CUDA_LAUNCHED(reduce_middle_kernel);
    return;
  }
  const ReducePieces r = reduce_pieces(outer, mid, inner);
  double* piece_sums = nullptr;
  if (r.pieces > 1)
    piece_sums = static_cast<double*>(context.workspace(sizeof(double) * outer * r.pieces * inner));
  reduce_pieces_kernel<Op><<<row_grid(r.blocks()), kBlock, 0, s>>>(r, coeff, x, y,
                                                                    piece_sums);
  LAMINA_CUDA_LAUNCHED(reduce_pieces_kernel);
  if (r.pieces == 1) return;
  reduce_pieces_finish_kernel<<<elementwise_grid(outer * inner), kBlock, 0, s>>>(
      r, coeff, piece_sums, y);
  LAMINA_CUDA_LAUNCHED(reduce_pieces_finish_kernel);
}

// dx (outer, mid, inner) = (coeff dy[o, i]) op'(x).
__global__ void reduce_middle_backward_kernel(ReduceOp op, int64_t outer, int64_t mid,
                                              int64_t inner, float coeff, const float* x,
                                              const float* dy, float* dx) {
  LAMINA_GRID_STRIDE_LOOP(e, outer * mid * inner) {
    const int64_t row = e / inner, i = e - row * inner;
    const float g = coeff * dy[(row / mid) * inner + i];
    dx[e] = tensor_ops::reduce_gradient(op, g, x == nullptr ? 0.0f : x[e]);
  }
}

// ---- argmax ----

// x (outer, channels, inner) -> index, value (outer, top_k, inner), one thread per (o, i)
// (tensor_ops::top_k: top_k scans of the channels, as on the Native backend).
__global__ void argmax_kernel(int64_t outer, int64_t channels, int64_t inner, int64_t top_k,
                              const float* x, float* index, float* value) {
  LAMINA_GRID_STRIDE_LOOP(p, outer * inner) {
    const int64_t o = p / inner, i = p - o * inner, at = o * top_k * inner + i;
    tensor_ops::top_k(channels, inner, top_k, x + o * channels * inner + i, inner,
                      index == nullptr ? nullptr : index + at,
                      value == nullptr ? nullptr : value + at);
  }
}

// A channel and its value; channel -1 (value 0) when there is none, as top_k writes it.
struct Pick {
  float value;
  long long channel;
};

// The pick that ranks first of two (neither NaN).
__device__ __forceinline__ Pick first_of(Pick a, Pick b) {
  if (a.channel < 0) return b;
  if (b.channel < 0) return a;
  return ranks_before(b.value, b.channel, a.value, a.channel) ? b : a;
}

// Picks move between lanes a field at a time (block_reduce's butterflies).
__device__ __forceinline__ Pick shuffle_xor(Pick p, int lane_mask) {
  return {__shfl_xor_sync(0xffffffffu, p.value, lane_mask),
          __shfl_xor_sync(0xffffffffu, p.channel, lane_mask)};
}

struct FirstOf {
  __device__ Pick operator()(Pick a, Pick b) const { return first_of(a, b); }
};

// The pick after `previous` (channel -1: the first pick) among x[c * stride], c < channels,
// as tensor_ops::top_k's scan finds it, by the whole block. The scan keeps its first
// candidate when that is NaN (nothing ranks before NaN) and never takes a later NaN; the
// first candidate can be NaN only without a previous pick (a NaN ranks after nothing), and
// is then channel 0. Otherwise the result is the best candidate that is not NaN.
__device__ Pick block_pick(int64_t channels, int64_t stride, const float* x, Pick previous) {
  if (previous.channel < 0 && channels > 0 && isnan(x[0])) return {x[0], 0};
  Pick best{0.0f, -1};
  LAMINA_THREAD_STRIDE_LOOP(c, channels) {
    const float v = x[c * stride];
    if (isnan(v)) continue;
    if (previous.channel >= 0 && !ranks_before(previous.value, previous.channel, v, c)) continue;
    best = first_of(best, Pick{v, c});
  }
  // first_of picks the maximum of a total order, so the tree's shape does not change it.
  return block_reduce(best, Pick{0.0f, -1}, FirstOf{});
}

// A block per output (o, i): top_k picks, each after the one before.
__global__ void argmax_block_kernel(int64_t outer, int64_t channels, int64_t inner,
                                   int64_t top_k, const float* x, float* index,
                                   float* value) {
  LAMINA_BLOCK_STRIDE_LOOP(p, outer * inner) {
    const int64_t o = p / inner, i = p - o * inner, at = o * top_k * inner + i;
    Pick pick{0.0f, -1};
    for (int64_t j = 0; j < top_k; ++j) {
      pick = block_pick(channels, inner, x + o * channels * inner + i, pick);
      if (threadIdx.x == 0) {
        if (index != nullptr) index[at + j * inner] = static_cast<float>(pick.channel);
        if (value != nullptr) value[at + j * inner] = pick.value;
      }
    }
  }
}

}  // namespace

void CudaBackend::reduce_middle(ReduceOp op, int64_t outer, int64_t mid, int64_t inner,
                                float coeff, const float* x, float* y) {
  if (outer * inner <= 0) return;
  const cudaStream_t s = on_device();
  switch (op) {
    case ReduceOp::kSum:
      return launch_reduce_middle<ReduceOp::kSum>(s, context_, outer, mid, inner, coeff, x, y);
    case ReduceOp::kAbsSum:
      return launch_reduce_middle<ReduceOp::kAbsSum>(s, context_, outer, mid, inner, coeff, x,
                                                     y);
    case ReduceOp::kSumSquares:
      return launch_reduce_middle<ReduceOp::kSumSquares>(s, context_, outer, mid, inner, coeff,
                                                         x, y);
  }
}

void CudaBackend::reduce_middle_backward(ReduceOp op, int64_t outer, int64_t mid,
                                         int64_t inner, float coeff, const float* x,
                                         const float* dy, float* dx) {
  const int64_t n = outer * mid * inner;
  if (n <= 0) return;
  reduce_middle_backward_kernel<<<elementwise_grid(n), kBlock, 0, on_device()>>>(
      op, outer, mid, inner, coeff, x, dy, dx);
  LAMINA_CUDA_LAUNCHED(reduce_middle_backward_kernel);
}

void CudaBackend::argmax(int64_t outer, int64_t channels, int64_t inner, int64_t top_k,
                         const float* x, float* index, float* value) {
  const int64_t n = outer * inner;
  if (n <= 0 || top_k <= 0) return;
  const cudaStream_t s = on_device();
  if (thread_per_output(n, channels)) {
    argmax_kernel<<<elementwise_grid(n), kBlock, 0, s>>>(outer, channels, inner, top_k, x,
                                                         index, value);
    LAMINA_CUDA_LAUNCHED(argmax_kernel);
    return;
  }
  argmax_block_kernel<<<row_grid(n), kBlock, 0, s>>>(outer, channels, inner, top_k, x, index,
                                                     value);
  LAMINA_CUDA_LAUNCHED(argmax_block_kernel);
}

}  // namespace lamina::cuda_detail
