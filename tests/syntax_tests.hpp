// What the tests of Caffe's net and solver syntax share (test_net_state.cpp,
// test_solver_nets.cpp): the Native backend, the test data's paths, and LogLines, which
// collects glog's lines while it lives (debug_info, hints, test outputs).
#pragma once

#include <glog/logging.h>

#include <string>

#include "lamina/native_backend.hpp"
#include "test_util.hpp"

namespace lamina::testing {

inline NativeBackend& native() {
  static NativeBackend backend;
  return backend;
}

// A file of tests/data/.
inline std::string data_path(const std::string& name) {
  return source_dir() + "/tests/data/" + name;
}

class LogLines : public google::LogSink {
 public:
  LogLines() { google::AddLogSink(this); }
  ~LogLines() override { google::RemoveLogSink(this); }
  LogLines(const LogLines&) = delete;
  LogLines& operator=(const LogLines&) = delete;
  void send(google::LogSeverity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t length) override {
    text += std::string(message, length) + "\n";
  }
  std::string text;
};

}  // namespace lamina::testing
