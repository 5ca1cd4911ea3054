// Seeded shuffles, the same on every machine and standard library: Fisher-Yates driven by
// mt19937_64 directly (std::shuffle's algorithm varies between standard libraries), seeded
// through std::seed_seq (whose algorithm the standard fixes) with 32-bit words. MnistData,
// HDF5Data, ImageData and convert_imageset --shuffle draw their orders with it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

namespace lamina {

// order becomes 0, 1, ..., size - 1 shuffled by the generator seeded with seed_words.
template <class T>
void seeded_shuffle(std::vector<T>& order, std::initializer_list<uint32_t> seed_words) {
  std::iota(order.begin(), order.end(), T(0));
  std::seed_seq seq(seed_words);
  std::mt19937_64 rng(seq);
  for (int64_t i = int64_t(order.size()) - 1; i > 0; --i)
    std::swap(order[size_t(i)], order[size_t(rng() % uint64_t(i + 1))]);
}

// The order of epoch `epoch` of n samples: a permutation that depends only on the seed and
// the epoch.
inline std::vector<int32_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  seeded_shuffle(order, {uint32_t(seed), uint32_t(seed >> 32), uint32_t(epoch),
                         uint32_t(uint64_t(epoch) >> 32)});
  return order;
}

}  // namespace lamina
