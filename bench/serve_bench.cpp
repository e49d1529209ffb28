// An open-loop serving benchmark for `strata serve` on loopback, after vLLM's
// benchmark_serving: requests arrive on a Poisson clock whatever the server is doing, with
// ShareGPT-like lognormal prompt and output lengths, and the same arrivals are released to the
// server continuously (each at its arrival), in static batches (padded to the batch's longest
// prompt and output, as FasterTransformer-era servers ran them) or one at a time. Every time is
// measured from the request's arrival, so queueing in front of a static batch counts. Prints one
// JSON line: throughput, TTFT/TPOT/ITL/latency percentiles, goodput under SLOs, a hash of the
// outputs, and the server's prefix cache hit rate over the run.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "percentile.h"

namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

struct Request {
  double arrival = 0;  // seconds after the run's start
  std::string prompt;  // shared prefix + own letters; byte tokenizer: one letter = one token
  int64_t output_tokens = 0;
};

// What one request saw, every time in seconds from its arrival.
struct Result {
  bool sent = false, ok = false;
  double ttft = 0, latency = 0, tpot = 0;
  std::vector<double> itl;  // gaps between its own token-carrying events
  int64_t tokens = 0;       // its own output tokens
  std::string text;         // its own generated text
};

// Lengths in tokens drawn lognormal with the given mean and sigma of the underlying normal,
// clamped to [min, max]: ShareGPT's prompt and output lengths are roughly lognormal, a long
// tail of long ones.
struct Lengths {
  double mean = 64, sigma = 0.8;
  int min = 2, max = 128;
};

struct Workload {
  Lengths prompt{64, 0.8, 4, 256}, output{64, 0.8, 2, 128};
  int shared_prefix = 0;
};

int lognormal_length(std::mt19937_64& random, const Lengths& lengths) {
  std::lognormal_distribution<double> length(
      std::log(lengths.mean) - lengths.sigma * lengths.sigma / 2, lengths.sigma);
  return std::clamp(static_cast<int>(std::lround(length(random))), lengths.min, lengths.max);
}

std::string letters(std::mt19937_64& random, int count) {
  std::uniform_int_distribution<int> letter('a', 'z');
  std::string text;
  for (int i = 0; i < count; ++i) text += static_cast<char>(letter(random));
  return text;
}

// Arrivals at exponential gaps (a Poisson process of `rate` per second; all at 0 when
// infinite), the first at 0 as in vLLM. The shared prefix comes from the seed too, so a new
// seed is a new system prompt the server's prefix cache has not seen.
std::vector<Request> make_workload(int count, double rate, uint64_t seed, const Workload& shape) {
  std::mt19937_64 random(seed);
  std::exponential_distribution<double> gap(std::isinf(rate) ? 1.0 : rate);
  const std::string prefix = letters(random, shape.shared_prefix);
  std::vector<Request> requests(count);
  double clock = 0;
  for (int i = 0; i < count; ++i) {
    if (i > 0 && !std::isinf(rate)) clock += gap(random);
    Request& request = requests[i];
    request.arrival = clock;
    const int own = lognormal_length(random, shape.prompt);
    request.prompt = prefix + letters(random, own);
    request.output_tokens = lognormal_length(random, shape.output);
  }
  return requests;
}

// What one streamed completion returned: the arrival time and token count of each event
// that carried tokens, its token ids, its text, and the usage's completion tokens.
struct Stream {
  bool ok = false;
  std::vector<Clock::time_point> event_times;
  std::vector<int64_t> event_tokens;
  std::vector<int64_t> token_ids;
  std::string text;
  int64_t completion_tokens = -1;
  Clock::time_point end;
};

// One event's JSON: its text delta and token ids (return_token_ids, so an event that carries
// several tokens, as when partial UTF-8 bytes are held back, is counted right), or the usage.
void read_event(const std::string& data, Clock::time_point at, Stream& stream) {
  const nlohmann::json event = nlohmann::json::parse(data, nullptr, false);
  if (event.is_discarded()) return;
  if (event.contains("usage") && event["usage"].is_object()) {
    stream.completion_tokens = event["usage"].value("completion_tokens", int64_t{-1});
  }
  if (!event.contains("choices") || event["choices"].empty()) return;
  const nlohmann::json& choice = event["choices"][0];
  stream.text += choice.value("text", std::string());
  int64_t count = 0;
  if (choice.contains("token_ids")) {
    for (const auto& id : choice["token_ids"]) {
      stream.token_ids.push_back(id.get<int64_t>());
      ++count;
    }
  }
  if (count > 0) {
    stream.event_times.push_back(at);
    stream.event_tokens.push_back(count);
  }
}

