// Bad input, one TEST_CASE per class (issue 16): each asserts the exit code, the key words of the
// one-line message, and what is left on disk (nothing, or the untouched original byte for byte).
// Run as subprocesses of the built fp8moe (FP8MOE_TEST_BIN=path runs them against another build).
// The full-disk and read-only cases mount a tmpfs: where that is not permitted they exit 77,
// which CTest shows as Skipped.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

#include <cstdlib>
#include <regex>

#include "badinput_support.hpp"
#include "results/h5.hpp"
#include "results/store.hpp"

using namespace fp8moe::test;
using fp8moe::test::quote;

namespace {

constexpr const char* kTiny =
    "[scenario.op]\nlevel = op\nmesh = tp=2\noffs = 129,384,500\nn = 256\nk = 256\npass = fwd\n"
    "placements = direct\nmode = torchao-emulated\n";
const std::string kSmall = FP8MOE_SWEEP_SCENARIOS "/small.ini";

Run cli(const std::string& cmd, const std::string& args) { return run_cli(cmd, args); }

// A complete sweep of kTiny, made once per process; copy it before changing it.
const std::string& tiny_run() {
  static const std::string path = [] {
    const std::string ini = write_file("tiny.ini", kTiny);
    const std::string p = scratch("tiny.h5");
    const Run r = cli("sweep", quote(ini) + " --out " + quote(p) + " -q");
    INFO(r.output);
    REQUIRE(r.rc == 0);
    return p;
  }();
  return path;
}

std::string copy_of(const std::string& src, const std::string& name) {
  const std::string p = scratch(name);
  fs::copy_file(src, p);
  return p;
}

// The commands that write a file, with OUT where the file goes (--force given: only the kind of
// path may stop them).
std::vector<std::pair<std::string, std::string>> writers(const std::string& out) {
  const std::string in = write_file("q_in.ini", kTiny);  // any readable file: refused before it is read
  return {
      {"sweep", quote(in) + " -q --force --out " + quote(out)},
      {"merge", quote(out) + " " + quote(tiny_run()) + " --force"},
      {"gemm", "--experts 2 --tokens 256 --n 128 --k 128 --force --save " + quote(out)},
      {"quantize", "--in " + quote(tiny_run()) + " --dataset cases --recipe 1x128 --force --out " + quote(out)},
      {"bench", "--force --h5 " + quote(out)},
  };
}

// Every writer refuses `out` (which is not a regular file) with exit 2 and one line naming it,
// and leaves it as it was.
void all_writers_refuse(const std::string& out, char want_kind, const std::string& words) {
  for (const auto& [cmd, args] : writers(out)) {
    const Run r = cli(cmd, args);
    CAPTURE(cmd);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(r.lines() == 1);
    CHECK(has(r, out));
    CHECK(has(r, words));
    CHECK(kind(out) == want_kind);
    check_no_leftovers(out);
  }
}

int make_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

}  // namespace

TEST_CASE("outputs that are not regular files are refused by every writer, --force or not") {
  const std::string dir = scratch("outdir");
  fs::create_directories(dir + "/inside");
  all_writers_refuse(dir, 'd', "is a directory, not a regular file");
  CHECK(kind(dir + "/inside") == 'd');

  const std::string fifo = scratch("out.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  all_writers_refuse(fifo, 'p', "is a FIFO, not a regular file");

  const std::string sock = scratch("out.sock");
  const int fd = make_socket(sock);
  all_writers_refuse(sock, 's', "is a socket, not a regular file");
  ::close(fd);

  const std::string to_dir = scratch("link_to_dir");
  fs::create_directory_symlink(dir, to_dir);
  all_writers_refuse(to_dir, 'l', "is a symbolic link to a directory");
  const std::string dangling = scratch("dangling");
  fs::create_symlink(work_dir() + "/no_such_target", dangling);
  all_writers_refuse(dangling, 'l', "is a symbolic link to nothing");
  CHECK(kind(work_dir() + "/no_such_target") == '-');

  // A device node: first our own copy of /dev/null (1,3), so that a regression replaces that one;
  // only once it is refused, /dev/null itself, which must stay a character device.
  const std::string dev = scratch("null_copy");
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    all_writers_refuse(dev, 'c', "is a character device, not a regular file");
    REQUIRE(kind(dev) == 'c');
  }
  const Run r = cli("sweep", quote(write_file("null.ini", kTiny)) + " -q --force --out /dev/null");
  CAPTURE(r.output);
  CHECK(r.rc == 2);
  CHECK(has(r, "'/dev/null' is a character device"));
  CHECK(kind("/dev/null") == 'c');
}

