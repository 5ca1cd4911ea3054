#include "lamina/metrics_log.hpp"

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lamina/common.hpp"
#include "lamina/solver.hpp"

namespace lamina {

double MetricsRecord::at(const std::string& name) const {
  const auto it = values.find(name);
  LAMINA_REQUIRE(it != values.end(), "the ", kind, " record has no ", name);
  return it->second;
}

namespace {

// The columns every CSV file starts with, in order.
const std::vector<std::string> kFixedColumns = {"kind", "iteration", "epoch", "wall_s", "loss",
                                                "lr", "samples_per_s", "net"};

bool is_csv(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  LAMINA_REQUIRE(ext == ".csv" || ext == ".jsonl", "metrics file '", path, "': name it *.csv "
                 "or *.jsonl (the extension chooses the format)");
  return ext == ".csv";
}

// A CSV field: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A number as the file writes it: the shortest text that reads back as the same value (as
// the same float for values that are floats: losses, rates, outputs); CSV's non-finite
// values as strtod reads them, JSON's as null.
std::string number_text(double v, bool json) {
  if (!std::isfinite(v)) return json ? "null" : std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
  char text[64];
  const float f = float(v);
  const std::to_chars_result end = double(f) == v ? std::to_chars(text, text + sizeof text, f)
                                                  : std::to_chars(text, text + sizeof text, v);
  return std::string(text, end.ptr);
}

// Seconds to the millisecond, rates to a tenth: what a person reads, without float noise.
double rounded(double v, double per_unit) { return std::round(v * per_unit) / per_unit; }

// Reads one flat JSON object of string, number and null values (what MetricsLog writes).
class JsonLine {
 public:
  JsonLine(const std::string& text, const std::string& where) : s_(text), where_(where) {}
  MetricsRecord parse() {
    MetricsRecord record;
    expect('{');
    skip_space();
    if (peek() == '}') return ++i_, record;
    for (;;) {
      const std::string key = string_value();
      expect(':');
      skip_space();
      if (peek() == '"') {
        const std::string value = string_value();
        LAMINA_REQUIRE(key == "kind", where_, ": \"", key, "\" holds a string; only kind does");
        record.kind = value;
      } else if (s_.compare(i_, 4, "null") == 0) {
        i_ += 4;
        record.values[key] = std::nan("");
      } else {
        const char* begin = s_.c_str() + i_;
        char* end = nullptr;
        const double v = std::strtod(begin, &end);
        LAMINA_REQUIRE(end != begin, where_, ": the value of \"", key, "\" is not a number");
        i_ += size_t(end - begin);
        record.values[key] = v;
      }
      skip_space();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect('}');
      return record;
    }
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    skip_space();
    LAMINA_REQUIRE(peek() == c, where_, ": expected '", std::string(1, c), "' at column ",
                   i_ + 1);
    ++i_;
  }
  std::string string_value() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) {
        ++i_;
        if (s_[i_] == 'u' && i_ + 4 < s_.size()) {
          out += char(std::strtol(s_.substr(i_ + 1, 4).c_str(), nullptr, 16));
          i_ += 4;
        } else {
          out += s_[i_] == 'n' ? '\n' : s_[i_] == 't' ? '\t' : s_[i_];
        }
      } else {
        out += s_[i_];
      }
      ++i_;
    }
    expect('"');
    return out;
  }

  const std::string& s_;
  std::string where_;
  size_t i_ = 0;
};

