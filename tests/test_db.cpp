// Caffe's databases (LMDB, LevelDB), raw Datums, the DataTransformer's transforms, and the
// data tools (convert_mnist, compute_image_mean): written and read back, against databases
// written independently (liblmdb and the Datum's field numbers), against hand-computed
// crops, mirrors and means, and every bad input an Error naming the file and record.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "datum_db.hpp"
#include "lamina/data_tools.hpp"
#include "lamina/data_transformer.hpp"
#include "lamina/database.hpp"
#include "lamina/datum.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::caffe_key;
using testing::datum_bytes;
using testing::error_of;

const DbKind kKinds[] = {DbKind::kLmdb, DbKind::kLevelDb};

std::vector<std::pair<std::string, std::string>> read_all(const std::string& path, DbKind kind) {
  std::vector<std::pair<std::string, std::string>> records;
  auto db = open_db(path, kind);
  for (auto c = db->cursor(); c->valid(); c->next())
    records.emplace_back(std::string(c->key()), std::string(c->value()));
  return records;
}

TEST(Database, BothBackendsReadWhatTheyWroteInKeyOrderAcrossCommits) {
  for (DbKind kind : kKinds) {
    SCOPED_TRACE(db_kind_name(kind));
    testing::TempDir dir;
    const std::string path = dir / "db";
    {
      auto db = create_db(path, kind);
      db->put("b", "2");
      db->put("c", std::string("\0x", 2));  // values are bytes, zeros included
      db->commit();
      db->put("a", "1");
      db->commit();
    }
    const auto records = read_all(path, kind);
    ASSERT_EQ(records.size(), 3u);
    EXPECT_EQ(records[0], std::make_pair(std::string("a"), std::string("1")));
    EXPECT_EQ(records[1], std::make_pair(std::string("b"), std::string("2")));
    EXPECT_EQ(records[2], std::make_pair(std::string("c"), std::string("\0x", 2)));
    auto db = open_db(path, kind);
    EXPECT_EQ(db->count(), 3);
    // Caffe's Data layer wraps around: after the last record, the first.
    auto cursor = db->cursor();
    std::string walked;
    for (int i = 0; i < 7; ++i, cursor->next_wrapping()) walked += cursor->key();
    EXPECT_EQ(walked, "abcabca");
    // Two cursors of one reader move independently.
    auto other = db->cursor();
    EXPECT_EQ(other->key(), "a");
  }
}

TEST(Database, ParseDbKindTakesCaffesNames) {
  EXPECT_EQ(parse_db_kind("lmdb"), DbKind::kLmdb);
  EXPECT_EQ(parse_db_kind("LEVELDB"), DbKind::kLevelDb);
  EXPECT_THAT(error_of([] { parse_db_kind("rocksdb"); }),
              AllOf(HasSubstr("'rocksdb'"), HasSubstr("lmdb or leveldb")));
}

TEST(Database, AnLmdbOfDatumsWrittenByLiblmdbFromTheFieldNumbersIsRead) {
  testing::TempDir dir;
  const std::string path = dir / "lmdb";
  const std::string pixels = {char(0), char(7), char(255), char(128), char(1), char(2)};
  testing::write_lmdb(path, {{caffe_key(1), datum_bytes(1, 2, 3, pixels, 9)},
                             {caffe_key(0), datum_bytes(2, 1, 2, "", 4, {0.5f, -1, 2, 3})}});
  const auto records = read_all(path, DbKind::kLmdb);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].first, "00000000");
  DatumBuffers buffers;
  DatumValues example =
      read_datum(records[0].second, "db", records[0].first, ImageMode::kAsIs, buffers);
  EXPECT_EQ(example.shape, (DatumShape{2, 1, 2}));
  EXPECT_EQ(buffers.datum.label(), 4);
  ASSERT_NE(example.floats, nullptr);
  EXPECT_THAT(std::vector<float>(example.floats, example.floats + 4),
              ::testing::ElementsAre(0.5f, -1, 2, 3));
  example = read_datum(records[1].second, "db", records[1].first, ImageMode::kAsIs, buffers);
  EXPECT_EQ(example.shape, (DatumShape{1, 2, 3}));
  EXPECT_EQ(buffers.datum.label(), 9);
  ASSERT_NE(example.bytes, nullptr);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(example.bytes), 6), pixels);
}