TEST_CASE("a symlink to a result is refused without --force, and with it the target is replaced, the link kept") {
  const std::string target = copy_of(tiny_run(), "target.h5");
  const std::string link = scratch("link.h5");
  fs::create_symlink(target, link);
  const std::string ini = write_file("link.ini", kTiny);
  const auto before = bytes_of(target);
  const Run no = cli("sweep", quote(ini) + " -q --out " + quote(link));
  CAPTURE(no.output);
  CHECK(no.rc == 2);
  CHECK(has(no, "exists (a symbolic link to '"));
  CHECK(bytes_of(target) == before);
  const Run yes = cli("sweep", quote(ini) + " -q --force --out " + quote(link));
  CAPTURE(yes.output);
  CHECK(yes.rc == 0);
  CHECK(kind(link) == 'l');
  CHECK(kind(target) == 'f');
  CHECK(fp8moe::results::sweep_status(fp8moe::results::open_sweep(link)) == "complete");
  check_no_leftovers(target);
}

TEST_CASE("a second writer of a file a sweep is writing is refused naming the holder, and the first finishes") {
  const std::string out = scratch("busy.h5");
  Background first(quote("sweep") + " " + quote(kSmall) + " --only op -q --out " + quote(out), scratch("busy.log"));
  // Stop the first sweep as soon as its lock names it, wherever it is in its work.
  REQUIRE(wait_for([&] { return bytes_of(out + ".lock").value_or("").find("pid ") != std::string::npos; }, 60));
  ::kill(first.pid(), SIGSTOP);
  const auto file = bytes_of(out), tmp = bytes_of(out + ".tmp");
  const std::string holder = "pid " + std::to_string(first.pid());
  const std::string ini = write_file("busy.ini", kTiny);
  for (const auto& [cmd, args] : std::vector<std::pair<std::string, std::string>>{
           {"sweep", quote(ini) + " -q --force --out " + quote(out)},
           {"sweep", "-q --resume " + quote(out)},
           {"merge", quote(out) + " " + quote(tiny_run()) + " --force"}}) {
    const Run r = cli(cmd, args);
    CAPTURE(args);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(r.lines() == 1);
    CHECK(has(r, "is being written by another fp8moe (" + holder));
    CHECK(bytes_of(out) == file);  // neither PATH nor the first writer's PATH.tmp was touched
    CHECK(bytes_of(out + ".tmp") == tmp);
  }
  ::kill(first.pid(), SIGCONT);
  CHECK(first.wait() == 0);
  const Run rep = cli("report", quote(out));
  CAPTURE(rep.output);
  CHECK(rep.rc == 0);
  CHECK(has(rep, "status complete"));
  check_no_leftovers(out);
}

