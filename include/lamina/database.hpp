// Caffe's databases: LMDB and LevelDB files of (key, value) records, read in key order (the
// order Caffe's tools write them in, keys such as "%08d" of the index) and written in one
// or more transactions. Every problem (a missing path, a path that is not a database of the
// kind named, a corrupt file, a write that fails) is a lamina::Error naming the path and the
// backend.
//
// LMDB opens read-only without thread-local reader slots (MDB_RDONLY | MDB_NOTLS, as Caffe),
// so several readers of one database may live in one process, on any thread. LevelDB locks
// its directory: one reader per process at a time (Caffe has the same limit).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace lamina {

// DataParameter::DB's values.
enum class DbKind { kLevelDb = 0, kLmdb = 1 };

// "lmdb" or "leveldb" (any case); anything else is an Error naming the choices.
DbKind parse_db_kind(const std::string& name);
const char* db_kind_name(DbKind kind);  // "LMDB", "LevelDB"
// "LMDB database 'path'": how messages name a database.
std::string db_name(const std::string& path, DbKind kind);

// A position in a database. key() and value() stay valid until the cursor moves.
class DbCursor {
 public:
  virtual ~DbCursor() = default;
  virtual bool valid() const = 0;  // false past the last record
  virtual std::string_view key() const = 0;
  virtual std::string_view value() const = 0;
  virtual void next() = 0;
  virtual void seek_to_first() = 0;
  // Caffe's Data layer: the next record, and after the last one the first again.
  void next_wrapping() {
    next();
    if (!valid()) seek_to_first();
  }
};

class DbReader {
 public:
  virtual ~DbReader() = default;
  // A cursor at the first record (invalid when the database is empty).
  virtual std::unique_ptr<DbCursor> cursor() = 0;
  // The number of records (LevelDB counts them by walking its keys).
  virtual int64_t count() = 0;
};

class DbWriter {
 public:
  virtual ~DbWriter() = default;
  // Adds a record to the open transaction (a key written twice keeps its last value).
  virtual void put(std::string_view key, std::string_view value) = 0;
  // Makes the records put so far durable; later puts start a new transaction. The
  // destructor commits what is left only through an explicit commit(): call it last.
  virtual void commit() = 0;
};

// Opens an existing database for reading.
std::unique_ptr<DbReader> open_db(const std::string& path, DbKind kind);
// Creates a new database (a directory); an existing path is an Error, as in Caffe's tools.
std::unique_ptr<DbWriter> create_db(const std::string& path, DbKind kind);

}  // namespace lamina
