// For the layers that pick rows by index (Embed, BatchReindex, Filter) or write indices
// (ArgMax): the Native backend's gather_rows and scatter_add_rows throw an Error for an index
// that names no row; the layer says which layer and blob it came from. Indices are floats.
#pragma once

#include <cstdint>
#include <string>

#include "lamina/common.hpp"

namespace lamina {

constexpr int64_t kExactIndices = int64_t{1} << 24;  // floats hold integers exactly up to here

// Runs op(); an Error it throws is thrown again with context ("layer 'x' (T): bottom 'i'")
// in front of its message.
template <class Op>
void with_index_context(const std::string& context, Op op) {
  try {
    op();
  } catch (const Error& e) {
    fail(context, ": ", e.what());
  }
}

}  // namespace lamina