TEST_CASE("a full disk: exit 1 naming the file and the cause, committed cases kept, --resume finishes") {
  Tmpfs disk("full", "400k");
  if (!disk.mounted()) {
    MESSAGE("cannot mount a tmpfs here (not root?): skipped");
    std::exit(77);
  }
  const std::string out = disk.file("x.h5");
  const std::string args = quote(kSmall) + " --only op --save-blocks -q";
  const Run r = cli("sweep", args + " --out " + quote(out));
  CAPTURE(r.output);
  CHECK(r.rc == 1);  // not 139: no crash in HDF5's exit handler
  CHECK(has(r, "fp8moe sweep: error: cannot write case "));
  CHECK(has(r, "'" + out + "': No space left on device"));
  CHECK(has(r, "fp8moe sweep --resume " + out));
  check_no_leftovers(out);
  // Every committed case reads back, by fp8moe's reader and by report, whatever the status.
  const auto rows = fp8moe::results::read_cases(fp8moe::results::open_sweep(out));
  CHECK(!rows.empty());
  const Run rep = cli("report", quote(out));
  CAPTURE(rep.output);
  CHECK(rep.rc == 0);
  CHECK(has(rep, std::to_string(rows.size()) + " rows from "));
  // Room again: --resume finishes it, equal to a sweep that never ran out.
  REQUIRE(disk.resize("16m"));
  const Run res = cli("sweep", "-q --resume " + quote(out));
  CAPTURE(res.output);
  CHECK(res.rc == 0);
  const std::string whole = scratch("whole.h5");
  REQUIRE(cli("sweep", args + " --out " + quote(whole)).rc == 0);
  const Run cmp = cli("compare", quote(whole) + " " + quote(out) + " --identical");
  CAPTURE(cmp.output);
  CHECK(cmp.rc == 0);
  // merge onto a full disk: the same kind of error, and no OUT under any name.
  Tmpfs small("full_merge", "64k");
  REQUIRE(small.mounted());
  const std::string merged = small.file("m.h5");
  const Run m = cli("merge", quote(merged) + " " + quote(whole));
  CAPTURE(m.output);
  CHECK(m.rc == 1);
  CHECK(m.lines() == 1);
  CHECK(has(m, "'" + merged + "': No space left on device"));
  CHECK(kind(merged) == '-');
  check_no_leftovers(merged);
}

TEST_CASE("a damaged status or row count: the rows still read, a corrupt count is named, not an internal error") {
  const std::string f = copy_of(tiny_run(), "no_status.h5");
  { fp8moe::h5::File::open(f, true).set_attr("status", std::int64_t{7}); }  // not a string: unreadable
  const Run rep = cli("report", quote(f));
  CAPTURE(rep.output);
  CHECK(rep.rc == 0);
  CHECK(has(rep, "status incomplete"));
  const Run gate = cli("gate", quote(f));  // reads the rows, and fails an incomplete sweep as such
  CAPTURE(gate.output);
  CHECK(gate.rc == 1);
  CHECK(has(gate, "FAIL status: the sweep is incomplete (3 of 3 cases)"));
  const Run m = cli("merge", quote(scratch("m.h5")) + " " + quote(f));
  CHECK(m.rc == 2);
  CHECK(has(m, "is incomplete, not complete: finish it with fp8moe sweep --resume"));
  const Run res = cli("sweep", "-q --resume " + quote(f));
  CAPTURE(res.output);
  CHECK(res.rc == 0);
  CHECK(has(cli("report", quote(f)), "status complete"));

  for (const std::int64_t bad : {std::int64_t{-5}, std::int64_t{1000000000}}) {
    const std::string g = copy_of(tiny_run(), "bad_count.h5");
    { fp8moe::h5::File::open(g, true).set_attr("rows_committed", bad); }
    const auto before = bytes_of(g);
    const Run r = cli("sweep", "-q --resume " + quote(g));
    CAPTURE(bad);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(r.lines() == 1);
    CHECK(has(r, "'" + g + "' is a corrupt fp8moe sweep file"));
    CHECK(bytes_of(g) == before);
    check_no_leftovers(g);
  }
}

TEST_CASE("not an fp8moe file, a truncated and a byte-flipped HDF5 file: exit 2 naming it, the file untouched") {
  const std::string junk = write_file("junk.h5", "not an HDF5 file at all\n");
  const auto whole = bytes_of(tiny_run()).value();
  const std::string truncated = write_file("truncated.h5", whole.substr(0, whole.size() / 2));
  std::string flipped_bytes = whole;
  for (std::size_t i = 0; i < 64 && i < flipped_bytes.size(); ++i) flipped_bytes[i] = static_cast<char>(~flipped_bytes[i]);
  const std::string flipped = write_file("flipped.h5", flipped_bytes);
  const std::string foreign = scratch("foreign.h5");
  { fp8moe::h5::File::create(foreign).set_attr("format", "something-else"); }
  for (const std::string& file : {junk, truncated, flipped, foreign}) {
    const auto before = bytes_of(file);
    for (const std::string& cmd : {"report " + quote(file), "gate " + quote(file), "sweep -q --resume " + quote(file),
                                   "compare " + quote(file) + " " + quote(tiny_run()),
                                   "merge " + quote(scratch("m.h5")) + " " + quote(file)}) {
      const auto sp = cmd.find(' ');
      const Run r = cli(cmd.substr(0, sp), cmd.substr(sp + 1));
      CAPTURE(cmd);
      CAPTURE(r.output);
      CHECK(r.rc == 2);
      CHECK(r.lines() == 1);
      CHECK(has(r, file));
      CHECK(bytes_of(file) == before);
      check_no_leftovers(file);
    }
  }
}

