// The random numbers a layer draws in every TRAIN pass, as Dropout draws its masks: number i
// of pass p is counter_uniform(seed, offset + p per_pass + i) (counter_rng.hpp), the same on
// every backend. Each operation that draws reads and advances a PassCounter of its own in
// backend memory (pass_counter.hpp), so every pass is the same launch and a captured step
// replays it; the host keeps the count as passes run or are replayed. The layer's state
// (Layer::state) is (seed, the offset of the next pass), so a resumed run draws what an
// uninterrupted one would. Data parallel: worker r > 0 keys the generator by a hash of the
// seed and r (Layer::set_worker), so workers draw independent numbers. DrawingLayer (below)
// wires these into a layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/counter_rng.hpp"
#include "lamina/layer.hpp"
#include "lamina/pass_counter_buffer.hpp"

namespace lamina {

class PassRandom {
 public:
  explicit PassRandom(uint64_t seed) : seed_(seed) {}

  // Makes `operations` counters for passes of per_pass numbers. Called again (a new shape),
  // it goes on after the numbers already drawn, restarting the counters it has.
  void shape(Backend& backend, int64_t per_pass, int operations) {
    offset_ = next_offset();
    per_pass_ = static_cast<uint64_t>(per_pass);
    if (counters_.size() == size_t(operations)) {
      for (PassCounterBuffer& c : counters_) c.restart();
      return;
    }
    counters_.clear();
    for (int k = 0; k < operations; ++k) counters_.emplace_back(backend);
  }
  bool drawing() const { return !counters_.empty(); }

  // What the operations take: the generator's key (this worker's), pass 0's first number,
  // the numbers per pass, and operation k's counter.
  uint64_t seed() const { return rank_ == 0 ? seed_ : counter_hash(seed_, uint64_t(rank_)); }
  uint64_t offset() const { return offset_; }
  uint64_t per_pass() const { return per_pass_; }
  PassCounter* counter(size_t k) const { return counters_.at(k).device(); }

  // The host's copies, after a forward pass or `passes` replayed ones.
  void advance(int64_t passes = 1) {
    for (PassCounterBuffer& c : counters_) c.advance(passes);
  }
  void set_rank(int rank) { rank_ = rank; }

  // (seed, the offset of the next pass): the job's seed, whatever this worker's rank.
  std::vector<int64_t> state() const { return {int64_t(seed_), int64_t(next_offset())}; }
  // where: the layer, for the error.
  void set_state(const std::string& where, const std::vector<int64_t>& state) {
    LAMINA_REQUIRE(state.size() == 2, where, "the snapshot holds ", state.size(),
                   " state values; a layer drawing random numbers keeps 2 (seed, offset)");
    seed_ = uint64_t(state[0]);
    offset_ = uint64_t(state[1]);
    for (PassCounterBuffer& c : counters_) c.restart();
  }

 private:
  uint64_t next_offset() const {
    const int64_t passes = counters_.empty() ? 0 : counters_.front().passes();
    return offset_ + uint64_t(passes) * per_pass_;
  }

  uint64_t seed_;
  uint64_t offset_ = 0;    // pass 0's first number
  uint64_t per_pass_ = 0;
  int rank_ = 0;
  std::vector<PassCounterBuffer> counters_;  // one per drawing operation; none outside TRAIN
};

// A layer whose TRAIN passes draw from random_ (shaped in its setup, advanced after each
// forward): its state, replayed passes and worker rank. Without draws, no state.
class DrawingLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<int64_t> state() const override {
    return random_.drawing() ? random_.state() : std::vector<int64_t>{};
  }
  void set_state(const std::vector<int64_t>& state) override {
    if (!random_.drawing()) return Layer::set_state(state);
    random_.set_state(where(), state);
  }
  void replayed(int64_t passes) override { random_.advance(passes); }
  bool set_worker(int rank, int /*workers*/) override {
    random_.set_rank(rank);
    return true;
  }

 protected:
  PassRandom random_{seed_};
};

}  // namespace lamina