TEST(Database, MissingWrongKindCorruptAndExistingPathsAreErrorsNamingThePath) {
  testing::TempDir dir;
  for (DbKind kind : kKinds) {
    SCOPED_TRACE(db_kind_name(kind));
    EXPECT_THAT(error_of([&] { open_db(dir / "missing", kind); }),
                AllOf(HasSubstr(db_kind_name(kind)), HasSubstr("missing"),
                      HasSubstr("No such file")));
    const std::string file = dir.write("plain_file", "not a database");
    EXPECT_THAT(error_of([&] { open_db(file, kind); }),
                AllOf(HasSubstr("plain_file"), HasSubstr("is not a directory")));
    const std::string made = dir / (std::string("made_") + db_kind_name(kind));
    create_db(made, kind)->commit();
    EXPECT_THAT(error_of([&] { create_db(made, kind); }),
                AllOf(HasSubstr(made), HasSubstr("already exists")));
  }
  // Each backend refuses the other's database, naming the other.
  EXPECT_THAT(error_of([&] { open_db(dir / "made_LevelDB", DbKind::kLmdb); }),
              AllOf(HasSubstr("made_LevelDB"), HasSubstr("is the backend LEVELDB?")));
  EXPECT_THAT(error_of([&] { open_db(dir / "made_LMDB", DbKind::kLevelDb); }),
              AllOf(HasSubstr("made_LMDB"), HasSubstr("is the backend LMDB?")));
  // An LMDB whose data file is garbage.
  const std::string corrupt = dir / "corrupt";
  std::filesystem::create_directories(corrupt);
  testing::write_bytes(corrupt + "/data.mdb", std::string(16384, '\x5a'));
  EXPECT_THAT(error_of([&] { open_db(corrupt, DbKind::kLmdb)->cursor(); }),
              AllOf(HasSubstr("corrupt"), HasSubstr("LMDB")));
}

// Dimensions whose product passes int64 (2^31 - 1 each), or wraps to the 0 values held
// (2^21 x 2^21 x 2^22 = 2^64), are refused before the product is taken.
TEST(Datum, DimensionsBeyondWhatADatumHoldsAreErrors) {
  DatumBuffers buffers;
  for (const auto& [c, h, w] : {std::tuple{INT_MAX, INT_MAX, INT_MAX},
                                std::tuple{1 << 21, 1 << 21, 1 << 22}, std::tuple{2, 1 << 30, 1}})
    EXPECT_THAT(error_of([&, c = c, h = h, w = w] {
                  read_datum(datum_bytes(c, h, w, "", 0), "db", "k", ImageMode::kAsIs, buffers);
                }),
                AllOf(HasSubstr("record 'k'"), HasSubstr("more than a Datum holds")));
}

TEST(Datum, BadRecordsAreErrorsNamingTheDatabaseAndTheKey) {
  DatumBuffers buffers;
  const auto read = [&](std::string_view bytes, const std::string& source,
                        std::string_view key) {
    read_datum(bytes, source, key, ImageMode::kAsIs, buffers);
  };
  const std::string source = "LMDB database 'train_lmdb'";
  EXPECT_THAT(error_of([&] { read(datum_bytes(3, 2, 2, "12345", 0), source, "00000042"); }),
              AllOf(HasSubstr("train_lmdb"), HasSubstr("record '00000042'"),
                    HasSubstr("holds 5 bytes"), HasSubstr("3 x 2 x 2 = 12")));
  EXPECT_THAT(error_of([&] { read(datum_bytes(1, 1, 2, "", 0, {1}), source, "k7"); }),
              AllOf(HasSubstr("record 'k7'"), HasSubstr("holds 1 float_data values")));
  EXPECT_THAT(error_of([&] { read("\xff\xff\xff", source, "k8"); }),
              AllOf(HasSubstr("record 'k8'"), HasSubstr("is not a Datum")));
  EXPECT_THAT(error_of([&] { read(datum_bytes(0, 2, 2, "", 0), source, "k9"); }),
              AllOf(HasSubstr("record 'k9'"), HasSubstr("must be positive")));
  std::string encoded = datum_bytes(3, 4, 4, "\x89PNG", 0);
  encoded += char(7 << 3), encoded += char(1);  // encoded: true
  EXPECT_THAT(error_of([&] { read(encoded, source, "k10"); }),
              AllOf(HasSubstr("record 'k10' (an encoded Datum)"),
                    HasSubstr("neither a JPEG nor a PNG")));
}

