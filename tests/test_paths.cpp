// Hostile and careless paths: every file a user names (net file, solver file, IDX data
// file, weights file, solver state) given as a directory, a FIFO, /dev/zero, a symlink loop,
// a name or path too long, a missing or unreadable file (as user nobody when the tests run
// as root), or an oversized text file, is one lamina::Error naming the path, what the file
// is used as, and the problem; never a hang (each read runs on a thread with a deadline), a
// crash or unbounded memory. Also: the prototxt nesting depth limit, size checks before a
// file is read whole (IDX headers: test_data.cpp), and snapshot writes to bad prefixes and
// under a file-size limit (EFBIG).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "lamina/file_access.hpp"
#include "lamina/host_memory.hpp"
#include "lamina/idx.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

// The message of the lamina::Error that fn throws; "<no error>" or "<not a lamina::Error:
// ...>" otherwise, which no expected message contains. Usable in a child process, where
// gtest's failures would be lost.
std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a lamina::Error: ") + e.what() + ">";
  }
  return "<no error>";
}

// message_of(fn), or a failure when fn has not returned after 20 s (a read blocked on a
// FIFO: the thread is left behind, and the test goes on and fails).
std::string error_within_deadline(std::function<void()> fn) {
  auto result = std::make_shared<std::promise<std::string>>();
  std::future<std::string> message = result->get_future();
  std::thread([fn = std::move(fn), result] { result->set_value(message_of(fn)); }).detach();
  if (message.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "the read did not return within 20 s: it blocks";
    return "<blocked>";
  }
  return message.get();
}

// Runs fn in a child process (for what changes the whole process: its user, its limits) and
// returns the string fn returns there, or what went wrong.
std::string in_child(const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return "<no pipe>";
  const pid_t child = fork();
  if (child < 0) return "<no fork>";
  if (child == 0) {
    ::close(fds[0]);
    const std::string result = fn();
    (void)!::write(fds[1], result.data(), result.size());
    _exit(0);
  }
  ::close(fds[1]);
  std::string result;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof(buffer))) > 0;) result.append(buffer, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status)) return "<the child died: status " + std::to_string(status) + ">";
  return result;
}

// ---------------------------------------------------------------------------------------
// The hostile paths, made in a temporary directory.

struct Hostile {
  const char* kind;
  std::string path;
  std::string problem;     // in the message
  std::string shown;       // the path as the message shows it
  bool text_only = false;  // the size bound of text files
};

std::vector<Hostile> hostile_paths(const TempDir& dir) {
  std::vector<Hostile> cases;
  auto add = [&](const char* kind, const std::string& path, const std::string& problem) {
    cases.push_back({kind, path, problem, "'" + path + "'"});
  };
  fs::create_directories(dir / "a_directory");
  add("directory", dir / "a_directory", "is a directory");
  if (::mkfifo((dir / "fifo").c_str(), 0644) == 0) add("FIFO", dir / "fifo", "named pipe (FIFO)");
  if (fs::exists("/dev/zero")) add("/dev/zero", "/dev/zero", "character device");
  if (fs::exists("/dev/null")) add("/dev/null", "/dev/null", "character device");
  fs::create_symlink("loop", dir / "loop");  // loop -> loop
  add("symlink loop", dir / "loop", "Too many levels of symbolic links");
  fs::create_symlink("b", dir / "a");  // a -> b -> a
  fs::create_symlink("a", dir / "b");
  add("two-link loop", dir / "a/file", "Too many levels of symbolic links");
  add("name too long", dir / std::string(300, 'n'), "File name too long");
  add("missing", dir / "missing", "No such file or directory");
  write_bytes(dir / "plain", "x");
  add("file as directory", dir / "plain/file", "Not a directory");
  // A path of more than PATH_MAX bytes, shown by its start and end.
  std::string deep = dir / "";
  while (deep.size() < 5000) deep += "dddddddddd/";
  deep += "file";
  cases.push_back(
      {"path too long", deep, "File name too long", "(" + std::to_string(deep.size()) + " bytes)"});
  // 64 MiB + 1 byte, sparse: over the bound of text files.
  {
    const int fd = ::open((dir / "huge.prototxt").c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd >= 0 && ::ftruncate(fd, kMaxTextFileBytes + 1) == 0)
      cases.push_back({"oversized", dir / "huge.prototxt", "more than the 67108864 bytes",
                       "'" + (dir / "huge.prototxt") + "'", true});
    if (fd >= 0) ::close(fd);
  }
  return cases;  // unreadable files: AnUnreadableFileSaysPermissionDenied
}

