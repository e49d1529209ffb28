// Implementation of the shared test helpers.
#include "test_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "strata/dist/comm.h"

namespace strata::testing {

TempDir::TempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = buffer.data();
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

const std::string& log_dir() {
  static const TempDir dir("strata-test-log");
  return dir.path();
}

ScopedEnv::ScopedEnv(const std::string& name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name.c_str())) old_ = old;
  if (value != nullptr) {
    ::setenv(name.c_str(), value, 1);
  } else {
    ::unsetenv(name.c_str());
  }
}

ScopedEnv::~ScopedEnv() {
  if (old_) {
    ::setenv(name_.c_str(), old_->c_str(), 1);
  } else {
    ::unsetenv(name_.c_str());
  }
}

std::string compare_tensors(const at::Tensor& actual, const at::Tensor& expected, double rtol,
                            double atol) {
  if (actual.sizes() != expected.sizes()) {
    std::ostringstream out;
    out << "shape " << actual.sizes() << " != expected " << expected.sizes();
    return out.str();
  }
  auto a = actual.detach().to(at::kDouble).contiguous().view(-1);
  auto e = expected.detach().to(at::kDouble).contiguous().view(-1);
  auto diff = (a - e).abs();
  auto bound = e.abs() * rtol + atol;
  auto bad = (diff > bound).logical_or(a.isnan().logical_xor(e.isnan()));
  if (!bad.any().item<bool>()) return "";
  int64_t index = bad.nonzero()[0][0].item<int64_t>();
  std::ostringstream out;
  out.precision(10);
  out << "at flat index " << index << ": actual " << a[index].item<double>() << " vs expected "
      << e[index].item<double>() << " (max abs diff " << diff.max().item<double>() << ", "
      << bad.sum().item<int64_t>() << " of " << a.numel() << " elements out of tolerance)";
  return out.str();
}

int run_command(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  std::array<char, 4096> buffer;
  std::string text;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) text.append(buffer.data(), n);
  int status = pclose(pipe);
  if (output) *output = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string rank0_path(Comm& world, const std::string& path) {
  at::Tensor length = at::tensor({static_cast<int64_t>(path.size())}, at::kLong);
  world.broadcast(length, 0);
  at::Tensor bytes = at::zeros({length.item<int64_t>()}, at::kByte);
  if (world.rank() == 0) std::memcpy(bytes.data_ptr(), path.data(), path.size());
  world.broadcast(bytes, 0);
  return std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel());
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

int connect_to_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::set<std::string> cpuinfo_flags() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string word; words >> word;) flags.insert(word);
    return flags;
  }
  return {};
}

}  // namespace strata::testing
