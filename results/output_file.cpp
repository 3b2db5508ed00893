// The one way fp8moe writes a file: checked path, lock, PATH.tmp, fsync, rename (output_file.hpp).
#include "results/output_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "reference/error.hpp"

namespace fp8moe::results {

namespace fs = std::filesystem;

namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

std::string errno_text(int e) { return cat(std::strerror(e), " (errno ", e, ")"); }

std::string utc_now_text() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string read_holder(int fd) {
  char buf[256];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// Opens and flocks `lock`, retrying when the holder removed the file between our open and our
// flock (we would hold a lock on an unlinked inode that a third writer no longer sees).
int acquire_lock(const std::string& lock, const OutputRequest& r) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
      const int e = errno;
      fail("cannot write next to ", r.flag, " '", r.path, "' (creating the lock file '", lock, "'): ", errno_text(e),
           ": choose a directory you can write");
    }
    struct stat a {};
    if (::fstat(fd, &a) != 0 || !S_ISREG(a.st_mode)) {
      ::close(fd);
      fail("the lock file '", lock, "' of ", r.flag, " '", r.path, "' is ", kind_of(a.st_mode),
           ": remove it, or choose another path");
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      const std::string holder = read_holder(fd);
      ::close(fd);
      if (e == EWOULDBLOCK) {
        fail("'", r.path, "' is being written by another fp8moe (", holder.empty() ? "holder unknown" : holder,
             "; lock '", lock, "'): wait for it to finish, or choose another ", r.flag);
      }
      fail("cannot lock '", lock, "': ", errno_text(e));
    }
    struct stat b {};
    if (::stat(lock.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
      char host[256] = "unknown";
      ::gethostname(host, sizeof host - 1);
      const std::string me = cat("pid ", ::getpid(), " on ", host, " since ", utc_now_text(), "\n");
      if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, me.data(), me.size(), 0) < 0) {
        // The holder's name is a courtesy for the refusal message; the flock is the lock.
      }
      return fd;
    }
    ::close(fd);
  }
  fail("cannot lock '", lock, "': it keeps being replaced by other processes");
}

// What is at the path now: its target (a symbolic link to a regular file resolves to it), whether
// it exists, and its stat. Refuses what fp8moe never writes over, and an existing file unless
// --force or --resume.
struct Existing {
  std::string target;
  bool exists = false;
  struct stat st {};
};

Existing check_existing(const OutputRequest& r) {
  Existing x{r.path, false, {}};
  x.exists = ::lstat(r.path.c_str(), &x.st) == 0;
  if (!x.exists && errno != ENOENT) fail(r.flag, " '", r.path, "': ", errno_text(errno), ": choose another path");
  if (!x.exists) return x;
  if (S_ISLNK(x.st.st_mode)) {
    struct stat t {};
    if (::stat(r.path.c_str(), &t) != 0) {
      fail(r.flag, " '", r.path, "' is a symbolic link to nothing: remove the link, or choose another path");
    }
    std::error_code ec;
    const std::string real = fs::canonical(r.path, ec).string();
    if (!S_ISREG(t.st_mode)) {
      fail(r.flag, " '", r.path, "' is a symbolic link to ", kind_of(t.st_mode), " ('", real,
           "'), not to a regular file: fp8moe writes only regular files; choose another path");
    }
    if (!r.force && !r.resume) fail("'", r.path, "' exists (a symbolic link to '", real, "'): ", r.exists_fix);
    x.target = real;  // --force and --resume write the link's target; the link stays
    x.st = t;
  } else if (!S_ISREG(x.st.st_mode)) {
    fail(r.flag, " '", r.path, "' is ", kind_of(x.st.st_mode),
         ", not a regular file: fp8moe writes only regular files and never replaces anything else, even with "
         "--force; choose a file path",
         S_ISDIR(x.st.st_mode) ? cat(" such as '", (fs::path(r.path) / "result.h5").string(), "'") : std::string());
  } else if (!r.force && !r.resume) {
    fail("'", r.path, "' exists: ", r.exists_fix);
  }
  for (const std::string& in : r.inputs) {
    struct stat i {};
    if (::stat(in.c_str(), &i) == 0 && i.st_dev == x.st.st_dev && i.st_ino == x.st.st_ino) {
      fail(r.flag, " '", r.path, "' is the input file '", in, "' itself: write the result to another path");
    }
  }
  return x;
}

