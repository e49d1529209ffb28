// Encoding throughput of a strata tokenizer: the documents of a JSON array of strings encoded
// on --threads threads (each thread takes the next document), timed over --rounds rounds after
// one warm-up round. Prints one JSON line: MB/s of the best round, the token count and a hash
// of all ids in document order (bench/tokenize_hf.js computes the same hash, so identical ids
// show as identical hashes).
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "strata/data/hf_tokenizer.h"
#include "strata/data/tokenizer.h"

namespace {

using Ids = std::vector<int32_t>;

// Encodes every document on `threads` threads; returns the seconds it took.
double encode_all(const strata::Tokenizer& tokenizer, const std::vector<std::string>& documents,
                  int threads, std::vector<Ids>& ids) {
  std::atomic<size_t> next{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < documents.size(); i = next++) {
        ids[i] = tokenizer.encode(documents[i]);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Encoding throughput of a strata tokenizer"};
  std::string tokenizer_dir, texts_path;
  int threads = 1, rounds = 3;
  app.add_option("--tokenizer", tokenizer_dir, "Tokenizer directory (or \"byte\")")->required();
  app.add_option("--texts", texts_path, "JSON array of documents")->required();
  app.add_option("--threads", threads, "Encoding threads")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "Timed rounds (the best is reported)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  auto tokenizer = strata::make_tokenizer(tokenizer_dir);
  auto documents = nlohmann::json::parse(strata::read_tokenizer_file(texts_path))
                       .get<std::vector<std::string>>();
  size_t bytes = 0;
  for (const auto& document : documents) bytes += document.size();
  std::vector<Ids> ids(documents.size());
  encode_all(*tokenizer, documents, threads, ids);  // warm-up: caches, pages
  double best = 1e30;
  for (int round = 0; round < rounds; ++round) {
    best = std::min(best, encode_all(*tokenizer, documents, threads, ids));
  }
  uint32_t hash = 0;
  size_t tokens = 0;
  for (const auto& document_ids : ids) {
    for (int32_t id : document_ids) hash = hash * 31 + static_cast<uint32_t>(id) + 1;
    tokens += document_ids.size();
  }
  std::cout << nlohmann::json{{"implementation", "strata"},
                              {"threads", threads},
                              {"mb", bytes / 1e6},
                              {"seconds", best},
                              {"mb_per_s", bytes / 1e6 / best},
                              {"tokens", tokens},
                              {"hash", hash}}
                   .dump()
            << std::endl;
}