TEST_CASE("read-only and missing directories: exit 2 naming the directory, nothing created") {
  const std::string ini = write_file("dirs.ini", kTiny);
  const std::string missing = work_dir() + "/no_such_dir";
  for (const auto& [cmd, args] : writers(missing + "/x.h5")) {
    if (cmd == "sweep") continue;  // sweep creates its --out folder (results/runs/ by default)
    const Run r = cli(cmd, args);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(has(r, "the directory '" + missing + "' of "));
    CHECK(has(r, "does not exist"));
    CHECK(kind(missing) == '-');
  }
  const Run made = cli("sweep", quote(ini) + " -q --out " + quote(missing + "/new/x.h5"));
  CHECK(made.rc == 0);
  CHECK(kind(missing + "/new/x.h5") == 'f');

  // Read-only: a read-only tmpfs (root ignores directory modes); elsewhere a 0555 folder.
  Tmpfs ro("readonly", "64k", /*read_only=*/true);
  std::string dir = work_dir() + "/readonly";
  if (!ro.mounted()) {
    if (::geteuid() == 0) {
      MESSAGE("root cannot make a read-only folder without mounting: skipped");
      std::exit(77);
    }
    REQUIRE(::chmod(dir.c_str(), 0555) == 0);
  }
  for (const auto& [cmd, args] : writers(dir + "/x.h5")) {
    const Run r = cli(cmd, args);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(r.lines() == 1);
    CHECK(has(r, "cannot write next to "));
    CHECK(std::regex_search(r.output, std::regex("Read-only file system|Permission denied")));
    CHECK(fs::is_empty(dir));
  }
}

TEST_CASE("exit codes and silent acceptance: fake-gpu, --threads, duplicate sections, --lr, --threshold, overwrites") {
  const std::string ini = write_file("codes.ini", kTiny);
  const Run info = cli("info", "");
  if (!has(info, "sm_")) {  // no CUDA device: refused up front like --backend cuda-*, no file of error rows
    const std::string out = scratch("fake_gpu.h5");
    const Run r = cli("sweep", quote(ini) + " -q --runtime fake-gpu --out " + quote(out));
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(has(r, "--runtime fake-gpu needs a CUDA device"));
    CHECK(kind(out) == '-');
  }
  for (const std::string& cmd : {"sweep " + quote(ini) + " --out " + quote(scratch("t.h5")), std::string("gemm"),
                                 std::string("run --level op --mesh tp=2 --pass fwd --lhs R --rhs R")}) {
    const auto sp = cmd.find(' ');
    const Run r = cli(cmd.substr(0, sp), (sp == std::string::npos ? "" : cmd.substr(sp + 1)) + " --threads 100000");
    CAPTURE(cmd);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(has(r, "--threads 100000: give 1 to 4096"));
  }
  const std::string dup = write_file("dup.ini", std::string(kTiny) + "\n# again\n[scenario.op]\nseed = 2\n");
  const Run d = cli("list", quote(dup));
  CAPTURE(d.output);
  CHECK(d.rc == 2);
  CHECK(has(d, "dup.ini:12: section [scenario.op] given twice (lines 1 and 12)"));
  for (const char* lr : {"-1", "nan", "inf"}) {
    const Run r = cli("run", std::string("--level layer --mesh dp=2 --plan dp --lr ") + lr);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(has(r, "the SGD learning rate must be a finite number >= 0"));
  }
  for (const char* thr : {"-1", "nan"}) {
    const Run r = cli("compare", quote(tiny_run()) + " " + quote(tiny_run()) + " --threshold " + thr);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(has(r, "--threshold"));
  }
  // gemm --save and quantize --out: never over an existing file without --force, never over the
  // input itself (by inode: another name of the same file too).
  const std::string in = scratch("in.h5");
  REQUIRE(cli("gemm", "--experts 2 --tokens 256 --n 128 --k 128 --save " + quote(in)).rc == 0);
  const std::string alias = scratch("alias.h5");
  fs::create_hard_link(in, alias);
  const auto before = bytes_of(in);
  const std::string gemm_in = "--inputs " + quote(in) + " --modes bf16 --save ";
  const std::string q_in = "--in " + quote(in) + " --dataset A --recipe 1x128 --out ";
  for (const auto& [cmd, args, words] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"gemm", "--experts 2 --tokens 256 --n 128 --k 128 --save " + quote(in), "exists: overwrite it with --force"},
           {"gemm", gemm_in + quote(in) + " --force", "is the input file"},
           {"gemm", gemm_in + quote(alias) + " --force", "is the input file"},
           {"quantize", q_in + quote(in), "exists: overwrite it with --force"},
           {"quantize", q_in + quote(alias) + " --force", "is the input file"}}) {
    const Run r = cli(cmd, args);
    CAPTURE(args);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(has(r, words));
    CHECK(bytes_of(in) == before);
    check_no_leftovers(in);
  }
}

