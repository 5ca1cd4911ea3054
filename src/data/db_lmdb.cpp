// LMDB databases (database.hpp): one environment per database directory; each cursor reads
// in its own read-only transaction, so cursors of one reader may move on different threads.
#include <lmdb.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

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

// An environment, closed by its owner.
class Env {
 public:
  Env(const std::string& path, unsigned flags, size_t map_bytes) : path_(path) {
    check(mdb_env_create(&env_), path, "mdb_env_create");
    int rc = map_bytes > 0 ? mdb_env_set_mapsize(env_, map_bytes) : MDB_SUCCESS;
    if (rc != MDB_SUCCESS) {
      mdb_env_close(env_);
      check(rc, path, "mdb_env_set_mapsize");
    }
    rc = mdb_env_open(env_, path.c_str(), flags, 0664);
    if (rc != MDB_SUCCESS) {
      mdb_env_close(env_);
      check(rc, path, "opening");
    }
  }
  ~Env() { mdb_env_close(env_); }
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  MDB_env* get() const { return env_; }
  const std::string& path() const { return path_; }

 private:
  MDB_env* env_ = nullptr;
  std::string path_;
};

class LmdbCursor final : public DbCursor {
 public:
  explicit LmdbCursor(const Env& env) : path_(env.path()) {
    check(mdb_txn_begin(env.get(), nullptr, MDB_RDONLY, &txn_), path_, "mdb_txn_begin");
    MDB_dbi dbi = 0;
    int rc = mdb_dbi_open(txn_, nullptr, 0, &dbi);
    if (rc == MDB_SUCCESS) rc = mdb_cursor_open(txn_, dbi, &cursor_);
    if (rc != MDB_SUCCESS) {
      mdb_txn_abort(txn_);
      check(rc, path_, "opening a cursor");
    }
    try {
      seek_to_first();
    } catch (...) {  // a corrupt database: the destructor will not run
      mdb_cursor_close(cursor_);
      mdb_txn_abort(txn_);
      throw;
    }
  }
  ~LmdbCursor() override {
    mdb_cursor_close(cursor_);
    mdb_txn_abort(txn_);
  }
  bool valid() const override { return valid_; }
  std::string_view key() const override { return view(key_); }
  std::string_view value() const override { return view(value_); }
  void next() override { move(MDB_NEXT); }
  void seek_to_first() override { move(MDB_FIRST); }

 private:
  void move(MDB_cursor_op op) {
    const int rc = mdb_cursor_get(cursor_, &key_, &value_, op);
    valid_ = rc == MDB_SUCCESS;
    if (rc != MDB_NOTFOUND) check(rc, path_, "reading a record");
  }

  std::string path_;
  MDB_txn* txn_ = nullptr;
  MDB_cursor* cursor_ = nullptr;
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
  ~LmdbWriter() override {
    if (txn_) mdb_txn_abort(txn_);
  }
  void put(std::string_view key, std::string_view value) override {
    if (!txn_) {
      check(mdb_txn_begin(env_.get(), nullptr, 0, &txn_), env_.path(), "mdb_txn_begin");
      check(mdb_dbi_open(txn_, nullptr, 0, &dbi_), env_.path(), "mdb_dbi_open");
    }
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v{value.size(), const_cast<char*>(value.data())};
    check(mdb_put(txn_, dbi_, &k, &v, 0), env_.path(), "mdb_put");
  }
  void commit() override {
    if (!txn_) return;
    MDB_txn* txn = txn_;
    txn_ = nullptr;  // mdb_txn_commit frees it, whatever it returns
    check(mdb_txn_commit(txn), env_.path(), "mdb_txn_commit");
  }

 private:
  static const std::string& make_directory(const std::string& path) {
    require_new_db(path, DbKind::kLmdb);
    LAMINA_REQUIRE(mkdir(path.c_str(), 0755) == 0, db_prefix(path, DbKind::kLmdb),
                   "cannot create the directory: ", std::strerror(errno));
    return path;
  }

  Env env_;
  MDB_txn* txn_ = nullptr;
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
