#pragma once
// Scenario files (issue 4 item 1): INI text (the syntax of Boost.Program_options' config files,
// parsed here so that every error has its line), one scenario per `[scenario.NAME]` section, shared keys in an optional `[defaults]` section.
// Every key names one parameter of a case; a repeated key or a list of values makes it a sweep
// axis, and the axes of a scenario expand as a cartesian product (sim/sweep/expand.hpp).
//
//   [scenario.tp_fwd]            # one scenario
//   level = op
//   mesh  = tp=2                 # values that contain commas (mesh, offs, empty_experts,
//   mesh  = dp=2,tp=2            #   lhs, rhs) are listed by repeating the key or with ';'
//   mode  = torchao-emulated, promote-fp32:cublas   # other keys: a comma (or ';') list
//
// scenarios/README.md documents every key and its values. Errors name the file and line.
#include <cstdint>
#include <string>
#include <vector>

#include "scenarios/keys.hpp"

namespace fp8moe::scenarios {

// The largest scenario text the parser reads (a file, or a sweep file's stored text): a scenario
// is a few kilobytes; past this it is not a scenario (e.g. /dev/zero), refused before it is read.
inline constexpr std::int64_t kMaxScenarioBytes = std::int64_t{16} << 20;

// One value of a key, where it came from.
struct Value {
  std::string text;
  std::string file;  // or a command-line flag ("--experts") for a scenario built from flags
  int line = 0;      // 0: not from a file (where() is then `file` alone)
  std::string where() const;  // "ci.ini:12", "--experts"
};

struct Entry {
  std::string key;
  std::vector<Value> values;  // after splitting lists; in file order
};

struct Section {
  std::string name;  // the NAME of [scenario.NAME]
  std::string file;
  int line = 0;      // the header's line
  std::vector<Entry> entries;
  const Entry* find(const std::string& key) const;
  const Entry* find(Key key) const;
  std::string where() const;  // "ci.ini:12", or the command a scenario from flags came from
};

struct ScenarioFile {
  std::string path;   // as given, or "<embedded default>"
  std::string text;   // the file's text, kept as provenance
  std::vector<Section> scenarios;
  Section defaults;   // [defaults]: keys every scenario of the file inherits unless it sets them
};

// Every key a scenario may set (scenarios/keys.hpp), in the order the axes expand in (outermost
// first), and whether a key's single values contain commas (listed by repetition or ';' only).
const std::vector<std::string>& scenario_keys();
bool is_tuple_key(const std::string& key);

// INI text as sections of raw `key = value` items, in file order, with their lines. `#` starts a
// comment anywhere on a line; a UTF-8 byte-order mark at the start is skipped. Errors name
// file:line (file:line:column for a NUL byte or a stray byte-order mark): a line that is neither
// `key = value` nor `[section]`, a key outside any section or without a value, a section given
// twice (both lines named).
struct IniSection {
  std::string name;  // the text between the brackets
  std::string file;
  int line = 0;
  std::vector<std::pair<std::string, Value>> items;
};
std::vector<IniSection> parse_ini(const std::string& text, const std::string& path);
// One raw value as a list: tuple lists split on ';', others on ',' and ';'.
std::vector<std::string> split_values(const std::string& raw, bool tuple);

// Parses INI text. Errors (fp8moe::Error) name the file and line: a syntax error, an unknown
// section, an unknown key (with the nearest valid key), a key with no value.
ScenarioFile parse_scenario_text(const std::string& text, const std::string& path);
ScenarioFile read_scenario_file(const std::string& path);  // Error when unreadable

// A one-section scenario from command-line values (`fp8moe run`): each value split as the key's
// registry row says and kept with its flag, so that the expansion checks flags as it checks a
// file and its messages name the flag ("--experts 0: must be >= 1"). `command`: "fp8moe run".
struct FlagValue {
  Key key;
  std::string flag;  // "--experts"
  std::string text;  // the raw value
};
ScenarioFile scenario_from_flags(const std::string& command, const std::vector<FlagValue>& values);

// The built-in default scenario (scenarios/default.ini compiled in) and the CI gates.
const char* embedded_default_scenario();
const char* embedded_default_gates();

// `s` itself when short, else its first `max` bytes, "...", and its length: values in messages
// (a 10 MB line must not make a 10 MB message).
std::string clip(const std::string& s, std::size_t max = 80);

// Edit distance, for "did you mean" suggestions.
int edit_distance(const std::string& a, const std::string& b);
// The candidate closest to `s` (empty when none is close enough to suggest).
std::string nearest(const std::string& s, const std::vector<std::string>& candidates);

}  // namespace fp8moe::scenarios
