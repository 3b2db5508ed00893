#include "scenarios/scenario.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "reference/error.hpp"

namespace fp8moe::scenarios {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

constexpr const char* kBom = "\xEF\xBB\xBF";

// Splits one value into a list: tuple keys on ';', others on ',' and ';'. Empty items are errors.
std::vector<std::string> split_list(const std::string& v, bool tuple) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : v + (tuple ? ";" : ",")) {
    if (c == ';' || (!tuple && c == ',')) {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

}  // namespace

std::string Value::where() const { return line > 0 ? cat(file, ":", line) : file; }

const Entry* Section::find(const std::string& key) const {
  for (const Entry& e : entries) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

std::string Section::where() const { return line > 0 ? cat(file, ":", line) : file; }

const Entry* Section::find(Key key) const { return find(std::string(key_name(key))); }

const KeySyntax* find_key(std::string_view name) {
  for (const KeySyntax& k : kKeys) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

const std::vector<std::string>& scenario_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> v;
    for (const KeySyntax& k : kKeys) v.emplace_back(k.name);
    return v;
  }();
  return keys;
}

bool is_tuple_key(const std::string& key) {
  const KeySyntax* k = find_key(key);
  return k && k->split == Split::tuple;
}

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (std::size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest(const std::string& s, const std::vector<std::string>& candidates) {
  std::string best;
  int best_d = 1 << 30;
  for (const std::string& c : candidates) {
    const int d = edit_distance(s, c);
    if (d < best_d) best_d = d, best = c;
  }
  // Close enough to be a typo: at most a third of the word, and at least one edit allowed.
  return best_d <= std::max<int>(2, static_cast<int>(s.size()) / 3) ? best : std::string();
}

std::string clip(const std::string& s, std::size_t max) {
  if (s.size() <= max) return s;
  return cat(s.substr(0, max), "... (", s.size(), " bytes)");
}

// One pass over the lines, with the syntax of Boost.Program_options' config files (which this
// replaced: its errors carried no line numbers, and a second scan to find them disagreed with it
// on some lines): `#` starts a comment anywhere, blank lines are skipped, `[NAME]` opens a
// section, `key = value` (both trimmed) is an item.
std::vector<IniSection> parse_ini(const std::string& text, const std::string& path) {
  const std::string base = path.substr(path.find_last_of('/') + 1);
  std::vector<IniSection> out;
  std::map<std::string, int> header_line;  // section name -> line of its header
  // A UTF-8 byte-order mark at the very start (some Windows editors write one) is skipped.
  const std::size_t bom = text.compare(0, 3, kBom) == 0 ? 3 : 0;
  std::size_t pos = bom;
  for (int n = 1; pos <= text.size(); ++n) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    const std::size_t col0 = n == 1 ? bom : 0;  // columns count the bytes of the file's line
    pos = end + 1;
    if (const auto z = line.find('\0'); z != std::string::npos) {
      fail(base, ":", n, ":", col0 + z + 1, ": a NUL byte: a scenario file is text (was a binary file given?); ",
           "remove it");
    }
    if (const auto m = line.find(kBom); m != std::string::npos) {
      fail(base, ":", n, ":", col0 + m + 1, ": a UTF-8 byte-order mark (bytes EF BB BF) inside the file (files ",
           "joined together?): remove it; one at the very start of a file is allowed");
    }
    const std::string t = trim(line.substr(0, line.find('#')));
    if (t.empty()) continue;
    if (t.front() == '[' && t.back() == ']') {
      const std::string name = trim(t.substr(1, t.size() - 2));
      if (name.empty()) fail(base, ":", n, ": an empty section header []: write [scenario.NAME] or [defaults]");
      const auto [it, fresh] = header_line.emplace(name, n);
      if (!fresh) {
        fail(base, ":", n, ": section [", clip(name), "] given twice (lines ", it->second, " and ", n,
             "): give each section once (repeat a key inside it to add values)");
      }
      out.push_back(IniSection{name, base, n, {}});
      continue;
    }
    const auto eq = t.find('=');
    if (eq == std::string::npos) {
      fail(base, ":", n, ": '", clip(t), "' is not `key = value` or a [section] header (comments start with #)");
    }
    const std::string key = trim(t.substr(0, eq)), raw = trim(t.substr(eq + 1));
    if (key.empty()) fail(base, ":", n, ": '", clip(t), "' has no key before '=': write `key = value`");
    if (out.empty()) fail(base, ":", n, ": key '", clip(key), "' is outside any section: put it under a [section] header");
    if (raw.empty()) fail(base, ":", n, ": key '", clip(key), "' has no value: write `", clip(key), " = VALUE`");
    out.back().items.emplace_back(key, Value{raw, base, n});
  }
  return out;
}

std::vector<std::string> split_values(const std::string& raw, bool tuple) { return split_list(raw, tuple); }

ScenarioFile parse_scenario_text(const std::string& text, const std::string& path) {
  // The same bound as a file read (a --resume file's stored text is parsed here too).
  if (static_cast<std::int64_t>(text.size()) > kMaxScenarioBytes) {
    fail(path.substr(path.find_last_of('/') + 1), ": scenario text of ", text.size(), " bytes exceeds the limit of ",
         kMaxScenarioBytes, " bytes: split it into several files");
  }
  ScenarioFile f;
  f.path = path;
  f.text = text;
  f.defaults.name = "defaults";
  const std::vector<IniSection> sections = parse_ini(text, path);
  for (const IniSection& is : sections) {
    Section* target = nullptr;
    if (is.name == "defaults") {
      f.defaults.file = is.file;
      f.defaults.line = is.line;
      target = &f.defaults;
    } else {
      if (is.name.rfind("scenario.", 0) != 0 || is.name.size() == 9) {
        fail(is.file, ":", is.line, ": unknown section [", clip(is.name), "]: write [scenario.NAME] (one scenario) or [defaults]");
      }
      const std::string name = is.name.substr(9);
      if (name.find_first_of(" \t.") != std::string::npos) {
        fail(is.file, ":", is.line, ": scenario name '", clip(name), "' has a space or a dot: use letters, digits, '_' and '-'");
      }
      f.scenarios.push_back(Section{name, is.file, is.line, {}});
      target = &f.scenarios.back();
    }
    for (const auto& [key, v] : is.items) {
      const KeySyntax* syn = find_key(key);
      if (!syn) {
        const std::string near = nearest(key, scenario_keys());
        fail(v.where(), ": unknown key '", clip(key), "'", near.empty() ? "" : cat(" (did you mean '", near, "'?)"),
             "; scenarios/README.md lists every key");
      }
      Entry* entry = nullptr;
      for (Entry& e : target->entries) {
        if (e.key == key) entry = &e;
      }
      if (!entry) {
        target->entries.push_back(Entry{key, {}});
        entry = &target->entries.back();
      }
      const std::vector<std::string> items = syn->split == Split::text ? std::vector<std::string>{v.text}
                                                                        : split_list(v.text, syn->split == Split::tuple);
      for (const std::string& item : items) {
        if (item.empty()) fail(v.where(), ": key '", key, "' has an empty list entry in '", clip(v.text), "'");
        entry->values.push_back(Value{item, v.file, v.line});
      }
    }
  }
  if (f.scenarios.empty()) {
    fail(path.substr(path.find_last_of('/') + 1), ": no [scenario.NAME] section: a scenario file holds at least one scenario");
  }
  return f;
}

ScenarioFile scenario_from_flags(const std::string& command, const std::vector<FlagValue>& values) {
  ScenarioFile f;
  f.path = command;
  f.defaults.name = "defaults";
  const std::string name = command.substr(command.find_last_of(' ') + 1);
  Section sec{name, command, 0, {}};
  for (const FlagValue& fv : values) {
    const KeySyntax& syn = syntax(fv.key);
    Entry e{std::string(syn.name), {}};
    const std::vector<std::string> items =
        syn.split == Split::text ? std::vector<std::string>{fv.text} : split_list(fv.text, syn.split == Split::tuple);
    for (const std::string& item : items) {
      if (item.empty()) fail(fv.flag, " '", clip(fv.text), "': an empty list entry");
      e.values.push_back(Value{item, fv.flag, 0});
    }
    sec.entries.push_back(std::move(e));
  }
  f.scenarios.push_back(std::move(sec));
  return f;
}

ScenarioFile read_scenario_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read scenario file '", path, "': check the path (shipped files are in scenarios/)");
  // At most one byte past the limit: /dev/zero or a stray 1 GB file is refused after 16 MiB, not
  // read until memory runs out.
  std::string text(static_cast<std::size_t>(kMaxScenarioBytes) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (static_cast<std::int64_t>(text.size()) > kMaxScenarioBytes) {
    fail("scenario file '", path, "' is larger than the limit of ", kMaxScenarioBytes,
         " bytes (16 MiB): give a scenario file (shipped ones are a few KiB), or split it");
  }
  if (in.bad()) fail("cannot read scenario file '", path, "': a read error");
  return parse_scenario_text(text, path);
}

}  // namespace fp8moe::scenarios
