// The counting CPU allocator: tensors and raw allocations are counted while alive, blocks keep
// the default 64-byte alignment, and c10's raw_allocate/raw_deallocate work through it (oneDNN's
// bfloat16 kernels allocate their scratch that way; before, they tripped an assertion).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "strata/core/memory.h"

namespace strata {
namespace {

TEST(Memory, CountsTensorsAndRawAllocationsWhileAlive) {
  install_cpu_allocator();
  ASSERT_TRUE(cpu_allocator_installed());
  const int64_t before = tracked_bytes_now();
  {
    at::Tensor t = at::empty({1000}, at::kFloat);
    EXPECT_EQ(tracked_bytes_now() - before, 4000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
  }
  EXPECT_EQ(tracked_bytes_now(), before);

  c10::Allocator* allocator = c10::GetCPUAllocator();
  void* raw = allocator->raw_allocate(777);
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(raw) % 64, 0u);
  EXPECT_EQ(tracked_bytes_now() - before, 777);
  allocator->raw_deallocate(raw);
  EXPECT_EQ(tracked_bytes_now(), before);

  reset_tracked_peak();
  { at::Tensor t = at::empty({2000}, at::kFloat); }
  EXPECT_GE(tracked_bytes_peak() - before, 8000);
}

// The VmFlags line of the mapping in /proc/self/smaps that holds address, or "" if none does.
std::string vm_flags_of(uintptr_t address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= address && address < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(Memory, LargeBlocksAreAdvisedOntoHugePages) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    GTEST_SKIP() << "this kernel has no transparent huge pages: the advice is refused";
  }
  install_cpu_allocator();
  const at::Tensor large = at::empty({3 * static_cast<int64_t>(kHugePageBytes) / 4}, at::kFloat);
  // The header sits in front of the data: the block, not the data, is on the boundary.
  const auto block = reinterpret_cast<uintptr_t>(large.data_ptr()) - 64;
  EXPECT_EQ(block % kHugePageBytes, 0u);
  const std::string large_flags = vm_flags_of(block);
  ASSERT_FALSE(large_flags.empty()) << "no mapping in /proc/self/smaps holds the block";
  EXPECT_NE(large_flags.find(" hg"), std::string::npos) << large_flags;  // MADV_HUGEPAGE
}

TEST(Memory, BFloat16MatmulRunsUnderTheAllocator) {
  install_cpu_allocator();
  const at::Tensor a = at::randn({64, 96}).to(at::kBFloat16);
  const at::Tensor b = at::randn({96, 32}).to(at::kBFloat16);
  const at::Tensor product = at::matmul(a, b);
  const at::Tensor expected = at::matmul(a.to(at::kFloat), b.to(at::kFloat));
  EXPECT_TRUE(at::allclose(product.to(at::kFloat), expected, 5e-2, 5e-1));
}

}  // namespace
}  // namespace strata
