// Writing a new database of Datums (datum_writer.hpp).
#include "datum_writer.hpp"

#include <glog/logging.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "db_backends.hpp"
#include "lamina/common.hpp"
#include "lamina/data_tools.hpp"
#include "lamina/file_access.hpp"

namespace lamina {
namespace {

void write_records(const std::string& path, DbKind kind, int64_t n,
                   const std::function<std::string(int64_t, Datum&)>& fill) {
  std::unique_ptr<DbWriter> db = create_db(path, kind);
  Datum datum;
  std::string value;
  for (int64_t i = 0; i < n; ++i) {
    char key[24];
    std::snprintf(key, sizeof key, "%08lld", static_cast<long long>(i));
    const std::string suffix = fill(i, datum);
    datum.SerializeToString(&value);
    db->put(key + suffix, value);
    if ((i + 1) % kRecordsPerCommit == 0) {
      db->commit();
      LOG(INFO) << "Processed " << i + 1 << " files.";
    }
  }
  db->commit();
  if (n % kRecordsPerCommit != 0) LOG(INFO) << "Processed " << n << " files.";
}

}  // namespace

void write_datums(const std::string& db_path, DbKind kind, const std::string& what, int64_t n,
                  const std::function<std::string(int64_t, Datum&)>& fill) {
  LAMINA_REQUIRE(n < 100000000, what, " holds ", n, " records; Caffe's keys (%08d) number at "
                 "most 10^8");
  require_new_db(db_path, kind);
  const std::filesystem::path parent = std::filesystem::path(db_path).parent_path();
  LAMINA_REQUIRE(parent.empty() || std::filesystem::is_directory(parent),
                 db_name(db_path, kind), ": its directory ", quoted_path(parent.string()),
                 " does not exist");
  const std::string partial = db_path + ".partial-" + std::to_string(getpid());
  try {
    write_records(partial, kind, n, fill);
    std::error_code error;
    std::filesystem::rename(partial, db_path, error);
    LAMINA_REQUIRE(!error, db_name(db_path, kind), ": cannot rename ", quoted_path(partial),
                   " to it: ", error.message());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove_all(partial, ignored);
    throw;
  }
}

}  // namespace lamina
