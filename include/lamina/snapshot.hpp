// Snapshots: trained weights and solver state on disk (docs/snapshots.md).
//
// Both kinds of file share one container, version 1, every integer little-endian:
//
//   offset  bytes  field
//        0      8  magic: "LAMINAW\0" (weights) or "LAMINAS\0" (solver state)
//        8      4  format version (uint32, 1)
//       12      4  flags (uint32, 0; reserved)
//       16      8  payload length P (uint64)
//       24      P  payload: records, one after another
//   24 + P      4  CRC-32 (zlib's crc32) of bytes [0, 24 + P)
//
// The file is exactly 28 + P bytes. A record is a named array:
//
//   uint32 name length L (1..4096), L bytes of name
//   uint8  type: 1 float32, 2 int64, 3 bytes
//   uint8  number of dimensions D (0..8; bytes records have D = 1)
//   uint16 reserved (0)
//   D x int64 dimensions (each >= 0, product checked for overflow)
//   the values: count x 4 (float32), count x 8 (int64) or count x 1 (bytes)
//
// A weights file holds one float32 record per entry of the arena's parameter table, named as
// the table names it ("<layer>/<role>", or a shared name from param { name }), shaped as
// the parameter. A solver state file holds the records listed in solver_state.hpp.
//
// Reading checks, before anything is used: the file is there and is a regular file, the
// magic, the version, the flags, the length (truncated or trailing bytes), the checksum,
// then every record's bounds and that no name repeats. Every problem throws lamina::Error
// naming the file and what is wrong. Loading into a net checks every parameter's presence
// and shape before the first value is copied: an error leaves the net untouched.
//
// Writing is atomic: the bytes go to PATH.tmp-<pid>, which is flushed (fsync) and renamed
// over PATH, and the directory is synced. A process killed at any moment leaves PATH as it
// was (the old file) or complete (the new one); at worst a stale PATH.tmp-<pid> remains,
// which nothing reads. Errors (ENOSPC, EACCES, a missing directory) throw lamina::Error
// naming the path and the system's reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/net.hpp"
#include "lamina/param_arena.hpp"

namespace lamina {

constexpr uint32_t kSnapshotFormatVersion = 1;
constexpr size_t kSnapshotHeaderBytes = 24;   // magic, version, flags, payload length
constexpr size_t kSnapshotTrailerBytes = 4;   // CRC-32

enum class SnapshotKind { kWeights, kSolverState };
// "weights" or "solver state", for messages.
const char* snapshot_kind_name(SnapshotKind kind);

// One named array of a snapshot file.
struct SnapshotRecord {
  enum class Type : uint8_t { kFloat32 = 1, kInt64 = 2, kBytes = 3 };
  std::string name;
  Type type = Type::kFloat32;
  Shape shape;                // kBytes: (length)
  std::vector<float> floats;  // kFloat32: shape_count(shape) values
  std::vector<int64_t> ints;  // kInt64
  std::string bytes;          // kBytes

  static SnapshotRecord of_floats(std::string name, Shape shape, std::vector<float> values);
  static SnapshotRecord of_ints(std::string name, std::vector<int64_t> values);  // shape (n)
  static SnapshotRecord of_bytes(std::string name, std::string value);
  int64_t count() const { return shape_count(shape); }
};

struct SnapshotFile {
  SnapshotKind kind = SnapshotKind::kWeights;
  uint32_t version = kSnapshotFormatVersion;
  uint32_t checksum = 0;  // the CRC-32 stored in the file (verified when read)
  std::vector<SnapshotRecord> records;

