// LevelDB databases (database.hpp), opened with Caffe's options: 64 KiB blocks and a 256 MiB
// write buffer; reads fill no cache (a Data layer reads each record once an epoch).
#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include "db_backends.hpp"
#include "lamina/common.hpp"

namespace lamina {
namespace {

std::string_view view(const leveldb::Slice& s) { return {s.data(), s.size()}; }

void check(const leveldb::Status& status, const std::string& path, const char* what) {
  if (status.ok()) return;
  fail(db_prefix(path, DbKind::kLevelDb), what, " failed: ", status.ToString(),
       status.IsCorruption() || status.IsInvalidArgument()
           ? " (the database is corrupt, or is not a LevelDB database: is the backend LMDB?)"
           : "");
}

std::unique_ptr<leveldb::DB> open(const std::string& path, bool create) {
  leveldb::Options options;
  options.block_size = 65536;
  options.write_buffer_size = 268435456;
  options.max_open_files = 100;
  options.create_if_missing = create;
  options.error_if_exists = create;
  options.paranoid_checks = true;
  leveldb::DB* db = nullptr;
  check(leveldb::DB::Open(options, path, &db), path, "opening");
  return std::unique_ptr<leveldb::DB>(db);
}

class LevelDbCursor final : public DbCursor {
 public:
  LevelDbCursor(leveldb::DB& db, std::string path) : path_(std::move(path)) {
    leveldb::ReadOptions options;
    options.fill_cache = false;
    options.verify_checksums = true;
    it_.reset(db.NewIterator(options));
    seek_to_first();
  }
  bool valid() const override { return it_->Valid(); }
  std::string_view key() const override { return view(it_->key()); }
  std::string_view value() const override { return view(it_->value()); }
  void next() override {
    it_->Next();
    check(it_->status(), path_, "reading a record");
  }
  void seek_to_first() override {
    it_->SeekToFirst();
    check(it_->status(), path_, "reading the first record");
  }

 private:
  std::string path_;
  std::unique_ptr<leveldb::Iterator> it_;
};

class LevelDbReader final : public DbReader {
 public:
  explicit LevelDbReader(const std::string& path) : path_(path), db_(open(path, false)) {}
  std::unique_ptr<DbCursor> cursor() override {
    return std::make_unique<LevelDbCursor>(*db_, path_);
  }
  int64_t count() override {
    int64_t n = 0;
    for (auto c = cursor(); c->valid(); c->next()) ++n;
    return n;
  }

 private:
  std::string path_;
  std::unique_ptr<leveldb::DB> db_;
};

class LevelDbWriter final : public DbWriter {
 public:
  explicit LevelDbWriter(const std::string& path) : path_(path), db_(open(path, true)) {}
  void put(std::string_view key, std::string_view value) override {
    batch_.Put(leveldb::Slice(key.data(), key.size()),
               leveldb::Slice(value.data(), value.size()));
  }
  void commit() override {
    check(db_->Write(leveldb::WriteOptions(), &batch_), path_, "writing");
    batch_.Clear();
  }

 private:
  std::string path_;
  std::unique_ptr<leveldb::DB> db_;
  leveldb::WriteBatch batch_;
};

}  // namespace

std::unique_ptr<DbReader> open_leveldb(const std::string& path) {
  require_db_directory(path, DbKind::kLevelDb);
  return std::make_unique<LevelDbReader>(path);
}

std::unique_ptr<DbWriter> create_leveldb(const std::string& path) {
  require_new_db(path, DbKind::kLevelDb);
  return std::make_unique<LevelDbWriter>(path);
}

}  // namespace lamina