// ---- transforms ----

// The bytes of a (C, H, W) example whose value at (c, h, w) is 100 c + 10 h + w (below 256
// for the shapes used).
std::vector<uint8_t> example(const DatumShape& s) {
  std::vector<uint8_t> pixels;
  for (int64_t c = 0; c < s.channels; ++c)
    for (int64_t h = 0; h < s.height; ++h)
      for (int64_t w = 0; w < s.width; ++w) pixels.push_back(uint8_t(100 * c + 10 * h + w));
  return pixels;
}

float value_at(int64_t c, int64_t h, int64_t w) { return float(100 * c + 10 * h + w); }

// Applies a transformer to example(in) with the draw given.
std::vector<float> transformed(DataTransformer& t, const DatumShape& in, const TransformDraw& d) {
  const DatumShape out = t.output_shape(in, "");
  std::vector<float> values(size_t(out.count()));
  const std::vector<uint8_t> pixels = example(in);
  t.transform({in, pixels.data(), nullptr}, d, values.data());
  return values;
}

TEST(DataTransformer, TestPhaseCropsTheCentreAndScales) {
  TransformationParameter p;
  p.set_crop_size(3);
  p.set_scale(0.5f);
  DataTransformer t(p, TEST, "layer 'd' (Data): ");
  const DatumShape in{2, 6, 7};
  EXPECT_EQ(t.output_shape(in, ""), (DatumShape{2, 3, 3}));
  const TransformDraw d = t.draw(1, 5, in);
  EXPECT_EQ(d.h_off, 1);  // (6 - 3) / 2
  EXPECT_EQ(d.w_off, 2);  // (7 - 3) / 2
  EXPECT_FALSE(d.mirror);
  const std::vector<float> out = transformed(t, in, d);
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t w = 0; w < 3; ++w)
        EXPECT_EQ(out[(c * 3 + h) * 3 + w], 0.5f * value_at(c, 1 + h, 2 + w));
}

TEST(DataTransformer, TrainPhaseDrawsOffsetsAndMirrorsReproduciblyFromTheSeed) {
  TransformationParameter p;
  p.set_crop_size(4);
  p.set_mirror(true);
  DataTransformer t(p, TRAIN, "");
  const DatumShape in{1, 6, 8};
  std::set<int64_t> rows, cols;
  int mirrored = 0;
  for (uint64_t e = 0; e < 400; ++e) {
    const TransformDraw d = t.draw(7, e, in);
    const TransformDraw again = t.draw(7, e, in);
    EXPECT_EQ(d.h_off, again.h_off);
    EXPECT_EQ(d.w_off, again.w_off);
    EXPECT_EQ(d.mirror, again.mirror);
    rows.insert(d.h_off), cols.insert(d.w_off), mirrored += d.mirror;
  }
  EXPECT_EQ(rows, (std::set<int64_t>{0, 1, 2}));         // 0 .. 6 - 4
  EXPECT_EQ(cols, (std::set<int64_t>{0, 1, 2, 3, 4}));   // 0 .. 8 - 4
  EXPECT_GT(mirrored, 150);
  EXPECT_LT(mirrored, 250);
  int differ = 0;  // another seed, other draws
  for (uint64_t e = 0; e < 50; ++e) {
    const TransformDraw a = t.draw(7, e, in), b = t.draw(8, e, in);
    differ += a.h_off != b.h_off || a.w_off != b.w_off || a.mirror != b.mirror;
  }
  EXPECT_GT(differ, 25);
  // The crop at a drawn offset, mirrored: out[h][w] = in[h_off + h][w_off + 3 - w].
  const TransformDraw d{true, 2, 3};
  const std::vector<float> out = transformed(t, in, d);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t w = 0; w < 4; ++w) EXPECT_EQ(out[h * 4 + w], value_at(0, 2 + h, 3 + 3 - w));
}

