// `fp8moe sweep` and `fp8moe list`: scenario files in, a table and an HDF5 file out
// (sim/sweep/sweep.hpp does the work).
#include <fmt/core.h>

#include "reference/error.hpp"
#include "sim/cli/command.hpp"
#include "sim/comm/runtime.hpp"
#include "sim/sweep/merge.hpp"
#include "sim/sweep/sweep.hpp"

#include <tuple>

namespace fp8moe::cli {

namespace {
std::string join_args(const char* cmd, const Args& args) {
  std::string s = std::string("fp8moe ") + cmd;
  for (const std::string& a : args) s += " " + a;
  return s;
}
}  // namespace

namespace {

// --runtime, or its old name --mesh: in run and in scenario files `mesh` is a mesh's shape
// (dp=2,tp=2), so sweep's choice of how ranks run has its own name now. The old spelling keeps
// working with a note; a shape given to it is named as such.
std::string runtime_flag(const po::variables_map& vm) {
  if (vm.count("runtime") && vm.count("mesh")) {
    fail("--runtime ", vm["runtime"].as<std::string>(), " and --mesh ", vm["mesh"].as<std::string>(),
         ": give one (--mesh is the old name of --runtime)");
  }
  std::string kind = "fake";
  if (vm.count("runtime")) kind = vm["runtime"].as<std::string>();
  if (vm.count("mesh")) {
    kind = vm["mesh"].as<std::string>();
    if (kind.find('=') != std::string::npos) {
      fail("--mesh ", kind, " is a mesh shape: a sweep takes its meshes from the scenario files (mesh = ", kind,
           "); --runtime chooses how the ranks run (fake, fake-gpu, mpi or nccl)");
    }
    fmt::print(stderr, "# note: sweep --mesh {} is now spelled --runtime {} (--mesh names a mesh's shape elsewhere)\n",
               kind, kind);
  }
  (void)sim::parse_mesh_kind(kind);  // a bad kind is named before anything runs
  return kind;
}

}  // namespace

int cmd_sweep(const Args& args) {
  po::options_description desc("fp8moe sweep options");
  desc.add_options()("help,h", "show this help")
      ("files", po::value<std::vector<std::string>>()->multitoken(), "scenario files (default: the built-in default)")
      ("only", po::value<std::string>()->default_value(""), "run only cases whose scenario name matches this glob, "
       "or whose case key contains it (e.g. 'tp_*' or 'mesh=dp=2,tp=2')")
      ("backend", po::value<std::string>()->default_value(""), "run every case on this backend (reference, cuda-simt, cuda-cublaslt, cuda-cutlass; cuda-fastest: cuda-cutlass where built, else cuda-cublaslt)")
      ("out,o", po::value<std::string>()->default_value(""), "result file (default results/runs/<first file's name>.h5)")
      ("resume", po::value<std::string>(), "finish an interrupted or killed sweep FILE: runs only its missing cases")
      ("force", po::bool_switch(), "overwrite an existing --out file")
      ("save-blocks", po::bool_switch(), "write per-tile error maps and per-block scale stats under /blocks")
      ("save-tensors", po::bool_switch(), "write every case's inputs and outputs under /tensors")
      ("quiet,q", po::bool_switch(), "no progress on stderr")
      ("threads", po::value<int>()->default_value(0), "OpenMP threads (0 = all cores)")
      ("runtime", po::value<std::string>(), "how ranks run: fake (every rank in this process; the default), "
       "fake-gpu (every rank on one GPU), mpi (one process per rank under mpirun), nccl (one GPU per rank)")
      ("mesh", po::value<std::string>(), "the old name of --runtime (still read; a mesh's shape is the scenario key mesh)")
      ("timeout", po::value<double>()->default_value(600), "seconds a collective may take before the run ends (mpi, nccl)")
      ("shard", po::value<std::string>(), "run the I-th of N disjoint slices of the cases, I/N (fp8moe merge joins them)");
  po::positional_options_description pos;
  pos.add("files", -1);
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: fp8moe sweep [FILE...] [--only PATTERN] [--backend B] [--out FILE] [--resume FILE] "
             "[--save-blocks] [--save-tensors] [--threads N] [--runtime fake|fake-gpu|mpi|nccl] [--shard I/N]", &pos)) {
    return 0;
  }
  set_threads(vm["threads"].as<int>());
  sim::SweepOptions o;
  if (vm.count("files")) o.files = vm["files"].as<std::vector<std::string>>();
  o.settings.only = vm["only"].as<std::string>();
  o.settings.backend = vm["backend"].as<std::string>();
  o.out = vm["out"].as<std::string>();
  if (vm.count("resume")) {
    o.resume = vm["resume"].as<std::string>();
    if (!o.files.empty() || !o.settings.only.empty() || !o.settings.backend.empty() || !o.out.empty() || vm["save-blocks"].as<bool>() ||
        vm["save-tensors"].as<bool>() || vm.count("shard")) {
      fail("--resume takes its scenarios and options from the file: give it alone (with --threads, --quiet, --runtime ",
           "and --timeout at most)");
    }
  }
  o.force = vm["force"].as<bool>();
  o.settings.save_blocks = vm["save-blocks"].as<bool>();
  o.settings.save_tensors = vm["save-tensors"].as<bool>();
  o.quiet = vm["quiet"].as<bool>();
  o.argv = join_args("sweep", args);
  o.mesh = runtime_flag(vm);
  o.timeout_s = vm["timeout"].as<double>();
  if (!(o.timeout_s > 0)) fail("--timeout must be > 0 seconds, got ", o.timeout_s);
  if (vm.count("shard")) std::tie(o.settings.shard_index, o.settings.shard_count) = sim::parse_shard(vm["shard"].as<std::string>());
  return sim::run_sweep(o);
}

