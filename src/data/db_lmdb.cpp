// LMDB databases (database.hpp): one environment per database directory; each cursor reads
// in its own read-only transaction, so cursors of one reader may move on different threads.
#include <lmdb.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "db_backends.hpp"
#include "lamina/common.hpp"

namespace lamina {
namespace {

// Caffe's map size for new databases: 1 TiB of address space, not of disk.
constexpr size_t kMapBytes = size_t{1} << 40;

std::string_view view(const MDB_val& v) {
  return {static_cast<const char*>(v.mv_data), v.mv_size};
}

// Throws unless rc is MDB_SUCCESS: "<prefix><what> failed: <LMDB's reason>".
void check(int rc, const std::string& path, const char* what) {
  if (rc == MDB_SUCCESS) return;
  // A directory without data.mdb (ENOENT when opened read-only) holds no LMDB database.
  const bool not_db = rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == ENOENT;
  fail(db_prefix(path, DbKind::kLmdb), what, " failed: ", mdb_strerror(rc),
       not_db ? " (the directory does not hold an LMDB database: is the backend LEVELDB?)"
       : rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND ? " (the database is corrupt)"
                                                         : "");
}

// Owners of LMDB's handles: an environment is closed, a transaction aborted (unless
// released to mdb_txn_commit), a cursor closed.
struct EnvClose {
  void operator()(MDB_env* env) const { mdb_env_close(env); }
};
struct TxnAbort {
  void operator()(MDB_txn* txn) const { mdb_txn_abort(txn); }
};
struct CursorClose {
  void operator()(MDB_cursor* cursor) const { mdb_cursor_close(cursor); }
};
using TxnPtr = std::unique_ptr<MDB_txn, TxnAbort>;

// A transaction of env begun with flags, or an Error.
TxnPtr begin_txn(MDB_env* env, unsigned flags, const std::string& path) {
  MDB_txn* txn = nullptr;
  check(mdb_txn_begin(env, nullptr, flags, &txn), path, "mdb_txn_begin");
  return TxnPtr(txn);
}

// An environment opened at path.
class Env {
 public:
  Env(const std::string& path, unsigned flags, size_t map_bytes) : path_(path) {
    MDB_env* env = nullptr;
    check(mdb_env_create(&env), path, "mdb_env_create");
    env_.reset(env);
    if (map_bytes > 0) check(mdb_env_set_mapsize(env, map_bytes), path, "mdb_env_set_mapsize");
    check(mdb_env_open(env, path.c_str(), flags, 0664), path, "opening");
  }
  MDB_env* get() const { return env_.get(); }
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<MDB_env, EnvClose> env_;
  std::string path_;
};

class LmdbCursor final : public DbCursor {
 public:
  explicit LmdbCursor(const Env& env)
      : path_(env.path()), txn_(begin_txn(env.get(), MDB_RDONLY, path_)) {
    MDB_dbi dbi = 0;
    MDB_cursor* cursor = nullptr;
    int rc = mdb_dbi_open(txn_.get(), nullptr, 0, &dbi);
    if (rc == MDB_SUCCESS) rc = mdb_cursor_open(txn_.get(), dbi, &cursor);
    check(rc, path_, "opening a cursor");
    cursor_.reset(cursor);
    seek_to_first();
  }
  bool valid() const override { return valid_; }
  std::string_view key() const override { return view(key_); }
  std::string_view value() const override { return view(value_); }
  void next() override { move(MDB_NEXT); }
  void seek_to_first() override { move(MDB_FIRST); }

 private:
  void move(MDB_cursor_op op) {
    const int rc = mdb_cursor_get(cursor_.get(), &key_, &value_, op);
    valid_ = rc == MDB_SUCCESS;
    if (rc != MDB_NOTFOUND) check(rc, path_, "reading a record");
  }

  std::string path_;
  TxnPtr txn_;
  std::unique_ptr<MDB_cursor, CursorClose> cursor_;  // after txn_: closed before it ends
  MDB_val key_{}, value_{};
  bool valid_ = false;
};

class LmdbReader final : public DbReader {
 public:
  explicit LmdbReader(const std::string& path) : env_(path, MDB_RDONLY | MDB_NOTLS, 0) {}
  std::unique_ptr<DbCursor> cursor() override { return std::make_unique<LmdbCursor>(env_); }
  int64_t count() override {
    MDB_stat stat{};
    check(mdb_env_stat(env_.get(), &stat), env_.path(), "mdb_env_stat");
    return int64_t(stat.ms_entries);
  }

 private:
  Env env_;
};

class LmdbWriter final : public DbWriter {
 public:
  explicit LmdbWriter(const std::string& path) : env_(make_directory(path), 0, kMapBytes) {}
  void put(std::string_view key, std::string_view value) override {
    if (!txn_) {
      txn_ = begin_txn(env_.get(), 0, env_.path());
      check(mdb_dbi_open(txn_.get(), nullptr, 0, &dbi_), env_.path(), "mdb_dbi_open");
    }
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v{value.size(), const_cast<char*>(value.data())};
    check(mdb_put(txn_.get(), dbi_, &k, &v, 0), env_.path(), "mdb_put");
  }
  void commit() override {
    if (!txn_) return;
    // Released: mdb_txn_commit frees the transaction, whatever it returns.
    check(mdb_txn_commit(txn_.release()), env_.path(), "mdb_txn_commit");
  }

 private:
  static const std::string& make_directory(const std::string& path) {
    require_new_db(path, DbKind::kLmdb);
    LAMINA_REQUIRE(mkdir(path.c_str(), 0755) == 0, db_prefix(path, DbKind::kLmdb),
                   "cannot create the directory: ", std::strerror(errno));
    return path;
  }

  Env env_;
  TxnPtr txn_;  // the open transaction, aborted if never committed (before env_ closes)
  MDB_dbi dbi_ = 0;
};

}  // namespace

std::unique_ptr<DbReader> open_lmdb(const std::string& path) {
  require_db_directory(path, DbKind::kLmdb);
  return std::make_unique<LmdbReader>(path);
}

std::unique_ptr<DbWriter> create_lmdb(const std::string& path) {
  return std::make_unique<LmdbWriter>(path);
}

}  // namespace lamina
