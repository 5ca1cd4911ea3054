#include "lamina/training_progress.hpp"

#include <glog/logging.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/solver.hpp"

namespace lamina {

ProgressMode parse_progress_mode(const std::string& text, const std::string& flag) {
  if (text == "auto") return ProgressMode::kAuto;
  if (text == "bar") return ProgressMode::kBar;
  if (text == "log") return ProgressMode::kLog;
  if (text == "none") return ProgressMode::kNone;
  fail(flag, " must be auto, bar, log or none; got '", text, "'");
}

ProgressMode resolve_progress_mode(ProgressMode mode, FILE* stream) {
  if (mode != ProgressMode::kAuto) return mode;
  return isatty(fileno(stream)) ? ProgressMode::kBar : ProgressMode::kLog;
}

namespace {

std::string printf_string(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// "2345 samples/s", "123k samples/s".
std::string format_rate(double samples_per_s) {
  if (samples_per_s < 1e5) return printf_string("%.0f samples/s", samples_per_s);
  return printf_string("%.0fk samples/s", samples_per_s / 1e3);
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const int64_t s = int64_t(seconds + 0.5);
  char text[32];
  if (s < 60) {
    std::snprintf(text, sizeof text, "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(text, sizeof text, "%lldd %02lld:%02lld", static_cast<long long>(s / 86400),
                  static_cast<long long>(s / 3600 % 24), static_cast<long long>(s / 60 % 60));
  }
  return text;
}

std::string format_progress(const ProgressStatus& s, int width) {
  // Each field with the rank at which it goes when the line is too wide (0: stays).
  std::vector<std::pair<int, std::string>> fields;
  const bool known_end = s.max_iter > 0;
  const double done = known_end ? std::min(1.0, double(s.iteration) / double(s.max_iter)) : 0;
  std::string iteration = "iter " + std::to_string(s.iteration);
  if (known_end)
    iteration += "/" + std::to_string(s.max_iter) + " " + printf_string("%.0f%%", 100 * done);
  fields.push_back({0, iteration});
  if (s.epoch >= 0) fields.push_back({4, printf_string("epoch %.2f", s.epoch)});
  if (std::isfinite(s.loss)) fields.push_back({6, printf_string("loss %.4g", s.loss)});
  if (s.learning_rate >= 0) fields.push_back({3, printf_string("lr %.3g", s.learning_rate)});
  if (s.samples_per_s >= 0) fields.push_back({5, format_rate(s.samples_per_s)});
  fields.push_back({2, format_duration(s.elapsed_s) + " elapsed"});
  if (known_end)
    fields.push_back({0, "ETA " + (s.iteration >= s.max_iter ? std::string("0s")
                                                               : format_duration(s.eta_s))});
  constexpr int kBarCells = 20;
  std::string bar;
  if (width > 0 && known_end) {
    const int cells = int(done * kBarCells);
    bar = "[" + std::string(size_t(cells), '=') + (cells < kBarCells ? ">" : "") +
          std::string(size_t(std::max(0, kBarCells - cells - 1)), ' ') + "] ";
  }
  auto join = [&] {
    std::string line = bar;
    for (size_t i = 0; i < fields.size(); ++i) line += (i ? " | " : "") + fields[i].second;
    return line;
  };
  std::string line = join();
  if (width <= 0) return line;
  for (int rank = 1; int(line.size()) > width && rank <= 6; ++rank) {
    if (rank == 1) bar.clear();
    for (size_t i = 0; i < fields.size(); ++i)
      if (fields[i].first == rank) fields.erase(fields.begin() + long(i--));
    line = join();
  }
  if (int(line.size()) > width) line.resize(size_t(width));
  return line;
}

void RateMeter::add(double time_s, int64_t iteration) {
  samples_.push_back({time_s, iteration});
  while (samples_.size() > 2 && time_s - samples_[1].first >= window_s_) samples_.pop_front();
}

double RateMeter::rate() const {
  if (samples_.size() < 2) return -1;
  const double seconds = samples_.back().first - samples_.front().first;
  const int64_t iterations = samples_.back().second - samples_.front().second;
  return seconds > 0 && iterations > 0 ? double(iterations) / seconds : -1;
}

// Bar mode's glog lines: printed above the bar by the display, glog's own writing to stderr
// turned off meanwhile (log files stay off too: an empty destination per severity).
class ProgressDisplay::GlogRoute : public google::LogSink {
 public:
  explicit GlogRoute(ProgressDisplay& display)
      : display_(display),
        logtostderr_(FLAGS_logtostderr),
        alsologtostderr_(FLAGS_alsologtostderr),
        stderrthreshold_(FLAGS_stderrthreshold) {
    for (int severity = 0; severity < google::NUM_SEVERITIES; ++severity)
      google::SetLogDestination(severity, "");
    FLAGS_logtostderr = false;
    FLAGS_alsologtostderr = false;
    FLAGS_stderrthreshold = google::NUM_SEVERITIES;
    google::AddLogSink(this);
  }
  ~GlogRoute() override {
    google::RemoveLogSink(this);
    FLAGS_logtostderr = logtostderr_;
    FLAGS_alsologtostderr = alsologtostderr_;
    FLAGS_stderrthreshold = stderrthreshold_;
  }
  void send(google::LogSeverity severity, const char* full_filename, const char* base_filename,
            int line, const google::LogMessageTime& time, const char* message,
            size_t message_len) override {
    (void)full_filename;
    // The solver's display line ("Iteration 100, loss = 0.3, lr = 0.01"): the bar shows its
    // values.
    const std::string text(message, message_len);
    if (severity == google::GLOG_INFO && std::strcmp(base_filename, "solver.cpp") == 0 &&
        text.rfind("Iteration ", 0) == 0 && text.find(", loss = ") != std::string::npos)
      return;
    display_.print(ToString(severity, base_filename, line, time, message, message_len),
                   stderr);
  }

 private:
  ProgressDisplay& display_;
  bool logtostderr_, alsologtostderr_;
  int stderrthreshold_;
};

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int terminal_width(FILE* stream) {
  winsize size{};
  if (ioctl(fileno(stream), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

}  // namespace

ProgressDisplay::ProgressDisplay(const Solver& solver, ProgressOptions o)
    : mode_(resolve_progress_mode(o.mode, o.stream)),
      stream_(o.stream),
      max_iter_(o.max_iter >= 0 ? o.max_iter : solver.param().max_iter()),
      iterations_per_epoch_(o.iterations_per_epoch),
      samples_per_iteration_(o.samples_per_iteration),
      redraw_seconds_(o.redraw_seconds),
      clock_(o.clock ? o.clock : steady_seconds),
      width_(o.width ? o.width : [stream = o.stream] { return terminal_width(stream); }),
      learning_rate_(solver.learning_rate()),
      start_s_(clock_()),
      next_draw_s_(start_s_),
      last_iteration_(solver.iter()) {
  rate_.add(start_s_, last_iteration_);
  if (mode_ == ProgressMode::kBar && o.route_glog && FLAGS_logtostderr)
    glog_ = std::make_unique<GlogRoute>(*this);
}

ProgressDisplay::~ProgressDisplay() { finish(); }

ProgressStatus ProgressDisplay::status(int64_t iteration) {
  ProgressStatus s;
  s.iteration = iteration;
  s.max_iter = max_iter_;
  if (iterations_per_epoch_ > 0) s.epoch = double(iteration) / iterations_per_epoch_;
  s.loss = loss_;
  s.learning_rate = learning_rate_;
  const double rate = rate_.rate();
  if (rate > 0 && samples_per_iteration_ > 0) s.samples_per_s = rate * samples_per_iteration_;
  s.elapsed_s = now() - start_s_;
  if (rate > 0) s.eta_s = double(std::max<int64_t>(0, max_iter_ - iteration)) / rate;
  return s;
}

void ProgressDisplay::on_iteration(const Solver& solver) {
  last_iteration_ = solver.iter();
  if (mode_ == ProgressMode::kNone) return;
  const double t = now();
  if (t < next_draw_s_) return;
  next_draw_s_ = t + redraw_seconds_;
  rate_.add(t, last_iteration_);
  learning_rate_ = solver.learning_rate();
  if (mode_ == ProgressMode::kBar) redraw(last_iteration_);
}

void ProgressDisplay::on_display(const Solver& solver, const LossRecord& record,
                                 float learning_rate) {
  loss_ = record.loss;
  learning_rate_ = learning_rate;
  if (mode_ == ProgressMode::kLog) log_line(solver.iter());
}

void ProgressDisplay::set_loss(double loss) {
  loss_ = loss;
  if (mode_ == ProgressMode::kLog) log_line(last_iteration_);
}

void ProgressDisplay::log_line(int64_t iteration) {
  const std::string line = format_progress(status(iteration), 0);
  std::lock_guard<std::mutex> lock(mutex_);
  std::fprintf(stream_, "%s\n", line.c_str());
  std::fflush(stream_);
}

void ProgressDisplay::redraw(int64_t iteration) {
  const std::string line = format_progress(status(iteration), width_() - 1);
  std::lock_guard<std::mutex> lock(mutex_);
  line_ = line;
  std::fprintf(stream_, "\r%s\033[K", line_.c_str());
  std::fflush(stream_);
}

void ProgressDisplay::print(const std::string& line, FILE* out) {
  if (!out) out = stream_;
  std::lock_guard<std::mutex> lock(mutex_);
  const bool above = mode_ == ProgressMode::kBar && !line_.empty() && !finished_;
  if (above) {
    std::fputs("\r\033[K", stream_);
    std::fflush(stream_);
  }
  std::fprintf(out, "%s\n", line.c_str());
  std::fflush(out);
  if (above) {
    std::fputs(line_.c_str(), stream_);
    std::fflush(stream_);
  }
}

void ProgressDisplay::finish() {
  if (finished_) return;
  glog_.reset();  // glog writes to stderr itself again
  if (mode_ == ProgressMode::kBar) {
    redraw(last_iteration_);
    std::lock_guard<std::mutex> lock(mutex_);
    std::fputc('\n', stream_);
    std::fflush(stream_);
  }
  finished_ = true;
}

}  // namespace lamina