struct Reader {
  const char* what;  // as messages name it
  bool text;         // bounded by kMaxTextFileBytes
  std::function<void(const std::string&)> read;
};

// A net with one parameter, for the readers that load weights and solver states into one.
NetParameter small_net() {
  return parse_net_parameter(
      "layer { name: \"in\" type: \"Input\" top: \"x\" top: \"t\" "
      "        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } }"
      "layer { name: \"fc\" type: \"Linear\" bottom: \"x\" top: \"y\" "
      "        inner_product_param { num_output: 2 } }"
      "layer { name: \"loss\" type: \"EuclideanLoss\" bottom: \"y\" bottom: \"t\" }",
      "small");
}

std::vector<Reader> readers() {
  static NativeBackend backend;
  return {
      {"net file", true, [](const std::string& p) { read_net_parameter(p); }},
      {"solver file", true, [](const std::string& p) { read_solver_parameter(p); }},
      {"IDX data file", false, [](const std::string& p) { read_idx(p); }},
      {"IDX data file", false, [](const std::string& p) { read_idx_dims(p); }},
      // Through the layer that reads IDX files, as a net file names them.
      {"IDX data file", false,
       [](const std::string& p) {
         Net net(parse_net_parameter("layer { name: \"d\" type: \"MnistData\" top: \"x\" "
                                     "top: \"y\" mnist_data_param { images: \"" + p +
                                         "\" labels: \"" + p + "\" batch_size: 1 } }",
                                     "mnist.prototxt"),
                 TRAIN, backend, 1);
       }},
      {"weights file", false,
       [](const std::string& p) { read_snapshot_file(p, SnapshotKind::kWeights); }},
      {"weights file", false,  // lamina train --weights
       [](const std::string& p) {
         Net net(small_net(), TRAIN, backend, 1);
         load_weights(net, p, WeightsMatch::kFineTune);
       }},
      {"solver state file", false,
       [](const std::string& p) { read_snapshot_file(p, SnapshotKind::kSolverState); }},
      {"solver state file", false,  // lamina train --snapshot
       [](const std::string& p) {
         Solver solver(parse_solver_parameter("base_lr: 0.1", "solver"), small_net(), backend);
         solver.restore(p);
       }},
  };
}

TEST(HostilePaths, EveryReaderGivesOneErrorNamingThePathAndTheProblem) {
  TempDir dir;
  const std::vector<Hostile> cases = hostile_paths(dir);
  ASSERT_GE(cases.size(), 10u);
  for (const Reader& reader : readers()) {
    for (const Hostile& c : cases) {
      if (c.text_only && !reader.text) continue;
      const std::string message = error_within_deadline([&] { reader.read(c.path); });
      EXPECT_THAT(message, AllOf(HasSubstr(reader.what), HasSubstr(c.shown),
                                 HasSubstr(c.problem)))
          << reader.what << ", " << c.kind;
    }
  }
}

// The solver file names the net file: a hostile net path is reported as the net file.
TEST(HostilePaths, ANetPathInTheSolverFileIsNamedAsTheNetFile) {
  TempDir dir;
  NativeBackend backend;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  for (const std::string& net : {dir / "fifo", std::string("/dev/zero"), dir / ""}) {
    write_bytes(dir / "solver.prototxt", "net: \"" + net + "\" base_lr: 0.1");
    EXPECT_THAT(error_within_deadline([&] { Solver::from_file(dir / "solver.prototxt", backend); }),
                AllOf(HasSubstr("net file '" + net + "'"), HasSubstr("not a")))
        << net;
  }
}