// The complete lines of a file (an incomplete last line is being written, or was cut by a
// crash) and the byte count they take.
std::vector<std::string> complete_lines(const std::string& path, size_t* bytes = nullptr) {
  std::ifstream in(path, std::ios::binary);
  LAMINA_REQUIRE(in, "metrics file '", path, "': cannot open: ", std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const size_t end = text.rfind('\n');
  const size_t complete = end == std::string::npos ? 0 : end + 1;
  if (bytes) *bytes = complete;
  std::vector<std::string> lines;
  std::istringstream rest(text.substr(0, complete));
  for (std::string line; std::getline(rest, line);) lines.push_back(line);
  return lines;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::vector<MetricsRecord> read_metrics(const std::string& path) {
  const bool csv = is_csv(path);
  const std::vector<std::string> lines = complete_lines(path);
  std::vector<MetricsRecord> records;
  std::vector<std::string> header;
  for (size_t n = 0; n < lines.size(); ++n) {
    const std::string where = "metrics file '" + path + "', line " + std::to_string(n + 1);
    if (lines[n].empty()) continue;
    MetricsRecord record;
    if (csv) {
      std::vector<std::string> fields = split_csv(lines[n]);
      if (header.empty()) {
        LAMINA_REQUIRE(fields.size() >= 2 && fields[0] == "kind" && fields[1] == "iteration",
                       where, ": not a metrics header (kind,iteration,...)");
        header = fields;
        continue;
      }
      LAMINA_REQUIRE(fields.size() == header.size(), where, ": ", fields.size(),
                     " fields; the header has ", header.size());
      record.kind = fields[0];
      for (size_t i = 1; i < fields.size(); ++i) {
        if (fields[i].empty()) continue;
        char* end = nullptr;
        const double v = std::strtod(fields[i].c_str(), &end);
        LAMINA_REQUIRE(*end == '\0', where, ": ", header[i], " '", fields[i],
                       "' is not a number");
        record.values[header[i]] = v;
      }
    } else {
      record = JsonLine(lines[n], where).parse();
    }
    LAMINA_REQUIRE(!record.kind.empty() && record.has("iteration"), where,
                   ": a record needs a kind and an iteration");
    if (record.kind == "resume") {
      const double from = record.at("iteration");
      records.erase(std::remove_if(records.begin(), records.end(),
                                   [&](const MetricsRecord& r) {
                                     return r.at("iteration") >= from;
                                   }),
                    records.end());
      continue;
    }
    records.push_back(std::move(record));
  }
  return records;
}

MetricsLog::MetricsLog(const std::string& path, Solver& solver, MetricsOptions options)
    : path_(path), csv_(is_csv(path)), options_(std::move(options)) {
  if (!options_.clock) options_.clock = steady_seconds;
  if (csv_) {
    columns_ = kFixedColumns;
    for (int k = 0; k < solver.num_test_nets(); ++k) {
      Net& net = *solver.test_net(k);
      for (const std::string& name : net.output_names()) {
        const int64_t count = net.blob(name).count();
        for (int64_t j = 0; j < count; ++j) {
          const std::string label = count == 1 ? name : name + "[" + std::to_string(j) + "]";
          if (std::find(columns_.begin(), columns_.end(), label) == columns_.end())
            columns_.push_back(label);
        }
      }
    }
  }
  std::error_code ec;
  const bool exists = std::filesystem::file_size(path, ec) > 0 && !ec;
  const bool resumed = solver.iter() > 0;
  if (exists) {
    LAMINA_REQUIRE(resumed, "metrics file '", path, "' already holds records and this run "
                   "starts at iteration 0; give another file, or remove it (a run resumed from "
                   "a snapshot appends to its file)");
    size_t complete = 0;
    const std::vector<std::string> lines = complete_lines(path, &complete);
    if (csv_ && !lines.empty()) {
      std::string header;
      for (const std::string& c : columns_) header += (header.empty() ? "" : ",") + csv_field(c);
      LAMINA_REQUIRE(lines[0] == header, "metrics file '", path, "' has the columns '",
                     lines[0], "', this run's are '", header, "'; give another file");
    }
    std::filesystem::resize_file(path, complete, ec);  // the incomplete line of a crash
    for (const MetricsRecord& r : read_metrics(path))
      if (r.at("iteration") < solver.iter() && r.has("wall_s"))
        wall_offset_s_ = std::max(wall_offset_s_, r.at("wall_s"));
  }
  file_ = std::fopen(path.c_str(), "a");
  LAMINA_REQUIRE(file_, "metrics file '", path, "': cannot open for writing: ",
                 std::strerror(errno));
  if (csv_ && (!exists || std::filesystem::file_size(path, ec) == 0)) {
    std::string header;
    for (const std::string& c : columns_) header += (header.empty() ? "" : ",") + csv_field(c);
    std::fprintf(file_, "%s\n", header.c_str());
  }
  start_s_ = last_s_ = options_.clock();
  last_iteration_ = solver.iter();
  try {
    if (exists) {
      MetricsRecord resume{"resume", {{"iteration", double(solver.iter())}}};
      resume.values["wall_s"] = wall_offset_s_;
      write(resume);
    }
    std::fflush(file_);
  } catch (...) {
    std::fclose(file_);  // the destructor does not run for a constructor that throws
    file_ = nullptr;
    throw;
  }
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

double MetricsLog::wall_s() const { return wall_offset_s_ + options_.clock() - start_s_; }

void MetricsLog::write(const MetricsRecord& record) {
  std::string line;
  if (csv_) {
    for (const std::string& column : columns_) {
      if (!line.empty()) line += ",";
      if (column == "kind") {
        line += csv_field(record.kind);
      } else if (const auto it = record.values.find(column); it != record.values.end()) {
        line += number_text(it->second, false);
      }
    }
  } else {
    line = "{\"kind\":" + json_string(record.kind);
    // The fixed keys first, in the CSV's order, then the test outputs.
    for (const std::string& key : kFixedColumns)
      if (const auto it = record.values.find(key); it != record.values.end())
        line += "," + json_string(key) + ":" + number_text(it->second, true);
    for (const auto& [key, value] : record.values)
      if (std::find(kFixedColumns.begin(), kFixedColumns.end(), key) == kFixedColumns.end())
        line += "," + json_string(key) + ":" + number_text(value, true);
    line += "}";
  }
  LAMINA_REQUIRE(std::fprintf(file_, "%s\n", line.c_str()) > 0 && std::fflush(file_) == 0,
                 "metrics file '", path_, "': cannot write: ", std::strerror(errno));
}

namespace {

// iteration, epoch and wall_s of a record at `iteration`.
MetricsRecord record_at(const std::string& kind, int64_t iteration, double iterations_per_epoch,
                        double wall_s) {
  MetricsRecord r{kind, {{"iteration", double(iteration)}, {"wall_s", rounded(wall_s, 1000)}}};
  if (iterations_per_epoch > 0)
    r.values["epoch"] = rounded(double(iteration) / iterations_per_epoch, 10000);
  return r;
}

}  // namespace

void MetricsLog::record_train(const Solver& solver, double loss, double learning_rate) {
  const double now = options_.clock();
  MetricsRecord r = record_at("train", solver.iter(), options_.iterations_per_epoch,
                              wall_offset_s_ + now - start_s_);
  r.values["loss"] = loss;
  r.values["lr"] = learning_rate;
  if (options_.samples_per_iteration > 0 && now > last_s_ && solver.iter() > last_iteration_)
    r.values["samples_per_s"] = rounded(
        double(solver.iter() - last_iteration_) * options_.samples_per_iteration / (now - last_s_),
        10);
  last_s_ = now;
  last_iteration_ = solver.iter();
  write(r);
}

void MetricsLog::on_display(const Solver& solver, const LossRecord& record,
                            float learning_rate) {
  record_train(solver, record.loss, learning_rate);
}

void MetricsLog::on_test(const Solver& solver, const TestResult& result) {
  MetricsRecord r =
      record_at("test", solver.iter(), options_.iterations_per_epoch, wall_s());
  r.values["net"] = result.net;
  for (const auto& [name, value] : result.outputs) r.values[name] = value;
  if (!r.has("loss") && result.has_loss) r.values["loss"] = result.loss;
  write(r);
}

}  // namespace lamina
