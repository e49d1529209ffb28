// A bounded load generator for `strata serve` on loopback: a generated workload of mixed
// prompt and completion lengths, sent as streaming greedy requests by `concurrency` clients,
// either continuously (a client sends its next request as soon as one finishes) or in static
// batches (the next batch of `concurrency` requests starts when every request of the last
// has finished). Bounded by the request count and by --max-seconds. Prints one JSON line:
// throughput, time to first token and time per output token percentiles, request latency, and
// the server's KV utilization (tokens stored / tokens the used blocks reserve) sampled from
// /metrics while requests run.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "percentile.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Request {
  std::string prompt;
  int64_t max_tokens = 0;
};

struct Result {
  double ttft = 0, latency = 0, tpot = 0;
  int64_t tokens = 0;
  bool ok = false;
};

// Prompts of uniform length in [prompt_min, prompt_max]; completions short or, with
// probability long_share, long: the heavy tail of real completion lengths.
std::vector<Request> workload(int count, uint64_t seed, int prompt_min, int prompt_max,
                              int short_tokens, int long_tokens, double long_share) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int> prompt_length(prompt_min, prompt_max);
  std::uniform_int_distribution<int> letter('a', 'z');
  std::bernoulli_distribution is_long(long_share);
  std::vector<Request> requests(count);
  for (Request& request : requests) {
    const int length = prompt_length(random);
    for (int i = 0; i < length; ++i) request.prompt += static_cast<char>(letter(random));
    request.max_tokens = is_long(random) ? long_tokens : short_tokens;
  }
  return requests;
}

Result send(const std::string& host, int port, const Request& request) {
  httplib::Client client(host, port);
  client.set_read_timeout(std::chrono::seconds(600));
  httplib::Request http;
  http.method = "POST";
  http.path = "/v1/completions";
  http.set_header("Content-Type", "application/json");
  http.body = nlohmann::json({{"prompt", request.prompt},
                              {"max_tokens", request.max_tokens},
                              {"temperature", 0},
                              {"stream", true}})
                  .dump();
  Result result;
  const auto start = Clock::now();
  bool first = true;
  std::string body;
  http.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (first) {
      result.ttft = std::chrono::duration<double>(Clock::now() - start).count();
      first = false;
    }
    body.append(data, size);
    return true;
  };
  const auto response = client.send(http);
  result.latency = std::chrono::duration<double>(Clock::now() - start).count();
  result.ok = response && response->status == 200 && body.find("data: [DONE]") != std::string::npos;
  result.tokens = request.max_tokens;  // greedy, no stop strings: every token is generated
  if (result.tokens > 1) result.tpot = (result.latency - result.ttft) / (result.tokens - 1);
  return result;
}

// A gauge of the server's /metrics text (0 when absent).
double gauge(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? 0 : std::stod(text.substr(at + name.size() + 2));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Load generator for strata serve (bench/serve_load.sh runs it)"};
  std::string host = "127.0.0.1", mode = "continuous";
  int port = 8000, requests = 64, concurrency = 8, prompt_min = 8, prompt_max = 48;
  int short_tokens = 8, long_tokens = 96;
  double long_share = 0.2, max_seconds = 300;
  uint64_t seed = 1;
  app.add_option("--host", host);
  app.add_option("--port", port)->required();
  app.add_option("--mode", mode, "continuous or static")
      ->check(CLI::IsMember({"continuous", "static"}));
  app.add_option("--requests", requests, "Requests in the workload")->check(CLI::PositiveNumber);
  app.add_option("--concurrency", concurrency, "Clients (static: the batch size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--prompt-min", prompt_min)->check(CLI::PositiveNumber);
  app.add_option("--prompt-max", prompt_max)->check(CLI::PositiveNumber);
  app.add_option("--short-tokens", short_tokens)->check(CLI::PositiveNumber);
  app.add_option("--long-tokens", long_tokens)->check(CLI::PositiveNumber);
  app.add_option("--long-share", long_share, "Share of long completions")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--max-seconds", max_seconds, "Stop sending after this long")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "Workload seed");
  CLI11_PARSE(app, argc, argv);

  const std::vector<Request> work =
      workload(requests, seed, prompt_min, prompt_max, short_tokens, long_tokens, long_share);
  std::vector<Result> results(work.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> running{true};
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(max_seconds));

  // KV utilization while requests run: the mean over /metrics samples with blocks in use.
  double utilization_sum = 0;
  int utilization_samples = 0;
  std::thread sampler([&] {
    httplib::Client client(host, port);
    while (running) {
      auto metrics = client.Get("/metrics");
      if (metrics && metrics->status == 200) {
        const double used = gauge(metrics->body, "strata_kv_blocks_used");
        const double stored = gauge(metrics->body, "strata_kv_tokens_stored");
        if (used > 0) {
          utilization_sum += stored / (used * 16);
          ++utilization_samples;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });

  // Each client takes the next unsent request below `last` until none is left.
  auto client_loop = [&](size_t last) {
    for (size_t index = next++; index < last; index = next++) {
      if (Clock::now() >= deadline) return;
      results[index] = send(host, port, work[index]);
    }
  };
  auto run_clients = [&](size_t count, size_t last) {
    std::vector<std::thread> clients;
    for (size_t c = 0; c < count; ++c) clients.emplace_back(client_loop, last);
    for (auto& client : clients) client.join();
  };
  if (mode == "continuous") {
    run_clients(concurrency, work.size());
  } else {
    for (size_t batch = 0; batch < work.size() && Clock::now() < deadline; batch += concurrency) {
      const size_t end = std::min(work.size(), batch + static_cast<size_t>(concurrency));
      next = batch;
      run_clients(end - batch, end);
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  running = false;
  sampler.join();

  std::vector<double> ttft, tpot, latency;
  int64_t tokens = 0, done = 0, failed = 0;
  for (const Result& result : results) {
    if (result.latency == 0) continue;  // not sent: the time bound ran out
    if (!result.ok) {
      ++failed;
      continue;
    }
    ++done;
    tokens += result.tokens;
    ttft.push_back(result.ttft);
    latency.push_back(result.latency);
    if (result.tokens > 1) tpot.push_back(result.tpot);
  }
  nlohmann::json report = {
      {"mode", mode},
      {"concurrency", concurrency},
      {"requests_done", done},
      {"requests_failed", failed},
      {"wall_s", wall},
      {"output_tokens_per_s", tokens / wall},
      {"ttft_p50_s", percentile(ttft, 0.5)},
      {"ttft_p99_s", percentile(ttft, 0.99)},
      {"tpot_p50_s", percentile(tpot, 0.5)},
      {"tpot_p99_s", percentile(tpot, 0.99)},
      {"latency_p50_s", percentile(latency, 0.5)},
      {"kv_utilization", utilization_samples ? utilization_sum / utilization_samples : 0.0}};
  std::printf("%s\n", report.dump().c_str());
  return failed == 0 ? 0 : 1;
}