// Runs check as a user whom permission bits stop: this one, or "nobody" in a child process
// when running as root. check returns "" when it passes, else what went wrong; the result
// is that, or "skip: ..." when no such user can be had.
std::string as_unprivileged(const std::function<std::string()>& check) {
  if (::geteuid() != 0) return check();
  return in_child([&] {
    return ::setgid(65534) == 0 && ::setuid(65534) == 0
               ? check()
               : std::string("skip: cannot become user 65534 (nobody)");
  });
}

// An unreadable file, and a file in a directory that does not let the user through.
TEST(HostilePaths, AnUnreadableFileSaysPermissionDenied) {
  TempDir dir;
  write_bytes(dir / "unreadable", "name: \"x\"");
  fs::permissions(dir / "unreadable", fs::perms::none);
  fs::create_directories(dir / "closed");
  write_bytes(dir / "closed/file", "name: \"x\"");
  fs::permissions(dir / "closed", fs::perms::none);
  const std::string result = as_unprivileged([&] {
    std::string failures;
    for (const Reader& reader : readers()) {
      for (const auto& [path, hint] : {std::pair<std::string, std::string>{
                                           dir / "unreadable", "may not read it"},
                                       {dir / "closed/file", "a directory on the path"}}) {
        const std::string message = error_within_deadline([&] { reader.read(path); });
        for (const std::string& part : {std::string(reader.what), "'" + path + "'",
                                        std::string("Permission denied"), hint})
          if (message.find(part) == std::string::npos)
            failures += std::string(reader.what) + ": '" + message + "' lacks '" + part + "'\n";
      }
    }
    return failures;
  });
  fs::permissions(dir / "closed", fs::perms::owner_all);
  if (result.rfind("skip: ", 0) == 0) GTEST_SKIP() << result;
  EXPECT_EQ(result, "");
}

TEST(HostilePaths, AMissingRelativePathNamesTheWorkingDirectory) {
  const std::string message = error_of([] { read_net_parameter("no/such/net.prototxt"); });
  EXPECT_THAT(message, AllOf(HasSubstr("net file 'no/such/net.prototxt'"),
                             HasSubstr("No such file or directory"),
                             HasSubstr("relative to the working directory '" +
                                       fs::current_path().string() + "'")));
  EXPECT_THAT(error_of([] { read_idx("no/such/images"); }), HasSubstr("fetch_mnist.sh"));
}

TEST(HostilePaths, AnEmptyPathIsNamed) {
  EXPECT_THAT(error_of([] { read_solver_parameter(""); }),
              HasSubstr("solver file: the path is empty"));
}

// ---------------------------------------------------------------------------------------
// Sizes

// A text file exactly at the bound is read; one byte more is refused before it is read.
TEST(FileSizes, TextFilesAreBoundedAt64MiB) {
  TempDir dir;
  const std::string path = dir / "net.prototxt";
  write_bytes(path, "name: \"big\"\n");
  fs::resize_file(path, kMaxTextFileBytes);  // the rest is NUL bytes
  EXPECT_EQ(read_text_file(path, "net file").size(), size_t(kMaxTextFileBytes));
  fs::resize_file(path, kMaxTextFileBytes + 1);
  EXPECT_THAT(error_of([&] { read_text_file(path, "net file"); }),
              AllOf(HasSubstr("net file '" + path + "'"), HasSubstr("67108865 bytes (64.0 MiB)"),
                    HasSubstr("more than the 67108864 bytes (64.0 MiB) a net file may have")));
}