int cmd_merge(const Args& args) {
  po::options_description desc("fp8moe merge options");
  desc.add_options()("help,h", "show this help")
      ("files", po::value<std::vector<std::string>>()->multitoken(), "OUT then the shard files")
      ("force", po::bool_switch(), "overwrite an existing OUT")
      ("allow-missing", po::bool_switch(), "merge even when some shards of the sweep are not given");
  po::positional_options_description pos;
  pos.add("files", -1);
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: fp8moe merge OUT.h5 IN.h5... [--force] [--allow-missing]", &pos)) return 0;
  auto files = vm.count("files") ? vm["files"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (files.size() < 2) fail("give the output and at least one input: fp8moe merge OUT.h5 shard0.h5 shard1.h5 ...");
  const std::string out = files.front();
  files.erase(files.begin());
  const std::int64_t rows = sim::merge_sweeps(out, files, vm["force"].as<bool>(), vm["allow-missing"].as<bool>());
  fmt::print("# merged {} files, {} rows -> {}\n", files.size(), rows, out);
  return 0;
}

int cmd_list(const Args& args) {
  po::options_description desc("fp8moe list options");
  desc.add_options()("help,h", "show this help")
      ("files", po::value<std::vector<std::string>>()->multitoken(), "scenario files (default: the built-in default)")
      ("only", po::value<std::string>()->default_value(""), "as for sweep")
      ("backend", po::value<std::string>()->default_value(""), "as for sweep")
      ("status", po::value<std::string>()->default_value(""), "only the rows to run (run) or the rejected ones (rejected)")
      ("reason", po::value<std::string>()->default_value(""), "only rejected rows whose reason contains this text")
      ("format", po::value<std::string>()->default_value("table"), "table, markdown, csv or json");
  po::positional_options_description pos;
  pos.add("files", -1);
  po::variables_map vm;
  if (!parse(args, desc, vm,
             "usage: fp8moe list [FILE...] [--only PATTERN] [--backend B] [--status run|rejected] [--reason TEXT] "
             "[--format table|markdown|csv|json]",
             &pos)) {
    return 0;
  }
  std::vector<std::string> files;
  if (vm.count("files")) files = vm["files"].as<std::vector<std::string>>();
  sim::ListOptions opt;
  opt.only = vm["only"].as<std::string>();
  opt.backend = vm["backend"].as<std::string>();
  opt.status = vm["status"].as<std::string>();
  opt.reason = vm["reason"].as<std::string>();
  opt.format = vm["format"].as<std::string>();
  return sim::list_cases(files, opt);
}

}  // namespace fp8moe::cli