TEST(DataTransformer, MirrorWithoutCropReversesRowsInBothPhases) {
  TransformationParameter p;
  p.set_mirror(true);
  for (Phase phase : {TRAIN, TEST}) {
    DataTransformer t(p, phase, "");
    const DatumShape in{2, 2, 3};
    int mirrored = 0;
    for (uint64_t e = 0; e < 100; ++e) mirrored += t.draw(3, e, in).mirror;
    EXPECT_GT(mirrored, 25) << "Caffe mirrors in TEST too";
    const std::vector<float> out = transformed(t, in, {true, 0, 0});
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t w = 0; w < 3; ++w)
          EXPECT_EQ(out[(c * 2 + h) * 3 + w], value_at(c, h, 2 - w));
  }
}

// Writes a mean BlobProto (legacy num/channels/height/width) whose value i is 0.25 i.
std::string write_mean(const testing::TempDir& dir, const DatumShape& s) {
  BlobProto blob;
  blob.set_num(1);
  blob.set_channels(int(s.channels));
  blob.set_height(int(s.height));
  blob.set_width(int(s.width));
  for (int64_t i = 0; i < s.count(); ++i) blob.add_data(0.25f * float(i));
  const std::string path = dir / "mean.binaryproto";
  write_blob_proto(blob, path);
  return path;
}

TEST(DataTransformer, MeanFileIsSubtractedAtTheCropsPositionThenScaled) {
  testing::TempDir dir;
  const DatumShape in{2, 5, 5};
  TransformationParameter p;
  p.set_mean_file(write_mean(dir, in));
  p.set_crop_size(2);
  p.set_mirror(true);
  p.set_scale(2);
  DataTransformer t(p, TRAIN, "");
  const std::vector<float> out = transformed(t, in, {true, 3, 1});
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t w = 0; w < 2; ++w) {
        const int64_t src_h = 3 + h, src_w = 1 + 1 - w;
        const float mean = 0.25f * float((c * 5 + src_h) * 5 + src_w);
        EXPECT_EQ(out[(c * 2 + h) * 2 + w], (value_at(c, src_h, src_w) - mean) * 2);
      }
}

TEST(DataTransformer, MeanValuesOnePerChannelOrOneForAll) {
  const DatumShape in{3, 2, 2};
  for (int values : {1, 3}) {
    TransformationParameter p;
    for (int c = 0; c < values; ++c) p.add_mean_value(10.5f + float(c));
    p.set_scale(0.25f);
    DataTransformer t(p, TEST, "");
    const std::vector<float> out = transformed(t, in, {});
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < 4; ++i) {
        const float mean = 10.5f + float(values == 1 ? 0 : c);
        EXPECT_EQ(out[c * 4 + i], (value_at(c, i / 2, i % 2) - mean) * 0.25f);
      }
  }
}

TEST(DataTransformer, FloatDataIsTransformedLikeBytes) {
  TransformationParameter p;
  p.add_mean_value(1);
  p.set_scale(3);
  DataTransformer t(p, TEST, "");
  const DatumShape in{1, 1, 3};
  EXPECT_EQ(t.output_shape(in, ""), in);
  const float values[] = {0.5f, -2, 4};
  std::vector<float> out(3);
  t.transform({in, nullptr, values}, {}, out.data());
  EXPECT_THAT(out, ::testing::ElementsAre(-1.5f, -9, 9));
}

