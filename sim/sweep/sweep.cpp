#include "sim/sweep/sweep.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "reference/error.hpp"
#include "results/output_file.hpp"
#include "results/store.hpp"
#include "sim/sweep/expand.hpp"
#include "sim/backend/cuda_backend.hpp"
#include "sim/comm/runtime.hpp"
#include "sim/limits/limits.hpp"
#include "sim/sweep/provenance.hpp"
#include "sim/sweep/run_case.hpp"
#include "sim/sweep/save.hpp"
#include "sim/sweep/table.hpp"
#include "sim/sweep/json_out.hpp"

namespace fp8moe::sim {

using results::CaseRow;
using scenarios::Case;
using scenarios::ScenarioFile;

namespace {

constexpr const char* kFileMarker = "#@fp8moe-file: ";
constexpr const char* kEmbedded = "<embedded default>";

std::atomic<int> g_signal{0};

extern "C" void on_signal(int sig) {
  g_signal.store(sig);
  std::signal(sig, SIG_DFL);  // a second one ends the process at once
}

struct SignalGuard {
  SignalGuard() {
    g_signal.store(0);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
  }
  ~SignalGuard() {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
};

std::vector<ScenarioFile> load_files(const std::vector<std::string>& files) {
  std::vector<ScenarioFile> out;
  if (files.empty()) {
    out.push_back(scenarios::parse_scenario_text(scenarios::embedded_default_scenario(), kEmbedded));
    return out;
  }
  for (const std::string& f : files) out.push_back(scenarios::read_scenario_file(f));
  return out;
}

std::string stored_text(const std::vector<ScenarioFile>& files) {
  std::string s;
  for (const ScenarioFile& f : files) {
    s += kFileMarker + f.path + "\n" + f.text;
    if (!f.text.empty() && f.text.back() != '\n') s += "\n";
  }
  return s;
}

// The inverse of stored_text, for --resume.
std::vector<ScenarioFile> files_from_text(const std::string& text, const std::string& where) {
  std::vector<std::pair<std::string, std::string>> parts;
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (text.compare(pos, std::strlen(kFileMarker), kFileMarker) != 0) {
      fail("'", where, "': its scenario_text attribute is not in fp8moe's format: the file cannot be resumed");
    }
    const std::size_t name_end = text.find('\n', pos);
    const std::string name = text.substr(pos + std::strlen(kFileMarker), name_end - pos - std::strlen(kFileMarker));
    std::size_t next = text.find(std::string("\n") + kFileMarker, name_end);
    next = next == std::string::npos ? text.size() : next + 1;
    parts.emplace_back(name, text.substr(name_end + 1, next - name_end - 1));
    pos = next;
  }
  std::vector<ScenarioFile> out;
  for (const auto& [name, body] : parts) out.push_back(scenarios::parse_scenario_text(body, name));
  return out;
}

std::string default_out(const std::vector<std::string>& files) {
  if (files.empty()) return "results/runs/default.h5";
  return "results/runs/" + std::filesystem::path(files.front()).stem().string() + ".h5";
}

std::string duration(double s) {
  if (s < 60) return fmt::format("{:.1f}s", s);
  const int m = static_cast<int>(s / 60);
  if (m < 60) return fmt::format("{}m{:02d}s", m, static_cast<int>(s) % 60);
  return fmt::format("{}h{:02d}m", m / 60, m % 60);
}

// Progress on stderr: a redrawn bar on a terminal, a line every 10 s (and at the end) otherwise.
class Progress {
 public:
  Progress(double total_flops, std::size_t total_cases, bool quiet)
      : total_(total_flops), cases_(total_cases), quiet_(quiet), tty_(isatty(2) == 1) {}
  void update(double done_flops, std::size_t done_cases, const std::string& what) {
    if (quiet_) return;
    const double el = elapsed();
    const bool last = done_cases == cases_;
    if (!tty_ && !last && el - last_line_ < 10.0) return;
    last_line_ = el;
    const double frac = total_ > 0 ? done_flops / total_ : 1.0;
    const std::string eta = frac > 0 && !last ? duration(el / frac * (1 - frac)) : "-";
    if (tty_) {
      const int w = 30, fill = static_cast<int>(frac * w + 0.5);
      fmt::print(stderr, "\r[{}{}] {}/{} cases  {} elapsed  ETA {}  {:<30.30}", std::string(fill, '#'),
                 std::string(w - fill, '.'), done_cases, cases_, duration(el), eta, what);
      if (last) fmt::print(stderr, "\n");
    } else {
      fmt::print(stderr, "# progress: {}/{} cases ({:.0f}%), {} elapsed, ETA {}\n", done_cases, cases_, 100 * frac,
                 duration(el), eta);
    }
    std::fflush(stderr);
  }
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  void clear_line() const {
    if (tty_ && !quiet_) fmt::print(stderr, "\r{:<110}\r", "");
  }

