// The lamina tool's command-line handling (tools/command_line.hpp): misspelt subcommands and
// options named with the closest one, one message and exit status 1 for every CLI11 error,
// flag hints added to library messages. The tool itself is driven by tool_errors.sh.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../tools/command_line.hpp"

namespace lamina::cli {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(EditDistance, CountsEditsAndTranspositionsAsOne) {
  EXPECT_EQ(edit_distance("train", "train"), 0u);
  EXPECT_EQ(edit_distance("trian", "train"), 1u);  // transposition
  EXPECT_EQ(edit_distance("tain", "train"), 1u);
  EXPECT_EQ(edit_distance("trainn", "train"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
}

TEST(Closest, SuggestsOnlyLikelyMisspellings) {
  const std::vector<std::string> commands = {"train", "test", "time", "device_query"};
  EXPECT_EQ(closest("trian", commands), "train");
  EXPECT_EQ(closest("tets", commands), "test");
  EXPECT_EQ(closest("tme", commands), "time");
  EXPECT_EQ(closest("devicequery", commands), "device_query");
  EXPECT_EQ(closest("device-qeury", commands), "device_query");
  EXPECT_EQ(closest("xyzzy", commands), std::nullopt);
  EXPECT_EQ(closest("fit", commands), std::nullopt);
  EXPECT_EQ(closest("x", {}), std::nullopt);
}

// An app shaped like the lamina tool's.
struct ToolLikeApp {
  CLI::App app{"test app", "lamina"};
  std::string solver, model, gpu;
  std::vector<std::string> plugins;
  CLI::App* train = app.add_subcommand("train", "Train");
  CLI::App* test = app.add_subcommand("test", "Test");
  ToolLikeApp() {
    app.require_subcommand(1);
    app.add_option("--plugin", plugins);  // the program's, before or after the command
    app.fallthrough();
    train->add_option("--solver", solver)->required();
    train->add_option("--gpu", gpu);
    test->add_option("--model", model)->required();
  }
};

std::string unknown(std::vector<std::string> args) {
  ToolLikeApp t;
  args.insert(args.begin(), "lamina");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return unknown_word(t.app, int(argv.size()), argv.data());
}

TEST(UnknownWord, NamesAMisspeltSubcommandWithTheClosestOne) {
  EXPECT_EQ(unknown({"trian", "--solver", "s"}),
            "'trian' is not a lamina command; did you mean 'train'? (commands: train, test)");
  EXPECT_EQ(unknown({"xyzzy"}), "'xyzzy' is not a lamina command (commands: train, test)");
  EXPECT_EQ(unknown({"--help", "tset"}),
            "'tset' is not a lamina command; did you mean 'test'? (commands: train, test)");
  EXPECT_EQ(unknown({}), "");  // CLI11 says a subcommand is required
  EXPECT_EQ(unknown({"train", "--solver", "s", "--gpu", "-1"}), "");
}

TEST(UnknownWord, NamesAMisspeltOptionOfTheSubcommand) {
  EXPECT_EQ(unknown({"train", "--sovler", "s"}),
            "lamina train: unknown option '--sovler'; did you mean '--solver'?");
  EXPECT_EQ(unknown({"train", "--sovler=s"}),
            "lamina train: unknown option '--sovler'; did you mean '--solver'?");
  // --model is an option of test, not of train: not suggested for train.
  EXPECT_EQ(unknown({"train", "--model", "m"}),
            "lamina train: unknown option '--model' (lamina train --help lists the options)");
  EXPECT_EQ(unknown({"train", "--solver=s", "--gpu=0"}), "");
  EXPECT_EQ(unknown({"train", "--solver", "s", "--", "--not-an-option"}), "");
}

TEST(UnknownWord, TheProgramsOwnOptionsMayComeBeforeOrAfterTheCommand) {
  EXPECT_EQ(unknown({"--plugin", "a.so", "train", "--solver", "s"}), "");
  EXPECT_EQ(unknown({"train", "--solver", "s", "--plugin", "a.so"}), "");
  // The value of --plugin is not taken for the command.
  EXPECT_EQ(unknown({"--plugin", "train", "tset"}),
            "'tset' is not a lamina command; did you mean 'test'? (commands: train, test)");
  EXPECT_EQ(unknown({"train", "--plugn", "a.so"}),
            "lamina train: unknown option '--plugn'; did you mean '--plugin'?");
}

int parse_args(std::vector<std::string> args, std::string* err) {
  ToolLikeApp t;
  args.insert(args.begin(), "lamina");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const std::optional<int> status = parse(t.app, int(argv.size()), argv.data());
  ::testing::internal::GetCapturedStdout();
  *err = ::testing::internal::GetCapturedStderr();
  return status ? *status : -1;
}

TEST(Parse, EveryMistakeIsOneLineAndExitStatus1) {
  std::string err;
  EXPECT_EQ(parse_args({"train", "--solver", "s"}, &err), -1);
  EXPECT_EQ(err, "");
  EXPECT_EQ(parse_args({"train"}, &err), 1);
  EXPECT_EQ(err, "lamina: error: --solver is required (lamina train --help lists the options)\n");
  EXPECT_EQ(parse_args({"trian"}, &err), 1);
  EXPECT_THAT(err, AllOf(HasSubstr("did you mean 'train'?"), Not(HasSubstr("Run with"))));
  EXPECT_EQ(parse_args({"train", "--solver", "s", "extra"}, &err), 1);
  EXPECT_THAT(err, AllOf(HasSubstr("lamina: error: "), HasSubstr("extra")));
  EXPECT_EQ(parse_args({}, &err), 1);
  EXPECT_THAT(err, HasSubstr("lamina: error: A subcommand is required"));
  EXPECT_EQ(parse_args({"train", "--help"}, &err), 0);
}

TEST(FlagHints, AddTheFlagOfAFieldTheMessageNames) {
  const std::vector<FieldFlag> flags = {
      {"nonfinite: CONTINUE", "--nonfinite continue"},
      {"snapshot_failure: CONTINUE", "--snapshot-failure continue"}};
  EXPECT_EQ(with_flag_hints("diverged; set nonfinite: CONTINUE to train on", flags, "lamina train"),
            "diverged; set nonfinite: CONTINUE to train on (lamina train: --nonfinite continue "
            "for nonfinite: CONTINUE)");
  EXPECT_EQ(with_flag_hints("nonfinite: CONTINUE or --nonfinite continue", flags, "x"),
            "nonfinite: CONTINUE or --nonfinite continue");
  EXPECT_EQ(with_flag_hints("cannot open 'x'", flags, "x"), "cannot open 'x'");
  EXPECT_THAT(with_flag_hints("nonfinite: CONTINUE, snapshot_failure: CONTINUE", flags, "t"),
              HasSubstr("(t: --nonfinite continue for nonfinite: CONTINUE, --snapshot-failure "
                        "continue for snapshot_failure: CONTINUE)"));
}

}  // namespace
}  // namespace lamina::cli
