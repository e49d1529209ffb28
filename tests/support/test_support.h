// Helpers shared by the tests: temporary directories, environment variables set for a scope,
// comparing tensors with messages that name the index and both values, sharing rank 0's path
// in MPI tests, and running a shell command.
#pragma once
#include <ATen/ATen.h>

#include <optional>
#include <set>
#include <string>

namespace strata {
class Comm;
}

namespace strata::testing {

// A fresh empty directory under $TMPDIR (or /tmp), removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "strata-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The directory tests give the trainer for its logs (log.dir): one per test process, removed
// when the process exits.
const std::string& log_dir();

// Sets (or, with nullptr, unsets) an environment variable; restores it on destruction.
class ScopedEnv {
 public:
  ScopedEnv(const std::string& name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// "" when every element of actual is within rtol*|expected| + atol of expected; otherwise a
// message naming the first bad flat index, both values, and the max difference.
std::string compare_tensors(const at::Tensor& actual, const at::Tensor& expected, double rtol,
                            double atol = 0.0);

// Rank 0's `path` on every rank of `world` (e.g. one shared temporary directory). Collective.
std::string rank0_path(Comm& world, const std::string& path);

// A file's bytes ("" when it cannot be read), and a file replaced by `bytes`.
std::string read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::string& bytes);

// The flags of the first processor in /proc/cpuinfo (empty where there is none).
std::set<std::string> cpuinfo_flags();

// A TCP socket connected to 127.0.0.1:port, or -1 (the caller closes it).
int connect_to_loopback(int port);

// Runs a shell command, returns its exit status; its stdout+stderr go to *output if given.
int run_command(const std::string& command, std::string* output = nullptr);

}  // namespace strata::testing
