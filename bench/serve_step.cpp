// The cost of one serving engine step on this process's threads: GPT::forward_paged over S
// sequences that each decode one token at a context of L positions (the paged KV cache of
// serve/, 16-token blocks), for several S. A step's time is about fixed + S x per-sequence;
// continuous batching gains over static batching as much as the fixed part dominates, so this
// splits the two (least squares over S). Prints one JSON object per S: median seconds per step
// over the rounds and its range, then one with the fit, then one with the bound a decode step
// at batch 1 cannot beat: the time to stream every weight once at the machine's memory
// bandwidth, measured here as the fastest of several summing passes over a buffer of
// --stream-mb MiB (far larger than the caches) on the same threads; and the same bound taken
// beside the steps: in every round a summing pass over the model's own weight tensors, and the
// median over rounds of the batch-1 step over that round's pass.
//
// --dtype bf16 serves the model in bfloat16 (weights and KV cache), as `strata serve --set
// train.precision=bf16` does.
//
//   serve_step [--threads 2] [--d-model 256] [--layers 4] [--heads 8] [--vocab 256]
//              [--context 48] [--sequences 1,2,4,8,16] [--steps 50] [--rounds 5]
//              [--dtype fp32|bf16] [--stream-mb 1024]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "strata/core/memory.h"
#include "strata/model/gpt.h"
#include "strata/serve/block_pool.h"