TEST(DataTransformer, BadSettingsAreErrorsSayingWhatToFix) {
  testing::TempDir dir;
  const std::string where = "layer 'data' (Data): ";
  TransformationParameter both;
  both.set_mean_file(write_mean(dir, {1, 2, 2}));
  both.add_mean_value(3);
  EXPECT_THAT(error_of([&] { DataTransformer(both, TRAIN, where); }),
              AllOf(HasSubstr(where), HasSubstr("both mean_file and mean_value")));
  TransformationParameter crop;
  crop.set_crop_size(5);
  EXPECT_THAT(error_of([&] { DataTransformer(crop, TEST, "").output_shape({1, 4, 9}, where); }),
              AllOf(HasSubstr(where), HasSubstr("crop_size 5 is larger than the image, 4 x 9"),
                    HasSubstr("at most 4")));
  TransformationParameter mean;
  mean.set_mean_file(write_mean(dir, {1, 2, 2}));
  EXPECT_THAT(error_of([&] { DataTransformer(mean, TEST, "").output_shape({3, 2, 2}, where); }),
              AllOf(HasSubstr(where), HasSubstr("mean.binaryproto"), HasSubstr("(1, 2, 2)"),
                    HasSubstr("(3, 2, 2)")));
  TransformationParameter values;
  values.add_mean_value(1), values.add_mean_value(2);
  EXPECT_THAT(error_of([&] { DataTransformer(values, TEST, "").output_shape({3, 2, 2}, where); }),
              AllOf(HasSubstr(where), HasSubstr("2 mean_value entries for 3 channels")));
  TransformationParameter missing;
  missing.set_mean_file(dir / "no_mean.binaryproto");
  EXPECT_THAT(error_of([&] { DataTransformer(missing, TEST, where); }),
              AllOf(HasSubstr("no_mean.binaryproto"), HasSubstr("compute_image_mean")));
  TransformationParameter garbage;
  garbage.set_mean_file(dir.write("garbage.binaryproto", "\xff\xff\xff\xff"));
  EXPECT_THAT(error_of([&] { DataTransformer(garbage, TEST, where); }),
              AllOf(HasSubstr("garbage.binaryproto"), HasSubstr("is not a BlobProto")));
}

// ---- the tools ----

std::string be32(uint32_t v) {
  return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}

// An IDX file (magic, dims, bytes), gzip-compressed when gz.
void write_idx(const std::string& path, uint32_t magic, const std::vector<uint32_t>& dims,
               const std::string& values, bool gz) {
  std::string bytes = be32(magic);
  for (uint32_t d : dims) bytes += be32(d);
  bytes += values;
  if (!gz) return testing::write_bytes(path, bytes);
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  gzclose(f);
}

TEST(DataTools, ConvertMnistWritesCaffesKeysAndRawDatums) {
  constexpr int kImages = 1203, kRows = 3, kCols = 2;  // more than one commit of 1000
  std::string pixels, labels;
  for (int i = 0; i < kImages * kRows * kCols; ++i) pixels += char(i * 7 % 256);
  for (int i = 0; i < kImages; ++i) labels += char(i % 10);
  for (DbKind kind : kKinds) {
    SCOPED_TRACE(db_kind_name(kind));
    testing::TempDir dir;
    const bool gz = kind == DbKind::kLevelDb;  // .gz accepted
    write_idx(dir / "images", 0x803, {kImages, kRows, kCols}, pixels, gz);
    write_idx(dir / "labels", 0x801, {kImages}, labels, gz);
    EXPECT_EQ(convert_mnist(dir / "images", dir / "labels", dir / "db", kind), kImages);
    const auto records = read_all(dir / "db", kind);
    ASSERT_EQ(int(records.size()), kImages);
    for (int i = 0; i < kImages; ++i) {
      EXPECT_EQ(records[i].first, caffe_key(i));
      Datum datum;
      ASSERT_TRUE(datum.ParseFromString(records[i].second));
      EXPECT_EQ(datum.channels(), 1);
      EXPECT_EQ(datum.height(), kRows);
      EXPECT_EQ(datum.width(), kCols);
      EXPECT_EQ(datum.label(), i % 10);
      EXPECT_FALSE(datum.has_encoded());
      EXPECT_EQ(datum.float_data_size(), 0);
      ASSERT_EQ(datum.data(), pixels.substr(size_t(i * kRows * kCols), kRows * kCols));
    }
  }
}

