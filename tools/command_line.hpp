// The lamina tool's command-line parsing around CLI11: a mistake is one message and exit
// status 1 (CLI11 alone prints a generic message and exits 104-109), a misspelt subcommand
// or option is named with the closest one that exists ("did you mean 'train'?"), and a
// library message naming a setting the command line can also give gets the flag as a hint.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace lamina::cli {

// Optimal string alignment distance: insertions, deletions, substitutions and transpositions
// of adjacent characters ("trian" is 1 from "train").
inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// The candidate closest to word, when it is close enough to be a likely misspelling: within
// 2 edits, or a third of the candidate's length.
inline std::optional<std::string> closest(const std::string& word,
                                          const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = 0;
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(word, candidate);
    if (distance > 2 && 3 * distance > candidate.size()) continue;
    if (!best || distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

inline std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// "--solver" and the like: the long names of an app's options, help included.
inline std::vector<std::string> long_option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options())
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
  return names;
}

// The message for an unknown subcommand, or an unknown --option of a known one, before
// CLI11 sees them (CLI11 would report "a subcommand is required" or a missing required
// option instead); empty when there is none. Values that begin with "--" are not told apart
// from options: such a file name must be given as ./--name.
inline std::string unknown_word(const CLI::App& app, int argc, char** argv) {
  const std::string program = app.get_name();
  // The program's own options (--help, --plugin FILE) before the command.
  int first = 1;
  while (first < argc && argv[first][0] == '-') {
    const CLI::Option* option = app.get_option_no_throw(argv[first]);
    first += option != nullptr && option->get_items_expected_min() > 0 ? 2 : 1;
  }
  if (first == argc) return {};
  const std::string word = argv[first];
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    commands.push_back(sub->get_name());
  if (std::find(commands.begin(), commands.end(), word) == commands.end()) {
    const auto guess = closest(word, commands);
    return "'" + word + "' is not a " + program + " command" +
           (guess ? "; did you mean '" + *guess + "'?" : "") + " (commands: " + join(commands) +
           ")";
  }
  const CLI::App* sub = app.get_subcommand(word);
  for (int i = first + 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
    const std::string name = arg.substr(0, arg.find('='));
    // The command's options, and the program's, which may follow the command.
    if (sub->get_option_no_throw(name) != nullptr || app.get_option_no_throw(name) != nullptr)
      continue;
    std::vector<std::string> names = long_option_names(*sub);
    for (const std::string& n : long_option_names(app)) names.push_back(n);
    const auto guess = closest(name, names);
    return program + " " + word + ": unknown option '" + name + "'" +
           (guess ? "; did you mean '" + *guess + "'?"
                  : " (" + program + " " + word + " --help lists the options)");
  }
  return {};
}

// A setting that a configuration file and a flag can both give, for with_flag_hints.
struct FieldFlag {
  std::string field;  // as a library message names it: "nonfinite: CONTINUE"
  std::string usage;  // what to type: "--nonfinite continue"; a message holding it needs no hint
};

// message, with "(COMMAND: USAGE for FIELD, ...)" added for each field of `flags` it names.
// The library's messages name the fields of its files; only a program knows its flags.
inline std::string with_flag_hints(const std::string& message,
                                   const std::vector<FieldFlag>& flags,
                                   const std::string& command) {
  std::string hints;
  for (const FieldFlag& f : flags) {
    if (message.find(f.field) == std::string::npos || message.find(f.usage) != std::string::npos)
      continue;
    hints += (hints.empty() ? "" : ", ") + f.usage + " for " + f.field;
  }
  return hints.empty() ? message : message + " (" + command + ": " + hints + ")";
}

// Parses argv into app. Returns the exit status when the program should stop now: 0 after
// --help, 1 after a mistake (one line on stderr: "PROGRAM: error: ..."); nothing to go on.
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  const std::string program = app.get_name();
  const std::string unknown = unknown_word(app, argc, argv);
  if (!unknown.empty()) {
    std::cerr << program << ": error: " << unknown << "\n";
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::string help = program;
    for (const CLI::App* sub : app.get_subcommands()) help += " " + sub->get_name();
    std::cerr << program << ": error: " << e.what() << " (" << help << " --help lists the "
              << "options)\n";
    return 1;
  }
  return std::nullopt;
}

}  // namespace lamina::cli