  const SnapshotRecord* find(const std::string& name) const;  // nullptr when absent
};

// The bytes of a file holding records; *checksum receives its CRC-32 when given.
std::string encode_snapshot(SnapshotKind kind, const std::vector<SnapshotRecord>& records,
                            uint32_t* checksum = nullptr);
// Parses and validates bytes read from `source` (a path, for messages). verify_checksum is
// for fuzzers and tests that corrupt the payload on purpose; everything else is checked
// regardless. Throws lamina::Error naming source and the problem.
SnapshotFile decode_snapshot(const std::string& bytes, SnapshotKind kind,
                             const std::string& source, bool verify_checksum = true);
// Reads path whole and decodes it.
SnapshotFile read_snapshot_file(const std::string& path, SnapshotKind kind);

// PREFIX_iter_N, the name of iteration N's snapshot files without their extension.
std::string snapshot_stem(const std::string& prefix, int64_t iter);
// Writes bytes to path atomically (see above), through temporary_path(path).
void write_file_atomically(const std::string& path, const std::string& bytes);
// PATH.tmp-<pid>: where write_file_atomically writes before the rename.
std::string temporary_path(const std::string& path);
// Writes all of data to the open descriptor fd, retrying on EINTR and short writes; throws
// naming `path` and strerror (ENOSPC: "No space left on device").
void write_fully(int fd, const void* data, size_t size, const std::string& path);
// Throws, naming the directory and the reason, when the snapshots of a run that ends at
// iteration max_iter cannot be written under `prefix` (the directory is missing, is not a
// directory or is not writable, or a name is too long). Creates and removes the longest file
// such a run writes, PREFIX_iter_<max_iter>.solverstate.tmp-<pid>.
void check_writable(const std::string& prefix, int64_t max_iter = 0);

// ---- the parameter arena in snapshot files ----

// How arena_from_records and load_weights match a file against the arena's table.
enum class WeightsMatch {
  kExact,       // resume: every parameter present with its shape, and nothing else
  kRequireAll,  // scoring (lamina test): every parameter present; others in the file ignored
  kFineTune,    // fine-tuning: parameters absent from the file keep their fillers
};

struct WeightsLoadReport {
  std::vector<std::string> loaded;       // parameters whose values came from the file
  std::vector<std::string> kept_filler;  // kFineTune: parameters the file does not have
  std::vector<std::string> ignored;      // entries of the file the arena does not have
};

// One float32 record per parameter of the arena's table, named prefix + its name and shaped
// as it, holding one array of the arena (data(), state(k)); one host copy. A weights file
// holds these with prefix ""; a solver state holds "history/", "history2/".
std::vector<SnapshotRecord> arena_records(const ParamArena& arena, const float* array,
                                          const std::string& prefix);
// The inverse: the array (arena.count() floats, padding zero) held by the records of file
// named prefix + a parameter's name. A missing parameter (kExact, kRequireAll), a shape that
// differs, or (kExact) a record with the prefix that no parameter has, is an error naming
// the file, the layer and both shapes. Nothing is changed; report lists what matched.
std::vector<float> arena_from_records(const ParamArena& arena, const SnapshotFile& file,
                                      const std::string& path, const std::string& prefix,
                                      WeightsMatch match, WeightsLoadReport* report = nullptr);
// Writes the arena's weights to path atomically; returns the file's CRC-32.
uint32_t save_weights(const ParamArena& arena, const std::string& path);
// Loads a weights file into the arena's weights, matched by parameter name; the arena is
// changed only when every check passed.
WeightsLoadReport load_weights(ParamArena& arena, const std::string& path, WeightsMatch match);
WeightsLoadReport load_weights(ParamArena& arena, const SnapshotFile& file,
                               const std::string& path, WeightsMatch match);
// The same for a net's arena (its own, or the one it shares).
inline uint32_t save_weights(const Net& net, const std::string& path) {
  return save_weights(net.arena(), path);
}
inline WeightsLoadReport load_weights(Net& net, const std::string& path, WeightsMatch match) {
  return load_weights(net.arena(), path, match);
}

// The index of the first value of values that is NaN or infinite, or -1.
int64_t first_nonfinite(const float* values, int64_t n);

}  // namespace lamina
