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
#include "scenarios/expand.hpp"
#include "sim/backend/cuda_backend.hpp"
#include "sim/comm/runtime.hpp"
#include "sim/limits/limits.hpp"
#include "sim/sweep/provenance.hpp"
#include "sim/sweep/run_case.hpp"
#include "sim/sweep/save.hpp"
#include "sim/sweep/table.hpp"

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

int list_cases(const std::vector<std::string>& files, const std::string& only, const std::string& backend) {
  const auto loaded = load_files(files);
  const scenarios::Expansion ex = scenarios::expand(loaded, {only, backend, available_memory()});
  std::vector<CaseRow> hints;
  for (const Case& c : ex.cases) hints.push_back(case_row_template(c));
  std::vector<std::vector<std::string>> cells{{"id", "scenario", "level", "mesh", "plan", "pass", "mode", "backend", "status", "why / key"}};
  for (std::size_t i = 0; i < ex.cases.size(); ++i) {
    const Case& c = ex.cases[i];
    const CaseRow& r = hints[i];
    cells.push_back({std::to_string(c.id), c.scenario, c.level, c.mesh, c.level == "op" ? r.placements + " (" + c.op_verdict + ")" : c.plan,
                     r.pass, r.mode, c.backend, c.rejected.empty() ? "run" : "rejected",
                     c.rejected.empty() ? c.key() : c.rejected});
  }
  fmt::print("{}", format_cells(cells, TableFormat::table, {true}));
  fmt::print("# {} cases: {} to run, {} rejected\n", ex.cases.size(), ex.runnable, ex.rejected);
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

namespace {

// What the root process decides before any case runs, and sends to the other processes.
struct SweepStart {
  std::string text;     // the scenario files (stored_text)
  std::string only, backend, out;
  bool save_blocks = false, save_tensors = false;
  std::set<std::int64_t> done;  // case ids with committed rows (resume)
  int shard_index = 0, shard_count = 1;

  std::string pack() const {
    std::string ids;
    for (auto id : done) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    const char sep = '\x1e';
    return fmt::format("{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}", text, sep, only, sep, backend, sep, out, sep,
                       save_blocks ? 1 : 0, sep, save_tensors ? 1 : 0, sep, ids, sep, shard_index, sep, shard_count);
  }
  static SweepStart unpack(const std::string& s) {
    std::vector<std::string> f;
    std::size_t pos = 0;
    for (;;) {
      const std::size_t at = s.find('\x1e', pos);
      f.push_back(s.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
      if (at == std::string::npos) break;
      pos = at + 1;
    }
    if (f.size() != 9) fail("sweep start: a message of ", f.size(), " fields from rank 0, expected 9");
    SweepStart st;
    st.text = f[0];
    st.only = f[1];
    st.backend = f[2];
    st.out = f[3];
    st.save_blocks = f[4] == "1";
    st.save_tensors = f[5] == "1";
    for (const std::string& id : split_commas(f[6])) st.done.insert(std::stoll(id));
    st.shard_index = std::stoi(f[7]);
    st.shard_count = std::stoi(f[8]);
    return st;
  }

  static std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> v;
    std::size_t pos = 0;
    while (pos < s.size()) {
      const std::size_t at = s.find(',', pos);
      v.push_back(s.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
      if (at == std::string::npos) break;
      pos = at + 1;
    }
    return v;
  }
};

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

}  // namespace

int run_sweep(const SweepOptions& opt_in) {
  SweepOptions opt = opt_in;
  // First: the runtime (--mesh mpi re-executes as fp8moe-mpi here, before anything is written).
  RuntimeOptions ro;
  ro.timeout_s = opt.timeout_s;
  const std::unique_ptr<MeshRuntime> rt = make_mesh_runtime(parse_mesh_kind(opt.mesh), ro);
  const bool root = rt->is_root();
  if (!root) opt.quiet = true;

  std::vector<ScenarioFile> files;
  std::map<std::int64_t, std::vector<CaseRow>> done;  // committed rows by case id (resume), root
  // Declared before the writer: the file is closed before its lock is released.
  std::optional<results::OutputFile> output;
  std::optional<results::SweepWriter> writer;
  SweepStart start;
  std::string out = opt.out;
  agreed(*rt, "before it started", [&] {
    if (!root) return;
    if (!opt.resume.empty()) {
      out = opt.resume;
      // The lock first: a sweep still writing this file refuses the resume before it is read.
      results::OutputRequest req;
      req.path = out;
      req.flag = "--resume";
      req.resume = true;
      output.emplace(req);
      const h5::File f = results::open_sweep(out);
      const std::string status = results::sweep_status(f);
      const auto version = f.attr_string("tool_version").value_or("");
      if (version != FP8MOE_VERSION) {
        fail("'", out, "' was written by fp8moe ", version, ", this is ", FP8MOE_VERSION,
             ": resume it with that version, or rerun the sweep");
      }
      files = files_from_text(f.attr_string("scenario_text").value_or(""), out);
      opt.only = f.attr_string("only").value_or("");
      opt.backend = f.attr_string("backend_override").value_or("");
      opt.save_blocks = f.attr_int("save_blocks").value_or(0) != 0;
      opt.save_tensors = f.attr_int("save_tensors").value_or(0) != 0;
      opt.shard_index = static_cast<int>(f.attr_int("shard_index").value_or(0));
      opt.shard_count = static_cast<int>(f.attr_int("shard_count").value_or(1));
      const std::string mesh = f.attr_string("mesh_runtime").value_or("fake");
      if (mesh != opt.mesh) {
        fail("'", out, "' was swept with --mesh ", mesh, ": resume it with --mesh ", mesh,
             " so that every case runs on the same kind of mesh");
      }
      if (!opt.quiet) fmt::print(stderr, "# resuming '{}' (status {})\n", out, status);
    } else {
      files = load_files(opt.files);
      if (out.empty()) out = default_out(opt.files);
    }
    start.text = stored_text(files);
    start.only = opt.only;
    start.backend = opt.backend;
    start.out = out;
    start.save_blocks = opt.save_blocks;
    start.save_tensors = opt.save_tensors;
    start.shard_index = opt.shard_index;
    start.shard_count = opt.shard_count;
  });
  if (rt->launch_world() > 1) {
    start = SweepStart::unpack(rt->broadcast(root ? start.pack() : std::string()));
    if (!root) {
      files = files_from_text(start.text, start.out);
      opt.only = start.only;
      opt.backend = start.backend;
      opt.save_blocks = start.save_blocks;
      opt.save_tensors = start.save_tensors;
      opt.shard_index = start.shard_index;
      opt.shard_count = start.shard_count;
      out = start.out;
    }
  }

  // Everything that can be wrong with the input is found here, before any file is touched.
  scenarios::Expansion ex;
  std::vector<const Case*> runnable;
  std::size_t launch_rejected = 0, other_shards = 0;
  std::string launch_why;
  agreed(*rt, "before it started", [&] {
    ex = scenarios::expand(files, {opt.only, opt.backend, available_memory()});
    for (Case& c : ex.cases) {
      if (!c.rejected.empty()) continue;
      const std::string why = rt->cannot_run(Mesh::parse(c.mesh));
      if (why.empty()) continue;
      c.rejected = why;
      if (launch_why.empty()) launch_why = why;
      --ex.runnable;
      ++ex.rejected;
      ++launch_rejected;
    }
    if (ex.runnable == 0) {
      fail("no case to run: ", ex.cases.size(), " expanded, all rejected", opt.only.empty() ? "" : " or filtered by --only",
           launch_rejected ? fmt::format(" ({} because this --mesh {} launch cannot hold their mesh)", launch_rejected, opt.mesh)
                           : std::string(),
           " (fp8moe list shows why)");
    }
    check_memory(ex.cases, rt->kind());
    std::size_t position = 0;
    for (const Case& c : ex.cases) {
      if (!c.rejected.empty()) continue;
      if (static_cast<int>(position++ % static_cast<std::size_t>(opt.shard_count)) == opt.shard_index) {
        runnable.push_back(&c);
      } else {
        ++other_shards;
      }
    }
    if (runnable.empty()) {
      fail("--shard ", opt.shard_index, "/", opt.shard_count, ": this slice holds none of the ", ex.runnable,
           " runnable cases; use fewer shards");
    }
  });
  if (root && launch_rejected) {
    fmt::print(stderr, "# fp8moe sweep: {} cases rejected because this --mesh {} launch cannot hold their mesh, e.g.: {}\n",
               launch_rejected, opt.mesh, launch_why);
  }

  agreed(*rt, "before it started", [&] {
    if (!root) return;
    if (!opt.resume.empty()) {
      writer.emplace(results::SweepWriter::resume(output->path()));
      std::map<std::int64_t, std::string> keys;
      for (const Case* c : runnable) keys[c->id] = c->key();
      for (const CaseRow& r : writer->rows()) {
        if (!keys.count(r.case_id) || keys[r.case_id] != r.case_key) {
          writer->fail_quietly("resume: the committed cases do not match the stored scenario text");
          fail("'", out, "': committed case ", r.case_id, " (", r.case_key,
               ") is not what its scenario text expands to: the file cannot be resumed; rerun the sweep");
        }
        done[r.case_id].push_back(r);
      }
    } else {
      // Checked and locked before anything is touched (results/output_file.hpp).
      results::OutputRequest req;
      req.path = out;
      req.force = opt.force;
      req.make_parent = true;  // results/runs/ of the default --out
      req.exists_fix = cat("finish it with --resume ", out, ", overwrite it with --force, or choose --out");
      output.emplace(req);
      results::Attrs attrs = provenance();
      for (auto& kv : rt->provenance()) attrs.push_back(std::move(kv));
      std::string paths, seeds;
      std::set<std::uint64_t> seed_set;
      for (const auto& f : files) paths += (paths.empty() ? "" : ",") + f.path;
      for (const Case* c : runnable) seed_set.insert(c->seed);
      for (auto s : seed_set) seeds += (seeds.empty() ? "" : ",") + std::to_string(s);
      attrs.emplace_back("argv", opt.argv);
      attrs.emplace_back("scenario_text", stored_text(files));
      attrs.emplace_back("scenario_files", paths);
      attrs.emplace_back("only", opt.only);
      attrs.emplace_back("backend_override", opt.backend);
      attrs.emplace_back("seed", seeds);
      attrs.emplace_back("started_utc", utc_now());
      try {
        writer.emplace(results::SweepWriter::create(output->tmp(), attrs, static_cast<std::int64_t>(runnable.size())));
        writer->file().set_attr("save_blocks", opt.save_blocks ? 1 : 0);
        writer->file().set_attr("save_tensors", opt.save_tensors ? 1 : 0);
        writer->file().set_attr("shard_index", opt.shard_index);
        writer->file().set_attr("shard_count", opt.shard_count);
        writer->file().flush();
      } catch (const Error&) {
        if (writer) writer->file().abandon();  // PATH.tmp is removed with the lock
        throw;
      }
      output->publish();  // the header is complete: PATH.tmp becomes PATH, the open file follows
      writer->moved_to(output->path());
    }
    for (const auto& kv : done) start.done.insert(kv.first);
  });
  if (rt->launch_world() > 1) {
    // Which cases the file already holds: the other processes skip them too.
    SweepStart ids;
    ids.done = start.done;
    start.done = SweepStart::unpack(rt->broadcast(root ? ids.pack() : std::string())).done;
  } else {
    for (const auto& kv : done) start.done.insert(kv.first);
  }

  // The table: widths from every runnable case's row template.
  std::vector<CaseRow> hints;
  double total_flops = 0;
  for (const Case* c : runnable) {
    CaseRow h = case_row_template(*c);
    h.tensor = "grad_W";
    h.status = "error";
    hints.push_back(std::move(h));
    total_flops += c->flops();
  }
  const StreamTable table(sweep_columns_for(hints), hints);
  if (root) {
    fmt::print("# fp8moe sweep: {} cases ({} to run{}, {} rejected: fp8moe list shows why) on --mesh {} -> {}\n",
               ex.cases.size(), runnable.size(),
               other_shards ? fmt::format(" in shard {}/{}, {} in the others", opt.shard_index, opt.shard_count,
                                          other_shards)
                            : std::string(),
               ex.rejected, opt.mesh, out);
    fmt::print("{}\n", table.header());
    std::fflush(stdout);
  }

  SignalGuard guard;
  Progress progress(total_flops, runnable.size(), opt.quiet);
  std::size_t n_done = 0;
  double flops_done = 0;
  int ok = 0, failed = 0, errors = 0;
  double min_db = std::numeric_limits<double>::infinity(), run_ms = 0, write_ms = 0;
  const bool keep = opt.save_blocks || opt.save_tensors;
  try {
    for (const Case* c : runnable) {
      std::vector<CaseRow> rows;
      if (start.done.count(c->id)) {
        if (root) rows = done.at(c->id);
      } else {
        progress.update(flops_done, n_done, c->scenario + " " + c->mesh);
        CaseResult r = run_case(*c, keep, rt.get());
        run_ms += r.time_ms;
        if (root) {
          const auto w0 = std::chrono::steady_clock::now();
          // Room for the whole case before its first byte: a full disk stops here, cleanly.
          const bool groups = (opt.save_blocks || opt.save_tensors) && !r.error;
          if (groups) {
            writer->reserve(saved_bytes_bound(r.tensors, opt.save_blocks, opt.save_tensors) + writer->commit_bytes(r.rows),
                            cat("case ", c->id));
          }
          if (opt.save_blocks && !r.error) save_blocks(writer->case_group("blocks", c->id), *c, r.tensors);
          if (opt.save_tensors && !r.error) save_tensors(writer->case_group("tensors", c->id), *c, r.tensors);
          writer->commit(r.rows);
          write_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
          rows = std::move(r.rows);
        }
      }
      ++n_done;
      flops_done += c->flops();
      progress.clear_line();
      for (const CaseRow& row : rows) {
        fmt::print("{}\n", table.row(row));
        if (row.status == "ok") {
          ++ok;
          if (row.sqnr_db < min_db) min_db = row.sqnr_db;
        } else if (row.status == "fail") {
          ++failed;
        } else {
          ++errors;
        }
      }
      std::fflush(stdout);
      progress.update(flops_done, n_done, c->scenario);
      // Every process stops after the same case (a launcher forwards a signal to each at its own time).
      if (rt->any(g_signal.load() != 0) && n_done < runnable.size()) {
        const std::string why = fmt::format("interrupted by signal {} after {} of {} cases: fp8moe sweep --resume {}{}",
                                            g_signal.load(), n_done, runnable.size(), out,
                                            opt.mesh == "fake" ? "" : " --mesh " + opt.mesh);
        if (root) {
          writer->reserve(4096, "the finish time");
          writer->file().set_attr("finished_utc", utc_now());
          writer->finish("interrupted", why);
          progress.clear_line();
          fmt::print(stderr, "fp8moe sweep: {}\n", why);
        }
        return 130;
      }
    }
    rt->barrier();
    if (root) {
      writer->reserve(4096, "the finish time");
      writer->file().set_attr("finished_utc", utc_now());
      writer->finish("complete", "");
    }
  } catch (const IoError& e) {
    // A full disk: the file keeps every committed case (the store reserved before each write).
    if (writer) writer->fail_quietly(e.what());
    const std::string msg = e.what();
    if (msg.find("--resume") != std::string::npos) throw;
    fail_io(msg, "; the file keeps its committed cases: free space, then fp8moe sweep --resume ", out);
  } catch (const std::exception& e) {
    if (writer) writer->fail_quietly(e.what());
    throw;
  }
  if (!root) return 0;
  const double total_s = progress.elapsed();
  fmt::print("# summary: {} cases run, {} rows: {} ok, {} fail, {} error; lowest sqnr_hp64 {} dB; {} ({:.1f}% writing "
             "results); {}\n",
             runnable.size(), ok + failed + errors, ok, failed, errors, format_db(min_db), duration(total_s),
             run_ms + write_ms > 0 ? 100.0 * write_ms / (run_ms + write_ms) : 0.0, out);
  return failed + errors > 0 ? 1 : 0;
}

}  // namespace fp8moe::sim