// A file that grows while it is read is read up to the size it had when opened.
TEST(FileSizes, NoReadGoesPastTheSizeStatdAtOpen) {
  TempDir dir;
  const std::string path = dir / "growing";
  write_bytes(path, "0123456789");
  InputFile file(path, "test file");
  EXPECT_EQ(file.size(), 10);
  std::ofstream(path, std::ios::app) << "more bytes written after open";
  EXPECT_EQ(file.read_all(100), "0123456789");
}

// A foreign file given as weights is refused by its magic: only its header is read, so a
// file far larger than memory (sparse here) is refused as quickly as a small one.
TEST(FileSizes, AHugeForeignOrDamagedSnapshotIsRefusedFromItsHeader) {
  TempDir dir;
  const std::string path = dir / "huge.lamina";
  const int64_t huge = int64_t(1) << 40;  // 1 TiB, sparse: reading it whole cannot work
  write_bytes(path, "PK\x03\x04 a zip file, not weights");
  std::error_code error;
  fs::resize_file(path, uintmax_t(huge), error);
  if (error) GTEST_SKIP() << "no sparse 1 TiB file on this file system: " << error.message();
  EXPECT_THAT(error_of([&] { read_snapshot_file(path, SnapshotKind::kWeights); }),
              AllOf(HasSubstr("weights file '" + path + "'"), HasSubstr("bad magic")));
  // The right magic, but the header announces 100 bytes of payload.
  std::string header = encode_snapshot(SnapshotKind::kWeights, {});
  header[16] = 100;
  write_bytes(path, header);
  fs::resize_file(path, uintmax_t(huge));
  EXPECT_THAT(error_of([&] { read_snapshot_file(path, SnapshotKind::kWeights); }),
              AllOf(HasSubstr("weights file '" + path + "'"),
                    HasSubstr(std::to_string(huge - 128) + " unexpected bytes")));
  // A header that agrees with the file's size: refused by the memory it would need, before
  // anything past the header is read.
  const uint64_t payload = uint64_t(huge) - (kSnapshotHeaderBytes + kSnapshotTrailerBytes);
  for (int i = 0; i < 8; ++i) header[16 + i] = char((payload >> (8 * i)) & 0xff);
  write_bytes(path, header);
  fs::resize_file(path, uintmax_t(huge));
  if (const std::optional<uint64_t> available = available_host_memory();
      available && *available < 2 * uint64_t(huge)) {
    EXPECT_THAT(error_of([&] { read_snapshot_file(path, SnapshotKind::kWeights); }),
                AllOf(HasSubstr("weights file '" + path + "'"), HasSubstr("1.0 TiB"),
                      HasSubstr("it needs 2.0 TiB")));
  }
  // A header announcing 100 bytes of payload again, in a file of 60.
  for (int i = 0; i < 8; ++i) header[16 + i] = char(i == 0 ? 100 : 0);
  write_bytes(path, header);
  fs::resize_file(path, 60);
  EXPECT_THAT(error_of([&] { read_snapshot_file(path, SnapshotKind::kSolverState); }),
              HasSubstr("a Lamina weights file, not a solver state file"));
  EXPECT_THAT(error_of([&] { read_snapshot_file(path, SnapshotKind::kWeights); }),
              AllOf(HasSubstr("truncated"), HasSubstr("announces 100 bytes"),
                    HasSubstr("the file has 60")));
}

// ---------------------------------------------------------------------------------------
// Nesting depth

// `depth` Sequential containers, one inside the other, around a ReLU: the ReLU's
// `layer { }` is at depth `depth + 1`.
std::string nested_net(int depth, bool closed = true) {
  std::string text = "layer { name: \"in\" type: \"Input\" top: \"x\" "
                     "input_param { shape { dim: 2 dim: 3 } } }\n";
  for (int i = 0; i < depth; ++i) text += "layer { type: \"Sequential\"\n";
  text += "layer { name: \"relu\" type: \"ReLU\" }\n";
  if (closed)
    for (int i = 0; i < depth; ++i) text += "}\n";
  return text;
}

