#include "sim/sweep/merge.hpp"

#include <fmt/core.h>

#include <filesystem>
#include <optional>
#include <map>
#include <set>

#include "reference/error.hpp"
#include "results/output_file.hpp"
#include "results/store.hpp"
#include "sim/sweep/provenance.hpp"

namespace fp8moe::sim {
namespace {

// Root attributes that must agree between the shards of one sweep.
constexpr const char* kSameText[] = {"tool_version", "scenario_text", "only", "backend_override", "mesh_runtime"};
constexpr const char* kSameInt[] = {"schema_version", "save_blocks", "save_tensors", "shard_count"};
// Root attributes the merged file gets fresh.
const std::set<std::string> kFresh = {"format", "schema_version", "status", "status_message", "cases_total",
                                      "cases_done", "rows_committed", "shard_index", "shard_count", "finished_utc",
                                      "save_blocks", "save_tensors"};

struct Input {
  std::string path;
  h5::File file;
  std::vector<results::CaseRow> rows;
  std::int64_t shard = 0, shards = 1;
};

std::string text_attr(const h5::File& f, const char* name) { return f.attr_string(name).value_or(""); }
std::int64_t int_attr(const h5::File& f, const char* name, std::int64_t dflt) { return f.attr_int(name).value_or(dflt); }

// merge_sweeps in phases: open the inputs, check they are shards of one sweep, collect every case
// once, write the merged file.

// Each input, checked complete, with its shard and rows.
std::vector<Input> open_inputs(const std::vector<std::string>& paths) {
  std::vector<Input> in;
  for (const std::string& p : paths) {
    Input x{p, results::open_sweep(p), {}, 0, 1};
    const std::string status = results::sweep_status(x.file);
    if (status != "complete") {
      fail("'", p, "' is ", status.empty() ? "of unknown status" : status, ", not complete: finish it with fp8moe sweep --resume ",
           p, " before merging");
    }
    x.shard = int_attr(x.file, "shard_index", 0);
    x.shards = int_attr(x.file, "shard_count", 1);
    x.rows = results::read_cases(x.file);
    in.push_back(std::move(x));
  }
  return in;
}

// The inputs are shards of one sweep, each once; returns the shards missing (an error unless
// allowed).
std::vector<std::int64_t> check_shards(const std::vector<Input>& in, bool allow_missing) {
  const Input& first = in.front();
  for (const Input& x : in) {
    for (const char* a : kSameText) {
      if (text_attr(x.file, a) != text_attr(first.file, a)) {
        fail("'", x.path, "' and '", first.path, "' differ in ", a,
             ": they are not shards of one sweep (same scenario files, options and fp8moe version); merge only those");
      }
    }
    for (const char* a : kSameInt) {
      if (int_attr(x.file, a, -1) != int_attr(first.file, a, -1)) {
        fail("'", x.path, "' and '", first.path, "' differ in ", a, ": they are not shards of one sweep");
      }
    }
  }
  std::map<std::int64_t, const Input*> by_shard;
  for (const Input& x : in) {
    if (!by_shard.emplace(x.shard, &x).second) {
      fail("'", x.path, "' and '", by_shard[x.shard]->path, "' are both shard ", x.shard, "/", x.shards, ": give each shard once");
    }
  }
  std::vector<std::int64_t> missing;
  for (std::int64_t s = 0; s < first.shards; ++s) {
    if (!by_shard.count(s)) missing.push_back(s);
  }
  if (!missing.empty() && !allow_missing) {
    std::string m;
    for (auto s : missing) m += (m.empty() ? "" : ", ") + fmt::format("{}/{}", s, first.shards);
    fail("shards ", m, " are missing: run them (fp8moe sweep ... --shard I/N) or merge with --allow-missing");
  }
  return missing;
}

// Every case once, in case order, with the input holding it.
using CaseSlots = std::map<std::int64_t, std::pair<const Input*, std::vector<const results::CaseRow*>>>;
CaseSlots collect_cases(const std::vector<Input>& in) {
  CaseSlots cases;
  for (const Input& x : in) {
    for (const results::CaseRow& r : x.rows) {
      auto& slot = cases[r.case_id];
      if (slot.first && slot.first != &x) {
        fail("case ", r.case_id, " is in both '", slot.first->path, "' and '", x.path, "': they overlap; merge disjoint shards");
      }
      slot.first = &x;
      slot.second.push_back(&r);
    }
  }
  return cases;
}

// The first input's string provenance (less what the merge sets afresh), and the merge's own.
results::Attrs merged_attrs(const h5::File& first, const std::vector<std::string>& paths) {
  results::Attrs attrs;
  for (const std::string& name : first.attr_names()) {
    if (kFresh.count(name)) continue;
    try {
      if (auto v = first.attr_string(name)) attrs.emplace_back(name, *v);
    } catch (const Error&) {
      // not a string: the numeric provenance attributes are copied by copy_int_attrs
    }
  }
  std::string names;
  for (const std::string& p : paths) names += (names.empty() ? "" : ",") + p;
  attrs.emplace_back("merged_from", names);
  attrs.emplace_back("merged_utc", utc_now());
  return attrs;
}

void copy_int_attrs(const h5::File& first, results::SweepWriter& w, std::size_t inputs) {
  for (const std::string& name : first.attr_names()) {
    if (kFresh.count(name)) continue;
    try {
      (void)first.attr_string(name);
    } catch (const Error&) {
      if (auto i = first.attr_int(name)) w.file().set_attr(name, *i);
    }
  }
  w.file().set_attr("save_blocks", int_attr(first, "save_blocks", 0));
  w.file().set_attr("save_tensors", int_attr(first, "save_tensors", 0));
  w.file().set_attr("shard_index", 0);
  w.file().set_attr("shard_count", 1);
  w.file().set_attr("merged_shards", static_cast<std::int64_t>(inputs));
}

}  // namespace

std::int64_t merge_sweeps(const std::string& out, const std::vector<std::string>& paths, bool force,
                          bool allow_missing) {
  if (paths.empty()) fail("give the result files to merge: fp8moe merge OUT.h5 IN.h5...");
  results::OutputRequest req;
  req.path = out;
  req.flag = "OUT";
  req.force = force;
  req.inputs = paths;
  req.exists_fix = "overwrite it with --force, or choose another OUT";
  results::OutputFile output(req);  // checked and locked before anything is read or written
  const std::vector<Input> in = open_inputs(paths);
  const Input& first = in.front();
  const std::vector<std::int64_t> missing = check_shards(in, allow_missing);
  const CaseSlots cases = collect_cases(in);

  std::int64_t rows = 0;
  std::optional<results::SweepWriter> w;
  try {
    w.emplace(results::SweepWriter::create(output.tmp(), merged_attrs(first.file, paths), static_cast<std::int64_t>(cases.size())));
    w->file().set_name(output.path());  // messages name OUT, where the user looks
    // The merged file is at most its inputs together: reserve that up front, so a full disk is
    // one clear error before the copying starts.
    std::int64_t need = 0;
    for (const Input& x : in) need += results::file_size(x.path);
    w->reserve(need, "the merged file");
    copy_int_attrs(first.file, *w, in.size());
    for (const auto& [id, slot] : cases) {
      for (const char* kind : {"blocks", "tensors"}) {
        const std::string g = std::string("/") + kind + "/" + results::case_group_name(id);
        if (slot.first->file.exists(g.substr(1))) w->copy_group(slot.first->file, g);
      }
      std::vector<results::CaseRow> rs;
      for (const results::CaseRow* r : slot.second) rs.push_back(*r);
      rows += static_cast<std::int64_t>(rs.size());
      w->commit(rs);
    }
    w->file().set_attr("finished_utc", utc_now());
    w->finish("complete", missing.empty() ? "" : fmt::format("merged without {} of {} shards", missing.size(), first.shards));
    output.publish();
  } catch (const Error& e) {
    // OUT.tmp is removed when `output` goes: no half file under any name. The messages of the
    // store speak of --resume, which a merge does not have.
    if (w) w->file().abandon();
    const std::string msg = e.what();
    const auto cut = msg.find("; the file keeps");
    if (dynamic_cast<const IoError*>(&e)) fail_io(msg.substr(0, cut), ": free space, then merge again");
    throw;
  }
  return rows;
}

}  // namespace fp8moe::sim
