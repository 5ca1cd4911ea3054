// Fuzz target: bytes -> an IDX file (plain, or gzip when they start with its magic) ->
// read_idx_dims and read_idx. Every malformed file must end in a lamina::Error that agrees
// between the two; anything else is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_util.hpp"
#include "lamina/common.hpp"
#include "lamina/idx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lamina;
  const std::string path = fuzz::write_file("input-idx", data, size);
  std::vector<int64_t> dims;
  bool header_ok = true;
  try {
    dims = read_idx_dims(path);
  } catch (const Error& e) {
    fuzz::rejected("read_idx_dims", e);
    header_ok = false;
  }
  try {
    const IdxArray array = read_idx(path);
    // A whole file that reads must have a header that reads, the same dimensions, and
    // exactly product(dims) values.
    if (!header_ok || array.dims != dims) std::abort();
    if (int64_t(array.values.size()) != shape_count(array.dims)) std::abort();
    fuzz::accepted("read_idx");
  } catch (const Error& e) {
    fuzz::rejected("read_idx", e);
  }
  return 0;
}
