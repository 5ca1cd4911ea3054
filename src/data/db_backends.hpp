// The database backends behind open_db and create_db (database.hpp), one file each, and what
// they share: how a path is checked before a library sees it.
#pragma once

#include <memory>
#include <string>

#include "lamina/database.hpp"

namespace lamina {

std::unique_ptr<DbReader> open_lmdb(const std::string& path);
std::unique_ptr<DbWriter> create_lmdb(const std::string& path);
std::unique_ptr<DbReader> open_leveldb(const std::string& path);
std::unique_ptr<DbWriter> create_leveldb(const std::string& path);

// "LMDB database 'path': ", the start of every message about it.
std::string db_prefix(const std::string& path, DbKind kind);
// Throws unless path is an existing directory (both backends store a database as one).
void require_db_directory(const std::string& path, DbKind kind);
// Throws when path exists: a new database is never written over an old one.
void require_new_db(const std::string& path, DbKind kind);

}  // namespace lamina