 private:
  double total_;
  std::size_t cases_;
  bool quiet_, tty_;
  double last_line_ = -1e9;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// Every case must fit before any runs: host memory for the CPU reference, device memory (the
// CUDA backend's estimate against cudaMemGetInfo) for the GPU backends.
void check_memory(const std::vector<Case>& cases, MeshKind kind) {
  for (const Case& c : cases) {
    if (!c.rejected.empty() || c.backend.rfind("cuda-", 0) != 0) continue;
    CudaCaseShape s;
    s.layer = c.level == "layer";
    s.pass = c.pass;
    s.experts = c.experts;
    s.tokens = c.tokens;
    s.n = c.n;
    s.k = c.k;
    s.dim = c.dim;
    s.hidden = c.hidden;
    s.world = c.world;
    s.fake_gpu = kind == MeshKind::fake_gpu;
    s.gemm = c.gemm;
    require_cuda_case_memory(c.backend, s, cat(c.where, ": scenario ", c.scenario, " case ", c.id, " (", c.key(), ")"));
  }
  const std::int64_t avail = available_memory();
  if (avail <= 0) return;
  for (const Case& c : cases) {
    if (!c.rejected.empty() || c.backend != "reference") continue;
    const std::int64_t need = c.memory_estimate();
    if (need > avail) {
      fail(c.where, ": scenario ", c.scenario, " case ", c.id, " (", c.key(), ") needs about ",
           fmt::format("{:.1f}", static_cast<double>(need) / (1ull << 30)), " GiB but this machine has ",
           fmt::format("{:.1f}", static_cast<double>(avail) / (1ull << 30)),
           " GiB available: use smaller tokens/dims, fewer ranks, or a GPU backend");
    }
  }
}

}  // namespace

namespace {

// The kind of a rejection: the reason with its quoted names and sizes blanked ("plan '.' needs a
// mesh dim named '.'; mesh '.' has none"), so that `list` can count rejections by kind.
std::string reason_kind(const std::string& why) {
  std::string k;
  bool quoted = false;
  for (std::size_t i = 0; i < why.size(); ++i) {
    const char ch = why[i];
    if (ch == '\'') {
      k += quoted ? "'" : "'.";
      quoted = !quoted;
    } else if (!quoted) {
      if (std::isdigit(static_cast<unsigned char>(ch)) && why.compare(i > 6 ? i - 6 : 0, 6, "(size ") == 0) {
        while (i + 1 < why.size() && std::isdigit(static_cast<unsigned char>(why[i + 1]))) ++i;
        k += '.';
      } else {
        k += ch;
      }
    }
  }
  return k;
}

// What `list` shows: the table's cells (a header row first), the rejections counted by kind in
// order of first appearance (over every case, filtered or not), and how many rows passed the filters.
struct Listing {
  std::vector<std::vector<std::string>> cells{
      {"id", "scenario", "level", "mesh", "placements", "plan", "pass", "mode", "backend", "status", "reason", "case_key"}};
  std::vector<std::pair<std::string, int>> reasons;
  std::size_t shown = 0;
};

Listing listing(const scenarios::Expansion& ex, const ListOptions& opt) {
  Listing l;
  for (const Case& c : ex.cases) {
    const bool rejected = !c.rejected.empty();
    if (rejected) {
      const std::string kind = reason_kind(c.rejected);
      auto it = std::find_if(l.reasons.begin(), l.reasons.end(), [&](const auto& p) { return p.first == kind; });
      if (it == l.reasons.end()) {
        l.reasons.emplace_back(kind, 1);
      } else {
        ++it->second;
      }
    }
    if (!opt.status.empty() && opt.status != (rejected ? "rejected" : "run")) continue;
    if (!opt.reason.empty() && (!rejected || c.rejected.find(opt.reason) == std::string::npos)) continue;
    const CaseRow r = case_row_template(c);
    l.cells.push_back({std::to_string(c.id), c.scenario, c.level, c.mesh, c.placements(),
                       c.level == "op" ? c.op_verdict : c.plan, r.pass, r.mode, c.backend, rejected ? "rejected" : "run",
                       c.rejected, c.key()});
    ++l.shown;
  }
  return l;
}

// The readable table: the key only on runnable rows, the reason only on rejected ones; then the
// counts and the rejections by kind.
void print_listing(const scenarios::Expansion& ex, Listing l, TableFormat tf, const std::vector<bool>& numeric) {
  std::vector<std::vector<std::string>> view;
  for (const auto& row : l.cells) {
    std::vector<std::string> v(row.begin(), row.end() - 2);
    v.push_back(&row == &l.cells.front() ? "why / key" : (row[9] == "rejected" ? row[10] : row[11]));
    view.push_back(std::move(v));
  }
  fmt::print("{}", format_cells(view, tf, numeric));
  fmt::print("# {} cases: {} to run, {} rejected{}\n", ex.cases.size(), ex.runnable, ex.rejected,
             l.shown + 0 == ex.cases.size() ? std::string() : fmt::format("; {} shown", l.shown));
  if (!l.reasons.empty()) {
    std::stable_sort(l.reasons.begin(), l.reasons.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    fmt::print("# rejected, by kind of reason ('.': a name or size; --reason TEXT lists those rows):\n");
    for (const auto& [why, n] : l.reasons) fmt::print("# {:>6}  {}\n", n, why);
  }
}

}  // namespace

int list_cases(const std::vector<std::string>& files, const ListOptions& opt) {
  if (!opt.status.empty() && opt.status != "run" && opt.status != "rejected") {
    fail("--status ", opt.status, ": use run or rejected");
  }
  const TableFormat tf = parse_table_format(opt.format);
  const auto loaded = load_files(files);
  const scenarios::Expansion ex = scenarios::expand(loaded, {opt.only, opt.backend, available_memory()});
  Listing l = listing(ex, opt);
  std::vector<bool> numeric(l.cells.front().size(), false);
  numeric[0] = true;
  if (tf == TableFormat::json) {
    Json by_reason = Json::array();
    for (const auto& [why, n] : l.reasons) by_reason.push_back({{"reason_kind", why}, {"cases", n}});
    print_json({{"cases", ex.cases.size()}, {"run", ex.runnable}, {"rejected", ex.rejected}, {"shown", l.shown},
                {"rows", cells_json(l.cells, numeric)}, {"rejections_by_reason", by_reason}});
  } else if (tf == TableFormat::csv) {
    fmt::print("{}", format_cells(l.cells, tf, numeric));
  } else {
    print_listing(ex, std::move(l), tf, numeric);
  }
  return 0;
}

std::pair<int, int> parse_shard(const std::string& s) {
  const auto slash = s.find('/');
  int i = -1, n = -1;
  try {
    std::size_t a = 0, b = 0;
    if (slash != std::string::npos) {
      i = std::stoi(s.substr(0, slash), &a);
      n = std::stoi(s.substr(slash + 1), &b);
      if (a != slash || b != s.size() - slash - 1) i = -1;
    }
  } catch (const std::exception&) {
    i = -1;
  }
  if (i < 0 || n < 1 || i >= n) {
    fail("--shard '", s, "': give I/N with 0 <= I < N, e.g. --shard 0/4 ... --shard 3/4 (a Slurm array: ",
         "--shard ${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT})");
  }
  return {i, n};
}

// ---- The settings: one value, one message between processes, one set of root attributes.

void SweepSettings::to_attributes(h5::File& f) const {
  f.set_attr("scenario_text", scenario_text);
  f.set_attr("only", only);
  f.set_attr("backend_override", backend);
  f.set_attr("save_blocks", save_blocks ? 1 : 0);
  f.set_attr("save_tensors", save_tensors ? 1 : 0);
  f.set_attr("shard_index", shard_index);
  f.set_attr("shard_count", shard_count);
}

SweepSettings SweepSettings::from_attributes(const h5::File& f) {
  SweepSettings s;
  s.scenario_text = f.attr_string("scenario_text").value_or("");
  s.only = f.attr_string("only").value_or("");
  s.backend = f.attr_string("backend_override").value_or("");
  s.save_blocks = f.attr_int("save_blocks").value_or(0) != 0;
  s.save_tensors = f.attr_int("save_tensors").value_or(0) != 0;
  s.shard_index = static_cast<int>(f.attr_int("shard_index").value_or(0));
  s.shard_count = static_cast<int>(f.attr_int("shard_count").value_or(1));
  return s;
}

namespace {

constexpr char kFieldSep = '\x1e';

// `s` cut at every `sep`: n separators, n + 1 fields ("" is one empty field).
std::vector<std::string> split_at(const std::string& s, char sep) {
  std::vector<std::string> f;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t at = s.find(sep, pos);
    f.push_back(s.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
    if (at == std::string::npos) break;
    pos = at + 1;
  }
  return f;
}

}  // namespace

std::string SweepSettings::pack() const {
  return fmt::format("{}{}{}{}{}{}{}{}{}{}{}{}{}", scenario_text, kFieldSep, only, kFieldSep, backend, kFieldSep,
                     save_blocks ? 1 : 0, kFieldSep, save_tensors ? 1 : 0, kFieldSep, shard_index, kFieldSep, shard_count);
}

SweepSettings SweepSettings::unpack(const std::string& message) {
  const std::vector<std::string> f = split_at(message, kFieldSep);
  if (f.size() != 7) fail("sweep start: a message of ", f.size(), " fields from rank 0, expected 7");
  SweepSettings s;
  s.scenario_text = f[0];
  s.only = f[1];
  s.backend = f[2];
  s.save_blocks = f[3] == "1";
  s.save_tensors = f[4] == "1";
  s.shard_index = std::stoi(f[5]);
  s.shard_count = std::stoi(f[6]);
  return s;
}

namespace {

// Runs `fn` where it belongs and agrees over the launch on whether it failed: every process then
// stops together (the one that failed with its own message, the others saying why they stop).
template <class F>
void agreed(MeshRuntime& rt, const char* phase, F&& fn) {
  std::exception_ptr err;
  try {
    fn();
  } catch (const std::exception&) {
    err = std::current_exception();
  }
  if (rt.any(static_cast<bool>(err))) {
    if (err) std::rethrow_exception(err);
    fail("rank ", rt.launch_rank(), ": the sweep stopped ", phase, " because another rank failed (its message says why)");
  }
}

// run_sweep in phases: open or resume (the scenarios and settings), plan (the cases this process
// runs), open the output (create the file, or take a resumed file's committed rows), run.

// One sweep's state across its phases, on every process; the file, its writer and the committed
// rows are the root's.
struct Sweep {
  Sweep(MeshRuntime& r, const SweepOptions& o) : rt(r), root(r.is_root()), opt(o), out(o.out) {
    if (!root) opt.quiet = true;
  }
  MeshRuntime& rt;
  const bool root;
  SweepOptions opt;  // settings: the file's on --resume, the root's on the other processes
  std::string out;   // the result file
  std::vector<ScenarioFile> files;
  std::map<std::int64_t, std::vector<CaseRow>> done;  // committed rows by case id (resume), root
  std::set<std::int64_t> done_ids;                    // their ids, on every process
  // Declared before the writer: the file is closed before its lock is released.
  std::optional<results::OutputFile> output;
  std::optional<results::SweepWriter> writer;
};

// The cases of the sweep and the slice of them this process runs.
struct SweepPlan {
  scenarios::Expansion ex;
  std::vector<const Case*> runnable;  // into ex.cases
  std::size_t launch_rejected = 0, other_shards = 0;
  std::string launch_why;
};

// ---- Open or resume.

// --resume: the file locked first (a sweep still writing it refuses the resume before it is read),
// then its version, scenarios, settings and mesh kind.
void read_resumed(Sweep& s) {
  s.out = s.opt.resume;
  results::OutputRequest req;
  req.path = s.out;
  req.flag = "--resume";
  req.resume = true;
  s.output.emplace(req);
  const h5::File f = results::open_sweep(s.out);
  const std::string status = results::sweep_status(f);
  const auto version = f.attr_string("tool_version").value_or("");
  if (version != FP8MOE_VERSION) {
    fail("'", s.out, "' was written by fp8moe ", version, ", this is ", FP8MOE_VERSION,
         ": resume it with that version, or rerun the sweep");
  }
  s.opt.settings = SweepSettings::from_attributes(f);
  s.files = files_from_text(s.opt.settings.scenario_text, s.out);
  const std::string mesh = f.attr_string("mesh_runtime").value_or("fake");
  if (mesh != s.opt.mesh) {
    fail("'", s.out, "' was swept with --runtime ", mesh, ": resume it with --runtime ", mesh,
         " so that every case runs on the same kind of mesh");
  }
  if (!s.opt.quiet) fmt::print(stderr, "# resuming '{}' (status {})\n", s.out, status);
}

// The root reads the scenarios and settings (the files and flags, or the file --resume names) and
// sends them to the other processes.
void open_or_resume(Sweep& s) {
  agreed(s.rt, "before it started", [&] {
    if (!s.root) return;
    if (!s.opt.resume.empty()) {
      read_resumed(s);
    } else {
      s.files = load_files(s.opt.files);
      if (s.out.empty()) s.out = default_out(s.opt.files);
    }
    s.opt.settings.scenario_text = stored_text(s.files);
  });
  if (s.rt.launch_world() > 1) {
    s.opt.settings = SweepSettings::unpack(s.rt.broadcast(s.root ? s.opt.settings.pack() : std::string()));
    s.out = s.rt.broadcast(s.root ? s.out : std::string());
    if (!s.root) s.files = files_from_text(s.opt.settings.scenario_text, s.out);
  }
}

// ---- Plan: everything that can be wrong with the input is found here, before any file is touched.

// The expansion, with the cases this launch's mesh cannot hold rejected.
void expand_for_launch(const Sweep& s, SweepPlan& p) {
  const SweepSettings& st = s.opt.settings;
  p.ex = scenarios::expand(s.files, {st.only, st.backend, available_memory()});
  for (Case& c : p.ex.cases) {
    if (!c.rejected.empty()) continue;
    const std::string why = s.rt.cannot_run(Mesh::parse(c.mesh));
    if (why.empty()) continue;
    c.rejected = why;
    if (p.launch_why.empty()) p.launch_why = why;
    --p.ex.runnable;
    ++p.ex.rejected;
    ++p.launch_rejected;
  }
  if (p.ex.runnable == 0) {
    fail("no case to run: ", p.ex.cases.size(), " expanded, all rejected", st.only.empty() ? "" : " or filtered by --only",
         p.launch_rejected ? fmt::format(" ({} because this --runtime {} launch cannot hold their mesh)", p.launch_rejected, s.opt.mesh)
                           : std::string(),
         " (fp8moe list shows why)");
  }
}

// The runnable cases of this process's --shard slice.
void take_shard(const SweepSettings& st, SweepPlan& p) {
  std::size_t position = 0;
  for (const Case& c : p.ex.cases) {
    if (!c.rejected.empty()) continue;
    if (static_cast<int>(position++ % static_cast<std::size_t>(st.shard_count)) == st.shard_index) {
      p.runnable.push_back(&c);
    } else {
      ++p.other_shards;
    }
  }
  if (p.runnable.empty()) {
    fail("--shard ", st.shard_index, "/", st.shard_count, ": this slice holds none of the ", p.ex.runnable,
         " runnable cases; use fewer shards");
  }
}

void plan_cases(const Sweep& s, SweepPlan& p) {
  agreed(s.rt, "before it started", [&] {
    expand_for_launch(s, p);
    check_memory(p.ex.cases, s.rt.kind());
    take_shard(s.opt.settings, p);
  });
  if (s.root && p.launch_rejected) {
    fmt::print(stderr, "# fp8moe sweep: {} cases rejected because this --runtime {} launch cannot hold their mesh, e.g.: {}\n",
               p.launch_rejected, s.opt.mesh, p.launch_why);
  }
}

// ---- Open the output.

// --resume: the file's committed rows, each checked against what its scenario text expands to.
void resume_output(Sweep& s, const SweepPlan& p) {
  s.writer.emplace(results::SweepWriter::resume(s.output->path()));
  std::map<std::int64_t, std::string> keys;
  for (const Case* c : p.runnable) keys[c->id] = c->key();
  for (const CaseRow& r : s.writer->rows()) {
    if (!keys.count(r.case_id) || keys[r.case_id] != r.case_key) {
      s.writer->fail_quietly("resume: the committed cases do not match the stored scenario text");
      fail("'", s.out, "': committed case ", r.case_id, " (", r.case_key,
           ") is not what its scenario text expands to: the file cannot be resumed; rerun the sweep");
    }
    s.done[r.case_id].push_back(r);
  }
}

// A new file: checked and locked before anything is touched (results/output_file.hpp), written
// as PATH.tmp with its whole header, then published as PATH.
void create_output(Sweep& s, const SweepPlan& p) {
  results::OutputRequest req;
  req.path = s.out;
  req.force = s.opt.force;
  req.make_parent = true;  // results/runs/ of the default --out
  req.exists_fix = cat("finish it with --resume ", s.out, ", overwrite it with --force, or choose --out");
  s.output.emplace(req);
  results::Attrs attrs = provenance();
  for (auto& kv : s.rt.provenance()) attrs.push_back(std::move(kv));
  std::string paths, seeds;
  std::set<std::uint64_t> seed_set;
  for (const auto& f : s.files) paths += (paths.empty() ? "" : ",") + f.path;
  for (const Case* c : p.runnable) seed_set.insert(c->seed);
  for (auto x : seed_set) seeds += (seeds.empty() ? "" : ",") + std::to_string(x);
  attrs.emplace_back("argv", s.opt.argv);
  attrs.emplace_back("scenario_files", paths);
  attrs.emplace_back("seed", seeds);
  attrs.emplace_back("started_utc", utc_now());
  try {
    s.writer.emplace(results::SweepWriter::create(s.output->tmp(), attrs, static_cast<std::int64_t>(p.runnable.size())));
    s.opt.settings.to_attributes(s.writer->file());
    s.writer->file().flush();
  } catch (const Error&) {
    if (s.writer) s.writer->file().abandon();  // PATH.tmp is removed with the lock
    throw;
  }
  s.output->publish();  // the header is complete: PATH.tmp becomes PATH, the open file follows
  s.writer->moved_to(s.output->path());
}

std::string join_ids(const std::set<std::int64_t>& ids) {
  std::string s;
  for (auto id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

std::set<std::int64_t> split_ids(const std::string& s) {
  std::set<std::int64_t> ids;
  if (s.empty()) return ids;
  for (const std::string& id : split_at(s, ',')) ids.insert(std::stoll(id));
  return ids;
}

// The root creates or resumes the file; every process learns which cases it already holds.
void open_output(Sweep& s, const SweepPlan& p) {
  agreed(s.rt, "before it started", [&] {
    if (!s.root) return;
    if (!s.opt.resume.empty()) {
      resume_output(s, p);
    } else {
      create_output(s, p);
    }
  });
  for (const auto& kv : s.done) s.done_ids.insert(kv.first);
  // Which cases the file already holds: the other processes skip them too.
  if (s.rt.launch_world() > 1) s.done_ids = split_ids(s.rt.broadcast(s.root ? join_ids(s.done_ids) : std::string()));
}

// ---- Run.

// What the rows said and where the time went, for the summary.
struct Tally {
  int ok = 0, failed = 0, errors = 0;
  double min_db = std::numeric_limits<double>::infinity(), run_ms = 0, write_ms = 0;
  void count(const CaseRow& row) {
    if (row.status == "ok") {
      ++ok;
      if (row.sqnr_db < min_db) min_db = row.sqnr_db;
    } else if (row.status == "fail") {
      ++failed;
    } else {
      ++errors;
    }
  }
};

// The table (widths from every runnable case's row template) and its header, after the sweep's
// one-line description.
StreamTable start_table(const Sweep& s, const SweepPlan& p) {
  std::vector<CaseRow> hints;
  for (const Case* c : p.runnable) {
    CaseRow h = case_row_template(*c);
    h.tensor = "grad_W";
    h.status = "error";
    hints.push_back(std::move(h));
  }
  StreamTable table(sweep_columns_for(hints), hints);
  if (s.root) {
    const SweepSettings& st = s.opt.settings;
    fmt::print("# fp8moe sweep: {} cases ({} to run{}, {} rejected: fp8moe list shows why) on --runtime {} -> {}\n",
               p.ex.cases.size(), p.runnable.size(),
               p.other_shards ? fmt::format(" in shard {}/{}, {} in the others", st.shard_index, st.shard_count,
                                            p.other_shards)
                              : std::string(),
               p.ex.rejected, s.opt.mesh, s.out);
    fmt::print("{}\n", table.header());
    std::fflush(stdout);
  }
  return table;
}

// Runs one case; the root commits it (its saved groups first, with room for the whole case
// reserved before its first byte: a full disk stops here, cleanly) and returns its rows.
std::vector<CaseRow> run_and_commit(Sweep& s, const Case& c, Tally& t) {
  const SweepSettings& st = s.opt.settings;
  CaseResult r = run_case(c, st.save_blocks || st.save_tensors, &s.rt);
  t.run_ms += r.time_ms;
  if (!s.root) return {};
  const auto w0 = std::chrono::steady_clock::now();
  const bool groups = (st.save_blocks || st.save_tensors) && !r.error;
  if (groups) {
    s.writer->reserve(saved_bytes_bound(r.tensors, st.save_blocks, st.save_tensors) + s.writer->commit_bytes(r.rows),
                      cat("case ", c.id));
  }
  if (st.save_blocks && !r.error) save_blocks(s.writer->case_group("blocks", c.id), c, r.tensors);
  if (st.save_tensors && !r.error) save_tensors(s.writer->case_group("tensors", c.id), c, r.tensors);
  s.writer->commit(r.rows);
  t.write_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
  return std::move(r.rows);
}

// The root marks the file finished: `complete`, or `interrupted` with the resume command.
void finish_file(Sweep& s, const char* status, const std::string& why) {
  if (!s.root) return;
  s.writer->reserve(4096, "the finish time");
  s.writer->file().set_attr("finished_utc", utc_now());
  s.writer->finish(status, why);
}

// Every process stops after the same case (a launcher forwards a signal to each at its own time):
// true when a signal came before the last case, the file then marked interrupted.
bool stop_on_signal(Sweep& s, const Progress& progress, std::size_t n_done, std::size_t n_cases) {
  if (!(s.rt.any(g_signal.load() != 0) && n_done < n_cases)) return false;
  const std::string why = fmt::format("interrupted by signal {} after {} of {} cases: fp8moe sweep --resume {}{}",
                                      g_signal.load(), n_done, n_cases, s.out,
                                      s.opt.mesh == "fake" ? "" : " --runtime " + s.opt.mesh);
  if (s.root) {
    finish_file(s, "interrupted", why);
    progress.clear_line();
    fmt::print(stderr, "fp8moe sweep: {}\n", why);
  }
  return true;
}

// The cases in order, each case's rows printed as it completes (a resumed file's committed cases
// replayed); the file finished. Returns 130 when interrupted, else the tally.
int run_all(Sweep& s, const SweepPlan& p, const StreamTable& table, Progress& progress, Tally& t) {
  std::size_t n_done = 0;
  double flops_done = 0;
  for (const Case* c : p.runnable) {
    std::vector<CaseRow> rows;
    if (s.done_ids.count(c->id)) {
      if (s.root) rows = s.done.at(c->id);
    } else {
      progress.update(flops_done, n_done, c->scenario + " " + c->mesh);
      rows = run_and_commit(s, *c, t);
    }
    ++n_done;
    flops_done += c->flops();
    progress.clear_line();
    for (const CaseRow& row : rows) {
      fmt::print("{}\n", table.row(row));
      t.count(row);
    }
    std::fflush(stdout);
    progress.update(flops_done, n_done, c->scenario);
    if (stop_on_signal(s, progress, n_done, p.runnable.size())) return 130;
  }
  s.rt.barrier();
  finish_file(s, "complete", "");
  return 0;
}

// Runs the plan and prints the summary. A failure marks the file failed (it keeps every committed
// case); a full disk says how to resume.
int run_cases(Sweep& s, const SweepPlan& p) {
  const StreamTable table = start_table(s, p);
  double total_flops = 0;
  for (const Case* c : p.runnable) total_flops += c->flops();
  SignalGuard guard;
  Progress progress(total_flops, p.runnable.size(), s.opt.quiet);
  Tally t;
  try {
    if (run_all(s, p, table, progress, t) == 130) return 130;
  } catch (const IoError& e) {
    // A full disk: the file keeps every committed case (the store reserved before each write).
    if (s.writer) s.writer->fail_quietly(e.what());
    const std::string msg = e.what();
    if (msg.find("--resume") != std::string::npos) throw;
    fail_io(msg, "; the file keeps its committed cases: free space, then fp8moe sweep --resume ", s.out);
  } catch (const std::exception& e) {
    if (s.writer) s.writer->fail_quietly(e.what());
    throw;
  }
  if (!s.root) return 0;
  const double total_s = progress.elapsed();
  fmt::print("# summary: {} cases run, {} rows: {} ok, {} fail, {} error; lowest sqnr_hp64 {} dB; {} ({:.1f}% writing "
             "results); {}\n",
             p.runnable.size(), t.ok + t.failed + t.errors, t.ok, t.failed, t.errors, format_db(t.min_db),
             duration(total_s), t.run_ms + t.write_ms > 0 ? 100.0 * t.write_ms / (t.run_ms + t.write_ms) : 0.0, s.out);
  return t.failed + t.errors > 0 ? 1 : 0;
}

}  // namespace

int run_sweep(const SweepOptions& opt) {
  // First: the runtime (--runtime mpi re-executes as fp8moe-mpi here, before anything is written).
  RuntimeOptions ro;
  ro.timeout_s = opt.timeout_s;
  const std::unique_ptr<MeshRuntime> rt = make_mesh_runtime(parse_mesh_kind(opt.mesh), ro);
  Sweep s(*rt, opt);
  open_or_resume(s);
  SweepPlan plan;
  plan_cases(s, plan);
  open_output(s, plan);
  return run_cases(s, plan);
}

}  // namespace fp8moe::sim
