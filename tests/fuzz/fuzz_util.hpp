// Helpers shared by the fuzz targets: a scratch directory for the files they write, quiet
// logging, snapshot checksums, seed writing, and a backend with a memory budget.
//
// Every target defines LLVMFuzzerTestOneInput. Built with -DLAMINA_FUZZ=ON (clang) it links
// libFuzzer; in every other build it links replay_main.cpp, which runs it over the saved
// corpus, so each input there (crash reproducers included) is a ctest test.
#pragma once

#include <glog/logging.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "forwarding_backend.hpp"
#include "lamina/common.hpp"

namespace lamina::fuzz {

// A private directory under $TMPDIR (or /tmp), removed when the process exits normally
// (libFuzzer ends with _Exit, which skips that: scripts/test.sh points TMPDIR at a directory
// it removes).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/lamina-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) std::abort();
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return std::filesystem::path(pattern);
  }();
  return dir;
}

inline std::string write_file(const std::string& name, const void* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) std::abort();
  return path;
}

// Solver and net logs (glog) at INFO and WARNING would flood the fuzzer's output; they are
// kept with LAMINA_FUZZ_VERBOSE.
inline void quiet_logging() {
  if (!std::getenv("LAMINA_FUZZ_VERBOSE")) FLAGS_minloglevel = google::GLOG_ERROR;
}

// An input rejected with a lamina::Error, as expected; printed when LAMINA_FUZZ_VERBOSE is set,
// to see what the seeds and reproducers exercise.
inline void rejected(const char* stage, const Error& e) {
  static const bool verbose = std::getenv("LAMINA_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s: lamina::Error: %s\n", stage, e.what());
}
inline void accepted(const char* stage) {
  static const bool verbose = std::getenv("LAMINA_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s: ok\n", stage);
}

// Snapshot files end in the CRC-32 of everything before it. A mutated file would nearly
// always fail that check and never reach the record parser; with the CRC recomputed, it
// does. The checksum check itself is covered by tests/test_snapshot.cpp.
inline std::string with_valid_crc(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size < 28) return bytes;  // shorter than header and trailer: refused before the CRC
  const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), uInt(size - 4));
  for (int i = 0; i < 4; ++i) bytes[size - 4 + i] = char((crc >> (8 * i)) & 0xff);
  return bytes;
}

// With LAMINA_FUZZ_WRITE_SEEDS=DIR, a target writes its valid inputs (seed corpus) into DIR.
inline void write_seed(const std::string& name, const std::string& bytes) {
  const char* dir = std::getenv("LAMINA_FUZZ_WRITE_SEEDS");
  if (!dir || !*dir) return;
  std::ofstream out(std::string(dir) + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A NativeBackend that refuses to hold more than budget bytes at once, with a lamina::Error
// as NativeBackend gives when memory runs out. This is the fuzzer's resource limit, not an
// oracle: shapes Lamina accepts (up to the machine's memory) would otherwise trip libFuzzer's
// malloc and RSS limits (2 GiB), which report as crashes.
class BudgetBackend final : public testing::ForwardingBackend {
 public:
  explicit BudgetBackend(size_t budget) : budget_(budget) {}
  void* allocate(size_t bytes) override {
    if (bytes > budget_ - live_)
      fail("fuzz budget: ", bytes, " bytes requested, ", budget_ - live_, " left");
    void* p = ForwardingBackend::allocate(bytes);
    if (p) {
      sizes_[p] = bytes;
      live_ += bytes;
    }
    return p;
  }
  void deallocate(void* p) noexcept override {
    auto it = sizes_.find(p);
    if (it != sizes_.end()) {
      live_ -= it->second;
      sizes_.erase(it);
    }
    ForwardingBackend::deallocate(p);
  }

 private:
  size_t budget_;
  size_t live_ = 0;
  std::map<void*, size_t> sizes_;
};

}  // namespace lamina::fuzz