// The directory the file goes in: it exists (or is made, with make_parent) and is a directory.
void check_parent(const std::string& target, const OutputRequest& r) {
  fs::path parent = fs::path(target).parent_path();
  if (parent.empty()) parent = ".";
  struct stat d {};
  if (::stat(parent.c_str(), &d) != 0) {
    const int e = errno;
    if (e != ENOENT || !r.make_parent) {
      fail("the directory '", parent.string(), "' of ", r.flag, " '", r.path, "' ",
           e == ENOENT ? std::string("does not exist") : errno_text(e), ": create it, or choose another path");
    }
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) fail("cannot create the directory '", parent.string(), "' of ", r.flag, " '", r.path, "': ", ec.message());
  } else if (!S_ISDIR(d.st_mode)) {
    fail("'", parent.string(), "' (the directory of ", r.flag, " '", r.path, "') is ", kind_of(d.st_mode),
         ": choose another path");
  }
}

}  // namespace

OutputFile::OutputFile(const OutputRequest& r) {
  if (r.path.empty()) fail(r.flag, " is empty: give a file path");
  const Existing x = check_existing(r);
  const std::string& target = x.target;
  const bool exists = x.exists;
  check_parent(target, r);
  path_ = target;
  tmp_ = r.resume ? std::string() : target + ".tmp";  // resumed in place: no temporary file
  lock_ = target + ".lock";
  lock_fd_ = acquire_lock(lock_, r);
  // Under the lock (a writer still creating PATH is named as its holder, not as a missing file).
  // The destructor does not run when the constructor throws: release here.
  const auto refuse = [&](const std::string& why) {
    ::unlink(lock_.c_str());
    ::close(lock_fd_);
    lock_fd_ = -1;
    fail(why);
  };
  if (!exists && r.resume) refuse(cat("no such file '", r.path, "'"));
  struct stat t {};
  // A PATH.tmp left by a killed writer is ours to replace; anything else there is not.
  if (!tmp_.empty() && ::lstat(tmp_.c_str(), &t) == 0 && !S_ISREG(t.st_mode)) {
    refuse(cat("'", tmp_, "' (where ", r.flag, " '", r.path, "' is built) is ", kind_of(t.st_mode),
               ": remove it, or choose another path"));
  }
}

OutputFile::~OutputFile() {
  struct stat t {};
  if (!published_ && !tmp_.empty() && ::lstat(tmp_.c_str(), &t) == 0 && S_ISREG(t.st_mode)) ::unlink(tmp_.c_str());
  if (lock_fd_ >= 0) {
    ::unlink(lock_.c_str());  // while still holding it: a waiting writer re-checks the inode
    ::close(lock_fd_);
  }
}

void OutputFile::publish() {
  if (tmp_.empty() || published_) fail("internal: publish() of '", path_, "' without a temporary file");
  const int fd = ::open(tmp_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    fail_io("cannot write '", path_, "': fsync of '", tmp_, "' failed: ", errno_text(e));
  }
  ::close(fd);
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    fail("'", path_, "' became ", kind_of(st.st_mode), " while fp8moe wrote it: not replaced; choose another path");
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    fail_io("cannot rename '", tmp_, "' to '", path_, "': ", errno_text(e));
  }
  published_ = true;
  fs::path parent = fs::path(path_).parent_path();
  if (parent.empty()) parent = ".";
  const int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // the rename itself survives a power cut; a file system that cannot is no error
    ::close(dfd);
  }
}

int try_reserve_space(const std::string& path, std::int64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int rc = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes));
  const int e = rc == 0 ? 0 : errno;
  ::close(fd);
  // No fallocate on this file system: nothing reserved, HDF5's own errors are the fallback.
  if (e == EOPNOTSUPP || e == ENOSYS) return 0;
  return e;
}

std::int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail_io("cannot read the size of '", path, "': ", errno_text(errno));
  return static_cast<std::int64_t>(st.st_size);
}

std::string errno_message(int e) { return errno_text(e); }

}  // namespace fp8moe::results