TEST(PrototxtDepth, NestingBeyondTheLimitIsRefusedNamingFileAndLimit) {
  TempDir dir;
  const std::string path = dir / "deep.prototxt";
  for (int depth : {kMaxPrototxtDepth, 5000, 200000}) {  // 200000 would overflow the stack
    write_bytes(path, nested_net(depth, depth != 200000));
    EXPECT_THAT(error_of([&] { read_net_parameter(path); }),
                AllOf(HasSubstr(path + ":" + std::to_string(kMaxPrototxtDepth + 2) + ":"),
                      HasSubstr("recursion limit of 100"),
                      HasSubstr("Messages nest at most 100 deep")))
        << depth;
  }
}

// At the limit, the file parses and the net builder flattens all of it (its recursion is
// bounded by the parser's).
TEST(PrototxtDepth, NestingAtTheLimitBuilds) {
  const NetParameter param = parse_net_parameter(nested_net(kMaxPrototxtDepth - 1), "deep");
  NativeBackend backend;
  Net net(param, TEST, backend, 1);
  std::string name = "layer1/";  // unnamed containers: "layer<index>"
  for (int i = 1; i < kMaxPrototxtDepth - 1; ++i) name += "layer0/";
  EXPECT_TRUE(net.has_blob(name + "relu")) << net.blob_names().back();
}

// ---------------------------------------------------------------------------------------
// Writing

TEST(SnapshotWrites, BadPrefixesAreOneMessageWithThePath) {
  TempDir dir;
  write_bytes(dir / "plain", "x");
  fs::create_symlink("loop", dir / "loop");
  struct Case {
    std::string prefix, problem;
  };
  std::string deep = dir / "";
  while (deep.size() < 5000) deep += "dddddddddd/";
  for (const Case& c : {Case{dir / std::string(300, 'p'), "File name too long"},
                        Case{dir / "plain/run", "Not a directory"},
                        Case{dir / "loop/run", "Too many levels of symbolic links"},
                        Case{deep + "run", "File name too long"}}) {
    EXPECT_THAT(error_of([&] { check_writable(c.prefix); }),
                AllOf(HasSubstr("cannot write snapshots to " + quoted_path(c.prefix + "*")),
                      HasSubstr(c.problem)))
        << c.prefix.substr(0, 100);
    EXPECT_THAT(error_of([&] { write_file_atomically(c.prefix + "_iter_1.lamina", "data"); }),
                AllOf(HasSubstr("cannot write " + quoted_path(c.prefix + "_iter_1.lamina")),
                      HasSubstr(c.problem)))
        << c.prefix.substr(0, 100);
  }
  EXPECT_THAT(error_of([&] { check_writable(dir / std::string(300, 'p')); }),
              HasSubstr("255 in each name"));
  // A prefix that fits but leaves no room for what the run appends: refused at the start,
  // naming the longest name, not hours later at the first snapshot.
  const std::string tight = dir / std::string(240, 'p');
  write_bytes(tight, "a name of 240 bytes can be created");
  EXPECT_THAT(error_of([&] { check_writable(tight, 100000); }),
              AllOf(HasSubstr("File name too long"), HasSubstr("_iter_100000.solverstate.tmp-")));
}

// A file-size limit is a write error like a full disk (in a child: the limit is per process;
// SIGXFSZ ignored, as lamina_tool does).
TEST(SnapshotWrites, AFileSizeLimitIsAWriteErrorWithAHint) {
  TempDir dir;
  const std::string path = dir / "w.lamina";
  const std::string message = in_child([&] {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    return message_of([&] { write_file_atomically(path, std::string(1 << 16, 'x')); });
  });
  EXPECT_THAT(message, AllOf(HasSubstr("cannot write '" + path + "'"), HasSubstr("File too large"),
                             HasSubstr("the file-size limit (ulimit -f) was reached")));
  EXPECT_TRUE(fs::is_empty(dir / "")) << "the partial file stays";
}

}  // namespace
}  // namespace lamina
