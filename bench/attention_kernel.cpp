// Causal attention alone, forward + backward: the blockwise kernel (kernels/attention.h)
// against eager attention as the model's eager path computes it (matmul, mask, softmax,
// matmul, GQA by repeating kv heads), alternating (order swapped every round), on this
// process's threads. Prints one JSON object per sequence length: median seconds of each over
// the rounds, the median and range of the per-round speedups (eager time / blockwise time),
// the blockwise kernel's rate in GFLOP/s, and the bytes each holds between forward and
// backward (counted by the strata allocator). The rate counts the causal work only: 7 products
// (2 forward, 5 backward) of 2 * head_dim FLOPs for each of the T (T + 1) / 2 visible
// (query, key) pairs of each batch row and query head; eager computes the masked half too.
//
//   attention_kernel [--threads 2] [--batch 8] [--heads 12] [--kv-heads 12] [--head-dim 64]
//                    [--seq 256,1024,4096] [--rounds 5] [--dtype float32|bfloat16]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "strata/core/memory.h"
#include "strata/kernels/attention.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int threads = 2, rounds = 5;
  int64_t batch = 8, heads = 12, kv_heads = 12, head_dim = 64;
  std::vector<int64_t> seq = {256, 1024, 4096};
  at::ScalarType dtype = at::kFloat;
};

at::Tensor eager(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  const int64_t group = q.size(1) / k.size(1), T = q.size(2);
  at::Tensor keys = group > 1 ? k.repeat_interleave(group, 1) : k;
  at::Tensor values = group > 1 ? v.repeat_interleave(group, 1) : v;
  at::Tensor mask = at::ones({T, T}, at::kBool).triu(1);
  at::Tensor scores = at::matmul(q, keys.transpose(-2, -1)) * scale;
  scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), values);
}

struct Timing {
  double seconds;
  int64_t saved_bytes;  // held between forward and backward
};

template <typename Attention>
Timing time_one(const Options& o, int64_t T, Attention attention) {
  at::manual_seed(1);
  auto make = [&](int64_t heads) {
    return at::randn({o.batch, heads, T, o.head_dim}).to(o.dtype).requires_grad_(true);
  };
  at::Tensor q = make(o.heads), k = make(o.kv_heads), v = make(o.kv_heads);
  at::Tensor dout = at::randn({o.batch, o.heads, T, o.head_dim}).to(o.dtype);
  const double scale = 1.0 / std::sqrt(static_cast<double>(o.head_dim));
  const auto start = Clock::now();
  const int64_t before = strata::tracked_bytes_now();
  at::Tensor out = attention(q, k, v, scale);
  const int64_t saved = strata::tracked_bytes_now() - before;
  out.backward(dout);
  return {std::chrono::duration<double>(Clock::now() - start).count(), saved};
}

std::vector<int64_t> parse_list(const char* text) {
  std::vector<int64_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) values.push_back(std::stoll(item));
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--threads")
      o.threads = std::atoi(value);
    else if (flag == "--batch")
      o.batch = std::atoll(value);
    else if (flag == "--heads")
      o.heads = std::atoll(value);
    else if (flag == "--kv-heads")
      o.kv_heads = std::atoll(value);
    else if (flag == "--head-dim")
      o.head_dim = std::atoll(value);
    else if (flag == "--seq")
      o.seq = parse_list(value);
    else if (flag == "--rounds")
      o.rounds = std::atoi(value);
    else if (flag == "--dtype")
      o.dtype = std::strcmp(value, "bfloat16") == 0 ? at::kBFloat16 : at::kFloat;
    else {
      std::fprintf(stderr, "attention_kernel: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  strata::install_cpu_allocator();
  at::set_num_threads(o.threads);
  auto blockwise = [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
    return strata::blockwise_attention(q, k, v, scale);
  };
  for (int64_t T : o.seq) {
    std::vector<double> blockwise_s, eager_s;
    Timing b{}, e{};
    time_one(o, T, blockwise);  // warm-up
    for (int round = 0; round < o.rounds; ++round) {
      if (round % 2 == 0) {
        b = time_one(o, T, blockwise);
        e = time_one(o, T, eager);
      } else {
        e = time_one(o, T, eager);
        b = time_one(o, T, blockwise);
      }
      blockwise_s.push_back(b.seconds);
      eager_s.push_back(e.seconds);
    }
    auto median = [](std::vector<double> x) {
      std::sort(x.begin(), x.end());
      return x[x.size() / 2];
    };
    std::vector<double> ratios;  // per round: eager time / blockwise time
    for (size_t r = 0; r < eager_s.size(); ++r) ratios.push_back(eager_s[r] / blockwise_s[r]);
    const double mb = median(blockwise_s), me = median(eager_s);
    const double causal_flops = 7.0 * 2 * o.head_dim * (T * (T + 1) / 2.0) * o.batch * o.heads;
    std::printf(
        "{\"seq\": %lld, \"batch\": %lld, \"heads\": %lld, \"kv_heads\": %lld, \"head_dim\": %lld, "
        "\"threads\": %d, \"dtype\": \"%s\", \"blockwise_s\": %.4f, \"eager_s\": %.4f, "
        "\"speedup_median\": %.3f, \"speedup_min\": %.3f, \"speedup_max\": %.3f, "
        "\"blockwise_gflops\": %.1f, "
        "\"blockwise_saved_bytes\": %lld, \"eager_saved_bytes\": %lld}\n",
        static_cast<long long>(T), static_cast<long long>(o.batch), static_cast<long long>(o.heads),
        static_cast<long long>(o.kv_heads), static_cast<long long>(o.head_dim), o.threads,
        o.dtype == at::kFloat ? "float32" : "bfloat16", mb, me, median(ratios),
        *std::min_element(ratios.begin(), ratios.end()),
        *std::max_element(ratios.begin(), ratios.end()), causal_flops / mb / 1e9,
        static_cast<long long>(b.saved_bytes), static_cast<long long>(e.saved_bytes));
    std::fflush(stdout);
  }
  return 0;
}
