// Helpers shared by the tests: temporary directories, comparing tensors with messages that
// name the index and both values, and reading the world communicator in MPI tests.
#pragma once
#include <ATen/ATen.h>

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

// "" when every element of actual is within rtol*|expected| + atol of expected; otherwise a
// message naming the first bad flat index, both values, and the max difference.
std::string compare_tensors(const at::Tensor& actual, const at::Tensor& expected, double rtol,
                            double atol = 0.0);

// Rank 0's `path` on every rank of `world` (e.g. one shared temporary directory). Collective.
std::string rank0_path(Comm& world, const std::string& path);

// Runs a shell command, returns its exit status; its stdout+stderr go to *output if given.
int run_command(const std::string& command, std::string* output = nullptr);

}  // namespace strata::testing
