#pragma once
// Helpers of the bad-input suite (test_cli_badinput.cpp), beyond support/cli_files.hpp: file snapshots
// compared byte for byte, a tmpfs of a given size (root only), a sweep in the background.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "support/cli_files.hpp"
#include "support/run_cli.hpp"

namespace fp8moe::test {

namespace fs = std::filesystem;

inline std::optional<std::string> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The file type at `path` without following a link: 'f' regular, 'd' directory, 'c' character
// device, 'p' FIFO, 's' socket, 'l' symlink, '-' nothing.
inline char kind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return '-';
  if (S_ISREG(st.st_mode)) return 'f';
  if (S_ISDIR(st.st_mode)) return 'd';
  if (S_ISCHR(st.st_mode)) return 'c';
  if (S_ISFIFO(st.st_mode)) return 'p';
  if (S_ISSOCK(st.st_mode)) return 's';
  if (S_ISLNK(st.st_mode)) return 'l';
  return '?';
}

// Nothing of fp8moe's left next to `path`: no PATH.tmp, PATH.lock or the old PATH.partial.
inline void check_no_leftovers(const std::string& path) {
  CAPTURE(path);
  CHECK(kind(path + ".tmp") == '-');
  CHECK(kind(path + ".lock") == '-');
  CHECK(kind(path + ".partial") == '-');
}

// A tmpfs of `size` (e.g. "400k") mounted at a fresh folder, unmounted at scope exit. mounted()
// is false where mounting is not permitted (not root, a container without CAP_SYS_ADMIN).
class Tmpfs {
 public:
  Tmpfs(const std::string& name, const std::string& size, bool read_only = false) : dir_(scratch(name)) {
    fs::create_directories(dir_);
    const std::string opts = "size=" + size;
    ok_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", read_only ? MS_RDONLY : 0, opts.c_str()) == 0;
  }
  ~Tmpfs() {
    if (ok_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return ok_; }
  bool resize(const std::string& size) {
    const std::string opts = "size=" + size;
    return ::mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT, opts.c_str()) == 0;
  }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
  bool ok_ = false;
};

// `fp8moe ARGS` started in the background, its output in `log`; wait() returns the exit status.
class Background {
 public:
  Background(const std::string& args, const std::string& log) {
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const std::string cmd = "exec " + quote(bin_path()) + " " + args + " > " + quote(log) + " 2>&1";
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

// Polls until `pred` holds or `seconds` pass.
template <class F>
bool wait_for(F&& pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

}  // namespace fp8moe::test