// POSTs one streaming greedy completion and reads its server-sent events as they arrive
// (a chunk may end inside an event; the rest waits in `pending`).
Stream stream_completion(const std::string& host, int port, const std::string& prompt,
                         int64_t max_tokens, double timeout_s) {
  httplib::Client client(host, port);
  client.set_read_timeout(Seconds(timeout_s));
  httplib::Request http;
  http.method = "POST";
  http.path = "/v1/completions";
  http.set_header("Content-Type", "application/json");
  http.body = nlohmann::json({{"prompt", prompt},
                              {"max_tokens", max_tokens},
                              {"temperature", 0},
                              {"stream", true},
                              {"ignore_eos", true},
                              {"return_token_ids", true},
                              {"stream_options", {{"include_usage", true}}}})
                  .dump();
  Stream stream;
  std::string pending;
  bool done = false;
  http.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    const auto now = Clock::now();
    pending.append(data, size);
    for (size_t end = pending.find("\n\n"); end != std::string::npos; end = pending.find("\n\n")) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done = true;
      } else {
        read_event(payload, now, stream);
      }
    }
    return true;
  };
  const auto response = client.send(http);
  stream.end = Clock::now();
  stream.ok = response && response->status == 200 && done &&
              stream.completion_tokens == max_tokens &&
              static_cast<int64_t>(stream.token_ids.size()) == max_tokens;
  return stream;
}

// A request's result from its stream, keeping its own first `own_tokens` tokens (static
// batches generate more for the batch's longest output). `finish` is when the request counts
// as done: its own stream's end, or in a static batch the whole batch's end.
Result result_of(const Stream& stream, Clock::time_point arrival, int64_t own_tokens,
                 Clock::time_point finish, bool own_text_from_ids) {
  Result result;
  result.sent = true;
  result.ok = stream.ok;
  if (!stream.ok || stream.event_times.empty()) return result;
  result.tokens = own_tokens;
  result.ttft = Seconds(stream.event_times[0] - arrival).count();
  result.latency = Seconds(finish - arrival).count();
  if (own_tokens > 1) result.tpot = (result.latency - result.ttft) / (own_tokens - 1);
  int64_t seen = stream.event_tokens[0];
  for (size_t i = 1; i < stream.event_times.size() && seen < own_tokens; ++i) {
    result.itl.push_back(Seconds(stream.event_times[i] - stream.event_times[i - 1]).count());
    seen += stream.event_tokens[i];
  }
  if (own_text_from_ids) {
    // The text deltas do not split at token boundaries; with the byte tokenizer a token id
    // is its byte, so the own tokens' text is rebuilt from the ids.
    for (int64_t i = 0; i < own_tokens; ++i) {
      result.text += static_cast<char>(static_cast<unsigned char>(stream.token_ids[i]));
    }
  } else {
    result.text = stream.text;
  }
  return result;
}

double mean(const std::vector<double>& values) {
  double sum = 0;
  for (double value : values) sum += value;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

// A line of the server's /metrics text (0 when absent).
double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? 0 : std::stod(text.substr(at + name.size() + 2));
}

std::string fetch_metrics(const std::string& host, int port) {
  httplib::Client client(host, port);
  auto response = client.Get("/metrics");
  return response && response->status == 200 ? response->body : std::string();
}

