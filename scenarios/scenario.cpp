#include "scenarios/scenario.hpp"

#include <boost/program_options.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "reference/error.hpp"
#include "sim/limits/limits.hpp"

namespace fp8moe::scenarios {

namespace po = boost::program_options;

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// Line numbers of every `key = value` line and section header, in file order. Boost's parser
// reports neither, so a light scan of the same text gives them: the n-th occurrence Boost returns
// of "section.key" is the n-th such line of the scan.
struct LineIndex {
  std::map<std::string, std::vector<int>> key_lines;  // "scenario.x.mode" -> lines
  std::map<std::string, int> section_lines;           // "scenario.x" -> header line
  std::vector<std::string> section_order;

  explicit LineIndex(const std::string& text) {
    std::istringstream in(text);
    std::string line, section;
    for (int n = 1; std::getline(in, line); ++n) {
      const std::string t = trim(line.substr(0, line.find('#')));
      if (t.empty()) continue;
      if (t.front() == '[' && t.back() == ']') {
        section = trim(t.substr(1, t.size() - 2));
        if (!section_lines.count(section)) section_order.push_back(section);
        section_lines.emplace(section, n);
        continue;
      }
      const auto eq = t.find('=');
      if (eq == std::string::npos) continue;
      const std::string key = trim(t.substr(0, eq));
      key_lines[section.empty() ? key : section + "." + key].push_back(n);
    }
  }

  int find_text(const std::string& text, const std::string& needle) const {
    std::istringstream in(text);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.find(needle) != std::string::npos) return n;
    }
    return 0;
  }
};

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

std::string Value::where() const { return cat(file, ":", line); }

const Entry* Section::find(const std::string& key) const {
  for (const Entry& e : entries) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

const std::vector<std::string>& scenario_keys() {
  static const std::vector<std::string> keys{
      "description", "level",  "mesh",     "plan",       "placements",  "lhs",          "rhs",
      "pass",        "mode",   "backend",  "experts",    "tokens",      "n",            "k",
      "dim",         "hidden", "routing",  "offs",       "empty_experts", "dist",       "seed",
      "format",      "block",  "pow2_scales", "pad",     "fsdp_gather", "reduce_dtype", "reduce_order",
      "fp8_dispatch", "lr"};
  return keys;
}

bool is_tuple_key(const std::string& key) {
  return key == "mesh" || key == "offs" || key == "empty_experts" || key == "lhs" || key == "rhs" ||
         key == "description";
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

std::vector<IniSection> parse_ini(const std::string& text, const std::string& path) {
  const LineIndex index(text);
  const std::string base = path.substr(path.find_last_of('/') + 1);
  po::parsed_options parsed(nullptr);
  try {
    std::istringstream in(text);
    po::options_description none;
    parsed = po::parse_config_file(in, none, /*allow_unregistered=*/true);
  } catch (const po::error& e) {
    // Boost names the offending line's text, not its number: find it.
    std::string msg = e.what();
    int line = 0;
    const auto q1 = msg.find('\''), q2 = msg.rfind('\'');
    if (q1 != std::string::npos && q2 > q1) line = index.find_text(text, msg.substr(q1 + 1, q2 - q1 - 1));
    fail(base, ":", line, ": ", msg, ": write `key = value` lines under [section] headers");
  }
  std::vector<IniSection> out;
  std::map<std::string, std::size_t> by_name;
  for (const std::string& s : index.section_order) {
    by_name[s] = out.size();
    out.push_back(IniSection{s, base, index.section_lines.at(s), {}});
  }
  std::map<std::string, std::size_t> seen_count;  // occurrences handed out per "section.key"
  for (const po::option& o : parsed.options) {
    const std::string& full = o.string_key;
    const auto kl = index.key_lines.find(full);
    const std::size_t occ = seen_count[full]++;
    const int line = kl != index.key_lines.end() && occ < kl->second.size() ? kl->second[occ] : 0;
    // The longest known section that prefixes the key (section names may contain dots).
    std::string sec;
    for (const auto& [name, i] : by_name) {
      if (full.size() > name.size() + 1 && full.compare(0, name.size(), name) == 0 && full[name.size()] == '.' &&
          name.size() > sec.size()) {
        sec = name;
      }
    }
    const std::string key = sec.empty() ? full : full.substr(sec.size() + 1);
    if (sec.empty()) fail(base, ":", line, ": key '", key, "' is outside any section: put it under a [section] header");
    const std::string raw = o.value.empty() ? std::string() : trim(o.value.front());
    if (raw.empty()) fail(base, ":", line, ": key '", key, "' has no value: write `", key, " = VALUE`");
    out[by_name[sec]].items.emplace_back(key, Value{raw, base, line});
  }
  return out;
}

std::vector<std::string> split_values(const std::string& raw, bool tuple) { return split_list(raw, tuple); }

ScenarioFile parse_scenario_text(const std::string& text, const std::string& path) {
  // The same bound as a file read (a --resume file's stored text is parsed here too).
  if (static_cast<std::int64_t>(text.size()) > sim::kMaxScenarioBytes) {
    fail(path.substr(path.find_last_of('/') + 1), ": scenario text of ", text.size(), " bytes exceeds the limit of ",
         sim::kMaxScenarioBytes, " bytes: split it into several files");
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
        fail(is.file, ":", is.line, ": unknown section [", is.name, "]: write [scenario.NAME] (one scenario) or [defaults]");
      }
      const std::string name = is.name.substr(9);
      if (name.find_first_of(" \t.") != std::string::npos) {
        fail(is.file, ":", is.line, ": scenario name '", name, "' has a space or a dot: use letters, digits, '_' and '-'");
      }
      f.scenarios.push_back(Section{name, is.file, is.line, {}});
      target = &f.scenarios.back();
    }
    for (const auto& [key, v] : is.items) {
      const auto& keys = scenario_keys();
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        const std::string near = nearest(key, keys);
        fail(v.where(), ": unknown key '", key, "'", near.empty() ? "" : cat(" (did you mean '", near, "'?)"),
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
      const std::vector<std::string> items = key == "description" ? std::vector<std::string>{v.text}
                                                                   : split_list(v.text, is_tuple_key(key));
      for (const std::string& item : items) {
        if (item.empty()) fail(v.where(), ": key '", key, "' has an empty list entry in '", v.text, "'");
        entry->values.push_back(Value{item, v.file, v.line});
      }
    }
  }
  if (f.scenarios.empty()) {
    fail(path.substr(path.find_last_of('/') + 1), ": no [scenario.NAME] section: a scenario file holds at least one scenario");
  }
  return f;
}

ScenarioFile read_scenario_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read scenario file '", path, "': check the path (shipped files are in scenarios/)");
  // At most one byte past the limit: /dev/zero or a stray 1 GB file is refused after 16 MiB, not
  // read until memory runs out.
  std::string text(static_cast<std::size_t>(sim::kMaxScenarioBytes) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (static_cast<std::int64_t>(text.size()) > sim::kMaxScenarioBytes) {
    fail("scenario file '", path, "' is larger than the limit of ", sim::kMaxScenarioBytes,
         " bytes (16 MiB): give a scenario file (shipped ones are a few KiB), or split it");
  }
  if (in.bad()) fail("cannot read scenario file '", path, "': a read error");
  return parse_scenario_text(text, path);
}

}  // namespace fp8moe::scenarios
