// Counters in backend memory for the operations whose input changes every forward pass: a
// data layer's batch and a dropout mask. The operation that reads the counter also advances
// it, so each pass launches the same operation with the same arguments: the step stays a
// fixed sequence that a CUDA graph can capture and replay, and nothing is copied to the
// device per pass.
//
//   PassCounter  in backend memory: the passes so far. The CUDA kernels read it in every
//                block, and the last block to finish adds one (blocks_done counts them).
//   BatchOrder   which samples a data layer's batch takes at a given pass: in file order,
//                wrapping around, or, with shuffle, in each epoch's permutation (two epochs'
//                permutations are resident, so a step may cross an epoch boundary).
#pragma once

#include <cstdint>

#include "lamina/host_device.hpp"

namespace lamina {

struct PassCounter {
  int64_t passes = 0;         // the forward passes that have read the counter
  uint32_t blocks_done = 0;   // CUDA: blocks of the running launch that have read passes
  uint32_t unused = 0;
};

struct BatchOrder {
  PassCounter* counter = nullptr;  // backend memory; read, then advanced by one
  // Without shuffle: the sample of pass 0's first row. With shuffle: pass 0's batch number
  // (epoch * batches_per_epoch + batch within the epoch).
  int64_t first = 0;
  int64_t batch = 1;    // rows per pass, of this worker
  int64_t samples = 1;  // in the data set
  bool shuffle = false;
  // With shuffle: epoch e's permutation of the samples is order[e % 2] (backend memory).
  const int32_t* order[2] = {nullptr, nullptr};
  // Data parallel (docs/distributed.md): a pass of the whole job takes workers * batch rows
  // at the cursor; worker `rank` takes its rows rank * batch onwards. One worker with batch
  // workers * batch takes the same rows in the same order.
  int64_t workers = 1;
  int64_t rank = 0;

  // The rows a pass of the whole job takes.
  LAMINA_HOST_DEVICE int64_t stride() const { return batch * workers; }
  // With shuffle an epoch is its full batches; the rest of the samples are skipped.
  LAMINA_HOST_DEVICE int64_t batches_per_epoch() const { return samples / stride(); }
  // The epoch of pass `passes` (0 without shuffle).
  LAMINA_HOST_DEVICE int64_t epoch(int64_t passes) const {
    return shuffle ? (first + passes) / batches_per_epoch() : 0;
  }
  // The index into its epoch's order of pass `passes`' first row of the whole job (without
  // shuffle, its sample).
  LAMINA_HOST_DEVICE int64_t cursor(int64_t passes) const {
    if (shuffle) return (first + passes) % batches_per_epoch() * stride();
    return (first + passes % samples * (stride() % samples)) % samples;
  }
  // The sample that row r of this worker's pass `passes` takes.
  LAMINA_HOST_DEVICE int64_t sample(int64_t passes, int64_t r) const {
    const int64_t row = rank * batch + r;
    if (!shuffle) return (cursor(passes) + row) % samples;
    return order[epoch(passes) % 2][cursor(passes) + row];
  }
};

// One top a data layer gathers: row r of dst (cols floats) = scale * src row sample(r)
// (cols uint8 values, backend memory). A null src gathers nothing.
struct GatherTop {
  const uint8_t* src = nullptr;
  int64_t cols = 0;
  float scale = 1;
  float* dst = nullptr;
};

}  // namespace lamina
