#pragma once
// Where every fp8moe command writes a file (issue 16 defects 1, 2, 5): one place that checks the
// output path, locks it against a second writer, builds the file as PATH.tmp and renames it into
// place. sweep --out/--resume, merge OUT, gemm --save, quantize --out and bench --h5 all use it.
//
// The rules, in the order they are checked (each refusal is one Error line, exit 2, nothing
// touched):
//  - an existing PATH that is not a regular file (directory, device node, FIFO, socket, dangling
//    symlink) is refused always, --force or not: a rename would replace /dev/null with a file;
//  - an existing regular PATH needs --force (or is the file --resume reopens);
//  - a symlink is followed only where the file would be overwritten or resumed anyway (--force,
//    --resume) and only to a regular file: the target is replaced and the link kept, as a shell's
//    `> link` does; without --force a link is refused like any existing file;
//  - PATH must not be one of the command's inputs (same st_dev and st_ino, whatever the names);
//  - a missing directory is an error unless the caller creates it (sweep's results/runs/);
//  - PATH.lock is taken (flock, holder's pid, host and start time written in it) before PATH.tmp
//    or PATH is touched: a second writer is refused naming the holder.
// Write errors after that (a full disk) are IoError (exit 1) naming the file and errno's text.
#include <cstdint>
#include <string>
#include <vector>

namespace fp8moe::results {

struct OutputRequest {
  std::string path;
  std::string flag = "--out";      // how the user gave the path, for messages ("--save", "OUT")
  bool force = false;              // overwrite an existing regular file
  bool resume = false;             // the file must exist: it is updated in place, never replaced
  bool make_parent = false;        // create a missing parent directory
  std::vector<std::string> inputs; // files the command reads: PATH may be none of them
  // The fix named when PATH exists without --force.
  std::string exists_fix = "overwrite it with --force, or choose another path";
};

class OutputFile {
 public:
  // Checks the request and takes the lock (Error, exit 2, with nothing touched, when refused).
  explicit OutputFile(const OutputRequest& r);
  // Removes PATH.tmp if it was never published, then releases and removes PATH.lock.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  const std::string& path() const { return path_; }  // the file written (a symlink's target)
  const std::string& tmp() const { return tmp_; }    // PATH.tmp, where a new file is built
  // fsyncs PATH.tmp, renames it over PATH (refusing once more a PATH that is not a regular file)
  // and fsyncs the directory. IoError naming the file and errno's text on failure.
  void publish();
  bool published() const { return published_; }

 private:
  std::string path_, tmp_, lock_;
  int lock_fd_ = -1;
  bool published_ = false;
};

// Reserves disk blocks so that `path` can grow to `bytes` without a write failing (fallocate with
// FALLOC_FL_KEEP_SIZE: the size HDF5 sees is unchanged, holes below `bytes` are filled too).
// HDF5 leaves a file whose metadata is half-written when a flush fails on a full disk (the
// committed rows became unreadable in issue 16's probe), so the store reserves before it writes
// and stops cleanly when the reservation fails. Returns 0, or errno (ENOSPC, EDQUOT, ...); a file
// system without fallocate reserves nothing and returns 0 (HDF5's own errors are the fallback).
int try_reserve_space(const std::string& path, std::int64_t bytes);

// "No space left on device (errno 28)": errno's text for messages.
std::string errno_message(int e);

// The size of `path` in bytes (st_size), for reservations.
std::int64_t file_size(const std::string& path);

}  // namespace fp8moe::results