namespace {

using Clock = std::chrono::steady_clock;
using strata::kBlockTokens;

// One decode step's batch: sequence s holds positions [0, context] in blocks
// [s * blocks_each, (s + 1) * blocks_each) and writes position `context`.
strata::PagedBatch decode_batch(int64_t sequences, int64_t context, int64_t blocks_each,
                                strata::PagedKVCache& cache) {
  strata::PagedBatch batch;
  batch.cache = &cache;
  std::vector<int64_t> positions, write_slots;
  for (int64_t s = 0; s < sequences; ++s) {
    strata::PagedBatch::Sequence sequence;
    sequence.first_row = s;
    sequence.rows = 1;
    const int64_t first_slot = s * blocks_each * kBlockTokens;
    sequence.context_slots = at::arange(first_slot, first_slot + context + 1, at::kLong);
    batch.sequences.push_back(sequence);
    positions.push_back(context);
    write_slots.push_back(first_slot + context);
  }
  batch.positions = at::tensor(positions, at::kLong);
  batch.write_slots = at::tensor(write_slots, at::kLong);
  return batch;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Bytes per second that a read of a `megabytes` MiB float32 buffer runs at on the current
// threads: the fastest of `passes` reductions (at::sum streams its input once, vectorized and
// split over the threads). The buffer is written first, so its pages are backed.
double read_bandwidth(int64_t megabytes, int passes) {
  const at::Tensor buffer = at::ones({megabytes * 1024 * 1024 / 4}, at::kFloat);
  double best = 0;
  for (int pass = 0; pass <= passes; ++pass) {
    const auto start = Clock::now();
    const double total = buffer.sum().item<double>();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (total <= 0) return 0;  // keeps the sum from being optimized away
    if (pass > 0) best = std::max(best, static_cast<double>(buffer.nbytes()) / seconds);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Cost of a serving engine step against the sequences it decodes"};
  int threads = 2, rounds = 5, steps = 50;
  int64_t d_model = 256, layers = 4, heads = 8, vocab = 256, context = 48;
  std::vector<int64_t> counts = {1, 2, 4, 8, 16};
  app.add_option("--threads", threads)->check(CLI::PositiveNumber);
  app.add_option("--d-model", d_model)->check(CLI::PositiveNumber);
  app.add_option("--layers", layers)->check(CLI::PositiveNumber);
  app.add_option("--heads", heads)->check(CLI::PositiveNumber);
  app.add_option("--vocab", vocab)->check(CLI::PositiveNumber);
  app.add_option("--context", context, "Positions cached before the step")
      ->check(CLI::PositiveNumber);
  app.add_option("--sequences", counts, "Sequences per step")->delimiter(',');
  app.add_option("--steps", steps, "Steps timed per round")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds)->check(CLI::PositiveNumber);
  std::string dtype_name = "fp32";
  app.add_option("--dtype", dtype_name)->check(CLI::IsMember({"fp32", "bf16"}));
  int64_t stream_mb = 1024;
  app.add_option("--stream-mb", stream_mb, "MiB read to measure the memory bandwidth")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  // strata's allocator, as every strata command runs with (cli/main.cpp): the weights, the KV
  // cache and the bandwidth probe's buffer on transparent huge pages. Without it a decode step
  // streamed its weights through 4 KiB pages (AMD EPYC VM: 17 ms against 9-10 ms).
  strata::install_cpu_allocator();
  const at::ScalarType dtype = dtype_name == "bf16" ? at::kBFloat16 : at::kFloat;
  at::set_num_threads(threads);

  strata::ModelConfig config;
  config.vocab_size = vocab;
  config.d_model = d_model;
  config.n_layers = layers;
  config.n_heads = heads;
  config.seq_len = std::max<int64_t>(256, context + 1);
  config.pos = strata::PositionEncoding::learned;
  config.norm = strata::Norm::layernorm;
  config.activation = strata::Activation::gelu;
  config.tie_embeddings = true;
  strata::GPT model(config, 1, dtype);

  const int64_t largest = *std::max_element(counts.begin(), counts.end());
  const int64_t blocks_each = strata::blocks_for(context + 1);
  strata::PagedKVCache cache;
  for (int64_t layer = 0; layer < layers; ++layer) {
    cache.keys.push_back(
        at::randn({largest * blocks_each * kBlockTokens, model.local_kv_heads(), config.head_dim()})
            .to(dtype));
    cache.values.push_back(at::randn_like(cache.keys.back()));
  }

  // Every parameter is read once per step (a tied head reads the embedding table whole).
  double weight_bytes = 0;
  for (const auto& parameter : model.parameters()) {
    weight_bytes += static_cast<double>(parameter.value.nbytes());
  }
  // The same weights read by a summing pass, tensor by tensor on the same threads, in every
  // round next to its steps: the bound of a step that reads them once, taken at the same
  // moment (this VM's bandwidth drifts by 2x within minutes, so a bound probed apart from the
  // steps can say more about the drift than about the step).
  auto read_weights = [&] {
    const auto start = Clock::now();
    double total = 0;
    for (const auto& parameter : model.parameters()) total += parameter.value.sum().item<double>();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    return std::isfinite(total) ? elapsed : elapsed * 2;  // keeps the sums from being dropped
  };
  std::vector<double> weight_reads;

  // Rounds alternate over S, so that a change in the machine's load touches every S alike.
  std::vector<std::vector<double>> seconds(counts.size());
  for (int round = 0; round <= rounds; ++round) {
    for (size_t c = 0; c < counts.size(); ++c) {
      const int64_t S = counts[c];
      const strata::PagedBatch batch = decode_batch(S, context, blocks_each, cache);
      const at::Tensor tokens = at::randint(vocab, {1, S}, at::kLong);
      const at::Tensor rows = at::arange(S, at::kLong);
      const auto start = Clock::now();
      for (int step = 0; step < steps; ++step) model.forward_paged(tokens, batch, rows);
      const double per_step = std::chrono::duration<double>(Clock::now() - start).count() / steps;
      if (round > 0) seconds[c].push_back(per_step);  // round 0 warms up
    }
    const double read = read_weights();
    if (round > 0) weight_reads.push_back(read);
  }

  // Least squares of step time = fixed + S x per_sequence over the medians.
  double sum_s = 0, sum_t = 0, sum_ss = 0, sum_st = 0;
  const double n = static_cast<double>(counts.size());
  for (size_t c = 0; c < counts.size(); ++c) {
    const double S = static_cast<double>(counts[c]), t = median(seconds[c]);
    std::printf(
        "{\"sequences\": %lld, \"context\": %lld, \"step_s\": %.6g, \"min_s\": %.6g, "
        "\"max_s\": %.6g}\n",
        static_cast<long long>(counts[c]), static_cast<long long>(context), t,
        *std::min_element(seconds[c].begin(), seconds[c].end()),
        *std::max_element(seconds[c].begin(), seconds[c].end()));
    sum_s += S;
    sum_t += t;
    sum_ss += S * S;
    sum_st += S * t;
  }
  if (counts.size() >= 2) {  // a line needs two batch sizes
    const double per_sequence = (n * sum_st - sum_s * sum_t) / (n * sum_ss - sum_s * sum_s);
    const double fixed = (sum_t - per_sequence * sum_s) / n;
    std::printf(
        "{\"fixed_s\": %.6g, \"per_sequence_s\": %.6g, \"fixed_over_per_sequence\": %.3g}\n", fixed,
        per_sequence, fixed / per_sequence);
  }

  const double bandwidth = read_bandwidth(stream_mb, 5);
  const auto one = std::find(counts.begin(), counts.end(), 1);
  const double step_one = one == counts.end() ? 0 : median(seconds[one - counts.begin()]);
  // Per round, the batch-1 step over that round's read of the weights; their median.
  std::vector<double> over_read;
  if (one != counts.end()) {
    const std::vector<double>& steps_one = seconds[one - counts.begin()];
    for (size_t r = 0; r < weight_reads.size(); ++r)
      over_read.push_back(steps_one[r] / weight_reads[r]);
  }
  std::printf(
      "{\"weight_bytes\": %.6g, \"bandwidth_bytes_per_s\": %.6g, \"weight_stream_s\": %.6g, "
      "\"step_1_over_stream\": %.4g, \"weight_read_s\": %.6g, \"step_1_over_weight_read\": "
      "%.4g}\n",
      weight_bytes, bandwidth, weight_bytes / bandwidth,
      step_one > 0 ? step_one / (weight_bytes / bandwidth) : 0.0, median(weight_reads),
      over_read.empty() ? 0.0 : median(over_read));
  return 0;
}
