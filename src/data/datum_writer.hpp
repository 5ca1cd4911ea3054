// How Caffe's converters write a database of Datums (convert_mnist, convert_imageset).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "lamina/database.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

// Writes n records into a new database at db_path, as Caffe's converters do: record i under
// the key "%08d" of i followed by the suffix fill(i, datum) returns, after fill set the
// Datum; committed every kRecordsPerCommit records (with a log line "Processed k files.").
// The database is written under a name of this process beside db_path and renamed when
// whole, so an error (from fill too) leaves nothing behind. what names the input in the
// message about more than 10^8 records.
void write_datums(const std::string& db_path, DbKind kind, const std::string& what, int64_t n,
                  const std::function<std::string(int64_t i, Datum& datum)>& fill);

}  // namespace lamina
