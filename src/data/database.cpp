// Choosing a database backend, and the path checks both backends make (database.hpp).
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "db_backends.hpp"
#include "lamina/common.hpp"
#include "lamina/file_access.hpp"

namespace lamina {

DbKind parse_db_kind(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  if (lower == "lmdb") return DbKind::kLmdb;
  if (lower == "leveldb") return DbKind::kLevelDb;
  fail("unknown database backend '", name, "'; choose lmdb or leveldb");
}

const char* db_kind_name(DbKind kind) { return kind == DbKind::kLmdb ? "LMDB" : "LevelDB"; }

std::string db_name(const std::string& path, DbKind kind) {
  return std::string(db_kind_name(kind)) + " database " + quoted_path(path);
}

std::string db_prefix(const std::string& path, DbKind kind) { return db_name(path, kind) + ": "; }

void require_db_directory(const std::string& path, DbKind kind) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    fail(db_prefix(path, kind), std::strerror(errno),
         errno == ENOENT ? " (create it with `lamina convert_mnist` or Caffe's tools)" : "");
  }
  LAMINA_REQUIRE(S_ISDIR(info.st_mode), db_prefix(path, kind), "is not a directory; a ",
                 db_kind_name(kind), " database is a directory of files",
                 kind == DbKind::kLmdb ? " (data.mdb, lock.mdb)" : "");
}

void require_new_db(const std::string& path, DbKind kind) {
  struct stat info {};
  LAMINA_REQUIRE(stat(path.c_str(), &info) != 0 && errno == ENOENT, db_prefix(path, kind),
                 "already exists; a new database is not written over another (remove it "
                 "first or choose another path)");
}

std::unique_ptr<DbReader> open_db(const std::string& path, DbKind kind) {
  return kind == DbKind::kLmdb ? open_lmdb(path) : open_leveldb(path);
}

std::unique_ptr<DbWriter> create_db(const std::string& path, DbKind kind) {
  return kind == DbKind::kLmdb ? create_lmdb(path) : create_leveldb(path);
}

}  // namespace lamina
