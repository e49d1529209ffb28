// Reader thread, tokenizer workers, and in-order delivery.
#include "strata/data/tokenize_pipeline.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "strata/core/error.h"

namespace strata {

void tokenize_document(const DocumentText& document, const Tokenizer& tokenizer, bool masked,
                       TokenizedBatch* out) {
  const std::optional<int32_t> end_of_text = tokenizer.end_of_text_id();
  const auto& segments = document.segments;
  // Without an end-of-text token the separator is a blank line: the document's own trailing
  // newlines go, so that documents stay one blank line apart.
  std::string_view last = segments.empty() ? std::string_view() : segments.back().text;
  if (!end_of_text) {
    const size_t end = last.find_last_not_of('\n');
    last = end == std::string_view::npos ? std::string_view() : last.substr(0, end + 1);
  }
  bool empty = last.empty();
  for (size_t i = 0; i + 1 < segments.size(); ++i) empty = empty && segments[i].text.empty();
  if (empty) {
    out->document_lengths.push_back(0);
    return;
  }
  const size_t start = out->tokens.size();
  auto append = [&](const std::vector<int32_t>& tokens, bool carries_loss) {
    out->tokens.insert(out->tokens.end(), tokens.begin(), tokens.end());
    if (masked) out->loss_mask.insert(out->loss_mask.end(), tokens.size(), carries_loss ? 1 : 0);
  };
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string_view text = i + 1 == segments.size() ? last : segments[i].text;
    if (!text.empty()) append(tokenizer.encode(text), segments[i].carries_loss);
  }
  // The separator carries loss: the model learns where a document (a completion) ends.
  append(end_of_text ? std::vector<int32_t>{*end_of_text} : tokenizer.encode("\n\n"), true);
  out->document_lengths.push_back(static_cast<int64_t>(out->tokens.size() - start));
}

// Batches are numbered in reading order. `todo` holds read batches no worker has taken;
// `done` holds tokenized ones until the consumer's turn comes (next_to_deliver). The reader
// waits while `in_flight` (read, not yet delivered) is at its cap.
struct TokenizePipeline::State {
  std::vector<TextSource> sources;
  const Tokenizer& tokenizer;
  DocumentFields fields;
  int64_t skip_documents;
  size_t max_in_flight;

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::pair<int64_t, DocumentBatch>> todo;
  std::map<int64_t, TokenizedBatch> done;
  std::map<int64_t, std::exception_ptr> failed;  // by batch number; the reader's at batches_read
  int64_t batches_read = 0;
  int64_t next_to_deliver = 0;
  size_t in_flight = 0;
  bool reading_finished = false;
  bool stopping = false;
  std::vector<std::thread> threads;

  State(std::vector<TextSource> sources_in, const Tokenizer& tokenizer_in, DocumentFields fields_in,
        int64_t skip, size_t cap)
      : sources(std::move(sources_in)),
        tokenizer(tokenizer_in),
        fields(std::move(fields_in)),
        skip_documents(skip),
        max_in_flight(cap) {}

  void read_all() {
    DocumentReader reader(sources);
    try {
      while (true) {
        DocumentBatch batch;
        if (!reader.next(&batch)) break;
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return stopping || in_flight < max_in_flight; });
        if (stopping) return;
        todo.emplace_back(batches_read++, std::move(batch));
        ++in_flight;
        changed.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      failed[batches_read] = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex);
    reading_finished = true;
    changed.notify_all();
  }

  TokenizedBatch tokenize(const DocumentBatch& batch) const {
    TokenizedBatch out;
    out.source = batch.source;
    out.first_document = batch.first_document;
    out.input_bytes = batch.input_bytes;
    out.document_lengths.reserve(batch.documents.size());
    const TextSource& source = sources[batch.source];
    for (size_t i = 0; i < batch.documents.size(); ++i) {
      if (batch.first_document + static_cast<int64_t>(i) < skip_documents) {
        out.document_lengths.push_back(0);
        continue;
      }
      tokenize_document(document_text(source, batch, batch.documents[i], fields), tokenizer,
                        fields.masked(), &out);
    }
    return out;
  }

  void work() {
    while (true) {
      std::pair<int64_t, DocumentBatch> job;
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return stopping || !todo.empty() || reading_finished; });
        if (stopping || todo.empty()) return;
        job = std::move(todo.front());
        todo.pop_front();
      }
      TokenizedBatch result;
      std::exception_ptr failure;
      try {
        result = tokenize(job.second);
      } catch (...) {
        failure = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (failure) {
        failed[job.first] = failure;
      } else {
        done.emplace(job.first, std::move(result));
      }
      changed.notify_all();
    }
  }
};

TokenizePipeline::TokenizePipeline(std::vector<TextSource> sources, const Tokenizer& tokenizer,
                                   DocumentFields fields, int threads, int64_t skip_documents) {
  STRATA_CHECK(threads >= 1, "threads ", threads);
  state_ = std::make_unique<State>(std::move(sources), tokenizer, std::move(fields), skip_documents,
                                   static_cast<size_t>(2 * threads + 2));
  state_->threads.emplace_back([this] { state_->read_all(); });
  for (int i = 0; i < threads; ++i) state_->threads.emplace_back([this] { state_->work(); });
}

TokenizePipeline::~TokenizePipeline() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
    state_->changed.notify_all();
  }
  for (auto& thread : state_->threads) thread.join();
}

bool TokenizePipeline::next(TokenizedBatch* batch) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  const int64_t wanted = s.next_to_deliver;
  s.changed.wait(lock, [&] {
    return s.done.count(wanted) != 0 || s.failed.count(wanted) != 0 ||
           (s.reading_finished && wanted >= s.batches_read);
  });
  if (auto failure = s.failed.find(wanted); failure != s.failed.end()) {
    std::rethrow_exception(failure->second);
  }
  auto found = s.done.find(wanted);
  if (found == s.done.end()) return false;
  *batch = std::move(found->second);
  s.done.erase(found);
  ++s.next_to_deliver;
  --s.in_flight;
  s.changed.notify_all();
  return true;
}

}  // namespace strata
