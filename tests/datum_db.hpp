// Datum databases written and read by the tests independently of Lamina's database code:
// Datum bytes built from the format's field numbers, and LMDB through liblmdb directly.
#pragma once

#include <gtest/gtest.h>
#include <leveldb/db.h>
#include <leveldb/write_batch.h>
#include <lmdb.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lamina::testing {

inline void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(v & 0x7f | 0x80);
    v >>= 7;
  }
  out += char(v);
}

// A raw Datum's bytes: channels (field 1), height (2), width (3), data (4, bytes), label (5),
// float_data (6, each a fixed32 with tag 6 << 3 | 5). Empty pixels write no data field.
inline std::string datum_bytes(int channels, int height, int width, const std::string& pixels,
                               int label, const std::vector<float>& floats = {}) {
  std::string out;
  out += char(1 << 3), put_varint(out, uint64_t(channels));
  out += char(2 << 3), put_varint(out, uint64_t(height));
  out += char(3 << 3), put_varint(out, uint64_t(width));
  if (!pixels.empty()) {
    out += char(4 << 3 | 2), put_varint(out, pixels.size());
    out += pixels;
  }
  out += char(5 << 3), put_varint(out, uint64_t(uint32_t(label)));
  for (float f : floats) {
    out += char(6 << 3 | 5);
    char b[4];
    std::memcpy(b, &f, 4);  // little-endian hosts, as the format
    out.append(b, 4);
  }
  return out;
}

// An encoded Datum's bytes, as Caffe's convert_imageset --encoded writes it: the file in data
// (field 4), the label (5) and encoded: true (7); no dimensions.
inline std::string encoded_datum_bytes(const std::string& file, int label) {
  std::string out;
  out += char(4 << 3 | 2), put_varint(out, file.size());
  out += file;
  out += char(5 << 3), put_varint(out, uint64_t(uint32_t(label)));
  out += char(7 << 3), out += char(1);
  return out;
}

// An LMDB database at path (a new directory) holding the records, via liblmdb only.
inline void write_lmdb(const std::string& path,
                       const std::vector<std::pair<std::string, std::string>>& records) {
  ASSERT_EQ(mkdir(path.c_str(), 0755), 0) << path;
  MDB_env* env = nullptr;
  ASSERT_EQ(mdb_env_create(&env), MDB_SUCCESS);
  ASSERT_EQ(mdb_env_set_mapsize(env, size_t{1} << 30), MDB_SUCCESS);
  ASSERT_EQ(mdb_env_open(env, path.c_str(), 0, 0664), MDB_SUCCESS);
  MDB_txn* txn = nullptr;
  MDB_dbi dbi = 0;
  ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), MDB_SUCCESS);
  ASSERT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), MDB_SUCCESS);
  for (const auto& [key, value] : records) {
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v{value.size(), const_cast<char*>(value.data())};
    ASSERT_EQ(mdb_put(txn, dbi, &k, &v, 0), MDB_SUCCESS);
  }
  ASSERT_EQ(mdb_txn_commit(txn), MDB_SUCCESS);
  mdb_env_close(env);
}

// Every (key, value) of the LMDB database at path, in key order, via liblmdb only.
inline std::vector<std::pair<std::string, std::string>> read_lmdb(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> records;
  MDB_env* env = nullptr;
  EXPECT_EQ(mdb_env_create(&env), MDB_SUCCESS);
  if (mdb_env_open(env, path.c_str(), MDB_RDONLY | MDB_NOTLS, 0664) != MDB_SUCCESS) {
    ADD_FAILURE() << "cannot open LMDB " << path;
    mdb_env_close(env);
    return records;
  }
  MDB_txn* txn = nullptr;
  MDB_dbi dbi = 0;
  MDB_cursor* cursor = nullptr;
  EXPECT_EQ(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn), MDB_SUCCESS);
  EXPECT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), MDB_SUCCESS);
  EXPECT_EQ(mdb_cursor_open(txn, dbi, &cursor), MDB_SUCCESS);
  MDB_val k, v;
  for (int op = MDB_FIRST; mdb_cursor_get(cursor, &k, &v, MDB_cursor_op(op)) == MDB_SUCCESS;
       op = MDB_NEXT)
    records.emplace_back(std::string(static_cast<char*>(k.mv_data), k.mv_size),
                         std::string(static_cast<char*>(v.mv_data), v.mv_size));
  mdb_cursor_close(cursor);
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return records;
}

// A LevelDB database at path (new) holding the records, via LevelDB's own API.
inline void write_leveldb(const std::string& path,
                          const std::vector<std::pair<std::string, std::string>>& records) {
  leveldb::Options options;
  options.create_if_missing = true;
  options.error_if_exists = true;
  leveldb::DB* raw = nullptr;
  ASSERT_TRUE(leveldb::DB::Open(options, path, &raw).ok()) << path;
  std::unique_ptr<leveldb::DB> db(raw);
  leveldb::WriteBatch batch;
  for (const auto& [key, value] : records) batch.Put(key, value);
  ASSERT_TRUE(db->Write(leveldb::WriteOptions(), &batch).ok());
}

// "%08d" of i: the keys of Caffe's converters.
inline std::string caffe_key(int i) {
  char key[16];
  std::snprintf(key, sizeof key, "%08d", i);
  return key;
}

}  // namespace lamina::testing