uint64_t fnv1a(uint64_t hash, const std::string& text) {
  for (unsigned char byte : text) {
    hash ^= byte;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Open-loop serving benchmark for strata serve (bench/serve_bench.sh runs it)"};
  std::string host = "127.0.0.1", mode = "continuous";
  int port = 0, requests = 64, batch = 8;
  double rate = std::numeric_limits<double>::infinity(), max_seconds = 600;
  double slo_ttft = 0, slo_tpot = 0;
  uint64_t seed = 1;
  Workload shape;
  app.add_option("--host", host);
  app.add_option("--port", port)->required();
  app.add_option("--requests", requests, "Requests in the workload")->check(CLI::PositiveNumber);
  // CLI::PositiveNumber refuses inf, the rate of an all-at-once burst.
  const CLI::Validator positive_or_inf(
      [](std::string& text) {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        return *end == '\0' && value > 0 ? std::string() : "must be a positive number or inf";
      },
      "POSITIVE|inf");
  app.add_option("--rate", rate, "Mean arrivals per second (Poisson); inf = all at once")
      ->check(positive_or_inf);
  app.add_option("--seed", seed, "Seed of the arrivals, lengths, prompts and shared prefix");
  app.add_option("--mode", mode, "continuous, static or one")
      ->check(CLI::IsMember({"continuous", "static", "one"}));
  app.add_option("--batch", batch, "Static batch size")->check(CLI::PositiveNumber);
  // --prompt-mean, --prompt-sigma, --prompt-min, --prompt-max; the same for --output-.
  auto add_lengths = [&app](const std::string& what, Lengths& lengths, const std::string& of) {
    app.add_option("--" + what + "-mean", lengths.mean, "Mean " + of + " length (tokens)")
        ->check(CLI::PositiveNumber);
    app.add_option("--" + what + "-sigma", lengths.sigma, "Sigma of the " + of + " length's log")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--" + what + "-min", lengths.min)->check(CLI::PositiveNumber);
    app.add_option("--" + what + "-max", lengths.max)->check(CLI::PositiveNumber);
  };
  add_lengths("prompt", shape.prompt, "own prompt");
  add_lengths("output", shape.output, "output");
  app.add_option("--shared-prefix", shape.shared_prefix, "Tokens of a system prompt all share")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--slo-ttft", slo_ttft, "Goodput SLO on time to first token (s)")
      ->check(CLI::PositiveNumber);
  app.add_option("--slo-tpot", slo_tpot, "Goodput SLO on time per output token (s)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-seconds", max_seconds, "Send nothing after this long; a request's bound")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (shape.prompt.min > shape.prompt.max || shape.output.min > shape.output.max) {
    std::fprintf(stderr, "serve_bench: --prompt-min/--output-min exceed their maximum\n");
    return 2;
  }
  if (mode == "one") batch = 1;

  const std::vector<Request> work = make_workload(requests, rate, seed, shape);
  std::vector<Result> results(work.size());
  const std::string metrics_before = fetch_metrics(host, port);
  const auto start = Clock::now();
  auto arrival_of = [&](size_t index) {
    return start + std::chrono::duration_cast<Clock::duration>(Seconds(work[index].arrival));
  };
  auto past_deadline = [&](size_t index) { return work[index].arrival > max_seconds; };

  if (mode == "continuous") {
    // A thread per request, started at its arrival: the server sees the arrival process.
    std::vector<std::thread> clients;
    for (size_t i = 0; i < work.size() && !past_deadline(i); ++i) {
      std::this_thread::sleep_until(arrival_of(i));
      clients.emplace_back([&, i] {
        const Stream stream =
            stream_completion(host, port, work[i].prompt, work[i].output_tokens, max_seconds);
        results[i] = result_of(stream, arrival_of(i), work[i].output_tokens, stream.end, false);
      });
    }
    for (auto& client : clients) client.join();
  } else {
    // The dispatcher: once the last batch has finished, the requests that have arrived (up
    // to `batch`; waiting for the next arrival when none has) go out together, each prompt
    // padded in front with letters to the batch's longest and each max_tokens raised to its
    // longest output, so the batch runs and finishes as one. Pad letters come from their own
    // seeded stream so no two padded prompts share a prefix the server could cache.
    std::mt19937_64 pad_random(seed ^ 0x9e3779b97f4a7c15ULL);
    for (size_t first = 0; first < work.size() && !past_deadline(first);) {
      std::this_thread::sleep_until(arrival_of(first));
      size_t end = first + 1;
      const auto now = Clock::now();
      while (end < work.size() && end - first < static_cast<size_t>(batch) &&
             arrival_of(end) <= now) {
        ++end;
      }
      size_t longest_prompt = 0;
      int64_t longest_output = 0;
      for (size_t i = first; i < end; ++i) {
        longest_prompt = std::max(longest_prompt, work[i].prompt.size());
        longest_output = std::max(longest_output, work[i].output_tokens);
      }
      std::vector<Stream> streams(end - first);
      std::vector<std::thread> clients;
      for (size_t i = first; i < end; ++i) {
        const int pad =
            mode == "static" ? static_cast<int>(longest_prompt - work[i].prompt.size()) : 0;
        const std::string prompt = letters(pad_random, pad) + work[i].prompt;
        const int64_t max_tokens = mode == "static" ? longest_output : work[i].output_tokens;
        clients.emplace_back([&, i, prompt, max_tokens] {
          streams[i - first] = stream_completion(host, port, prompt, max_tokens, max_seconds);
        });
      }
      for (auto& client : clients) client.join();
      const auto batch_end = Clock::now();
      for (size_t i = first; i < end; ++i) {
        results[i] = result_of(streams[i - first], arrival_of(i), work[i].output_tokens, batch_end,
                               mode == "static");
      }
      first = end;
    }
  }

  // The run's hit rate from the counters' growth over it (the server may have served earlier
  // runs); the server's own gauge when it has no counters; 0 when it has neither.
  const std::string metrics_after = fetch_metrics(host, port);
  const double queries = metric(metrics_after, "strata_prefix_cache_queries_total") -
                         metric(metrics_before, "strata_prefix_cache_queries_total");
  const double hits = metric(metrics_after, "strata_prefix_cache_hits_total") -
                      metric(metrics_before, "strata_prefix_cache_hits_total");
  const double hit_rate =
      queries > 0 ? hits / queries : metric(metrics_after, "strata_prefix_cache_hit_rate");

  std::vector<double> ttft, tpot, itl, latency;
  int64_t tokens = 0, done = 0, failed = 0, unsent = 0, good = 0;
  uint64_t hash = 0xcbf29ce484222325ULL;
  Clock::time_point last_finish = start;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& result = results[i];
    if (!result.sent) {
      ++unsent;
      continue;
    }
    if (!result.ok) {
      ++failed;
      continue;
    }
    ++done;
    tokens += result.tokens;
    hash = fnv1a(hash, result.text);
    ttft.push_back(result.ttft);
    latency.push_back(result.latency);
    if (result.tokens > 1) tpot.push_back(result.tpot);
    itl.insert(itl.end(), result.itl.begin(), result.itl.end());
    last_finish = std::max(last_finish, arrival_of(i) + std::chrono::duration_cast<Clock::duration>(
                                                            Seconds(result.latency)));
    if (result.ttft <= slo_ttft && result.tpot <= slo_tpot) ++good;
  }
  const double duration = Seconds(last_finish - start).count();
  const double per_second = duration > 0 ? 1 / duration : 0;

  char hash_hex[17];
  std::snprintf(hash_hex, sizeof hash_hex, "%016llx", static_cast<unsigned long long>(hash));
  nlohmann::json report = {
      {"mode", mode},
      {"rate", std::isinf(rate) ? nlohmann::json("inf") : nlohmann::json(rate)},
      {"batch", batch},
      {"seed", seed},
      {"requests_done", done},
      {"requests_failed", failed},
      {"requests_unsent", unsent},
      {"duration_s", duration},
      {"request_throughput", done * per_second},
      {"output_tokens", tokens},
      {"output_tokens_per_s", tokens * per_second}};
  for (const auto& [name, values] : {std::pair{"ttft", &ttft}, std::pair{"tpot", &tpot},
                                     std::pair{"itl", &itl}, std::pair{"e2el", &latency}}) {
    report[std::string(name) + "_mean_s"] = mean(*values);
    report[std::string(name) + "_p50_s"] = percentile(*values, 0.5);
    report[std::string(name) + "_p90_s"] = percentile(*values, 0.9);
    report[std::string(name) + "_p99_s"] = percentile(*values, 0.99);
  }
  // Goodput as vLLM counts it: requests meeting both SLOs per second of the run. A run met the
  // SLOs when its p99s did and every request was served (a dropped request meets nothing).
  if (slo_ttft > 0 && slo_tpot > 0) {
    report["slo_ttft_s"] = slo_ttft;
    report["slo_tpot_s"] = slo_tpot;
    report["goodput_req_s"] = good * per_second;
    report["slo_met"] = failed == 0 && unsent == 0 && percentile(ttft, 0.99) <= slo_ttft &&
                        percentile(tpot, 0.99) <= slo_tpot;
  }
  report["output_hash"] = hash_hex;
  report["prefix_cache_hit_rate"] = hit_rate;
  std::printf("%s\n", report.dump().c_str());
  return failed == 0 ? 0 : 1;
}