TEST_CASE("messages: NUL bytes, byte-order marks, line numbers, a 10 MB line, the README's example") {
  const char nul_text[] = "[scenario.a]\nlevel = op\nmode = fp4\0junk\n";
  const Run nul = cli("list", quote(write_file("nul.ini", std::string(nul_text, sizeof nul_text - 1))));
  CAPTURE(nul.output);
  CHECK(nul.rc == 2);
  CHECK(has(nul, "nul.ini:3:11: a NUL byte"));
  CHECK(cli("list", quote(write_file("bom.ini", "\xEF\xBB\xBF" + std::string(kTiny)))).rc == 0);
  const Run bom = cli("list", quote(write_file("bom2.ini", std::string(kTiny) + "\xEF\xBB\xBF[scenario.b]\n")));
  CHECK(bom.rc == 2);
  CHECK(has(bom, "bom2.ini:10:1: a UTF-8 byte-order mark"));
  // An unknown key on line N, after comments, blank lines, CRLF lines, inline comments and a
  // line ending in a backslash (no continuation lines in this syntax).
  const std::vector<std::string> before_lines = {
      "# comment", "", "[scenario.a]", "  # indented comment", "level = op   # inline", "mesh = tp=2\r",
      "description = ends in a backslash \\", "\t", "n = 256 # [not.a.section]", "k = 256"};
  for (std::size_t n = 3; n <= before_lines.size(); ++n) {
    std::string text;
    for (std::size_t i = 0; i < n; ++i) text += before_lines[i] + "\n";
    text += "expets = 2\n";
    const Run r = cli("list", quote(write_file("lines.ini", text)));
    CAPTURE(text);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(has(r, "lines.ini:" + std::to_string(n + 1) + ": unknown key 'expets'"));
  }
  const Run big = cli("list", quote(write_file("big.ini", "[scenario.a]\nlevel = op\nmode = " + std::string(10000000, 'x') + "\n")));
  CHECK(big.rc == 2);
  CHECK(big.lines() == 1);
  CHECK(big.output.size() < 2000);
  CHECK(has(big, "big.ini:3: mode = "));
  CHECK(has(big, "...(10000001 bytes)"));
  // The syntax example of scenarios/README.md parses and expands.
  const std::string readme = bytes_of(FP8MOE_SOURCE_DIR "/scenarios/README.md").value_or("");
  const auto at = readme.find("```ini\n");
  REQUIRE(at != std::string::npos);
  const std::string block = readme.substr(at + 7, readme.find("```", at + 7) - at - 7);
  const Run ex = cli("list", quote(write_file("readme.ini", block)));
  CAPTURE(block);
  CAPTURE(ex.output);
  CHECK(ex.rc == 0);
  CHECK(has(ex, "to run"));
}