TEST(DataTools, ConvertMnistRefusesMismatchedFilesAndAnExistingDatabase) {
  testing::TempDir dir;
  write_idx(dir / "images", 0x803, {3, 2, 2}, std::string(12, 'x'), false);
  write_idx(dir / "labels", 0x801, {2}, std::string(2, '\1'), false);
  EXPECT_THAT(error_of([&] { convert_mnist(dir / "images", dir / "labels", dir / "db",
                                           DbKind::kLmdb); }),
              AllOf(HasSubstr("3 images"), HasSubstr("2 labels")));
  EXPECT_THAT(error_of([&] { convert_mnist(dir / "labels", dir / "labels", dir / "db",
                                           DbKind::kLmdb); }),
              HasSubstr("an image file has 3"));
  std::filesystem::create_directories(dir / "exists");
  write_idx(dir / "labels3", 0x801, {3}, std::string(3, '\1'), false);
  EXPECT_THAT(error_of([&] { convert_mnist(dir / "images", dir / "labels3", dir / "exists",
                                           DbKind::kLmdb); }),
              HasSubstr("already exists"));
}

TEST(DataTools, ComputeImageMeanIsTheMeanOfEveryRecord) {
  const DatumShape s{2, 3, 4};
  std::mt19937 rng(5);
  std::vector<double> sum(size_t(s.count()), 0.0);
  std::vector<std::pair<std::string, std::string>> records;
  constexpr int kRecords = 37;
  for (int i = 0; i < kRecords; ++i) {
    std::string pixels;
    for (int64_t j = 0; j < s.count(); ++j) {
      const uint8_t v = uint8_t(rng());
      pixels += char(v);
      sum[size_t(j)] += v;
    }
    records.emplace_back(caffe_key(i), datum_bytes(2, 3, 4, pixels, i));
  }
  testing::TempDir dir;
  testing::write_lmdb(dir / "db", records);
  const BlobProto mean = compute_image_mean(dir / "db", DbKind::kLmdb);
  EXPECT_EQ(mean.num(), 1);
  EXPECT_EQ(mean.channels(), 2);
  EXPECT_EQ(mean.height(), 3);
  EXPECT_EQ(mean.width(), 4);
  ASSERT_EQ(mean.data_size(), s.count());
  for (int64_t j = 0; j < s.count(); ++j)
    EXPECT_FLOAT_EQ(mean.data(int(j)), float(sum[size_t(j)] / kRecords)) << j;
  // Written and read back as a transformer's mean file.
  write_blob_proto(mean, dir / "mean.binaryproto");
  DatumShape shape;
  const std::vector<float> values = read_mean_blob(dir / "mean.binaryproto", "mean", shape);
  EXPECT_EQ(shape, s);
  EXPECT_EQ(values[5], mean.data(5));
}

TEST(DataTools, ComputeImageMeanRefusesMixedShapesAndAnEmptyDatabase) {
  testing::TempDir dir;
  testing::write_lmdb(dir / "db", {{caffe_key(0), datum_bytes(1, 1, 2, "ab", 0)},
                                   {caffe_key(1), datum_bytes(1, 2, 1, "ab", 0)}});
  EXPECT_THAT(error_of([&] { compute_image_mean(dir / "db", DbKind::kLmdb); }),
              AllOf(HasSubstr("/db', record '00000001'"),
                    HasSubstr("one shape")));
  testing::write_lmdb(dir / "empty", {});
  EXPECT_THAT(error_of([&] { compute_image_mean(dir / "empty", DbKind::kLmdb); }),
              HasSubstr("holds no records"));
}

}  // namespace
}  // namespace lamina
