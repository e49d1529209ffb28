// The engine loop (engine.h) and the publication of generated text.
#include "strata/serve/engine.h"

#include "strata/core/error.h"

namespace strata {

size_t streamable_length(const std::string& text, const std::vector<std::string>& stop) {
  size_t length = text.size();
  // An incomplete UTF-8 character at the end: its lead byte announces more continuation bytes
  // than follow it.
  for (size_t back = 1; back <= 4 && back <= text.size(); ++back) {
    const auto byte = static_cast<unsigned char>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t expected = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    if (expected > back) length = text.size() - back;
    break;
  }
  for (const std::string& word : stop) {
    for (size_t keep = std::min(word.size() - 1, text.size()); keep > 0; --keep) {
      if (text.compare(text.size() - keep, keep, word, 0, keep) == 0) {
        length = std::min(length, text.size() - keep);
        break;
      }
    }
  }
  return length;
}

Engine::Engine(ServedStage& stage, Comm& world, const ServeConfig& config,
               const Tokenizer* tokenizer, int64_t num_blocks)
    : stage_(stage),
      world_(world),
      config_(config),
      tokenizer_(tokenizer),
      scheduler_(num_blocks, config.max_batch_tokens, config.prefix_cache) {
  update_gauges();
}

Admission Engine::submit(const std::vector<std::shared_ptr<Sequence>>& sequences) {
  const int64_t seq_len = stage_.model().config().seq_len;
  for (const auto& sequence : sequences) {
    STRATA_CHECK(sequence->prompt_tokens >= 1 &&
                     sequence->prompt_tokens + sequence->sampling.max_new_tokens <= seq_len,
                 "sequence of ", sequence->prompt_tokens, " + ", sequence->sampling.max_new_tokens,
                 " tokens was not checked against seq_len");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return Admission::stopping;
    const auto waiting = static_cast<int64_t>(incoming_.size() + scheduler_.waiting().size());
    if (waiting + static_cast<int64_t>(sequences.size()) > config_.max_queue) {
      return Admission::queue_full;
    }
    incoming_.insert(incoming_.end(), sequences.begin(), sequences.end());
    metrics_.queue_depth = waiting + static_cast<int64_t>(sequences.size());
  }
  changed_.notify_all();
  return Admission::accepted;
}

void Engine::wait_until(const std::function<bool()>& ready) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, ready);
}

void Engine::with_lock(const std::function<void()>& read) {
  std::lock_guard<std::mutex> lock(mutex_);
  read();
}

void Engine::notify() {
  { std::lock_guard<std::mutex> lock(mutex_); }
  changed_.notify_all();
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
}

void Engine::update_gauges(const std::vector<StepEntry>& running_step) {
  metrics_.queue_depth = static_cast<int64_t>(incoming_.size() + scheduler_.waiting().size());
  metrics_.running = static_cast<int64_t>(scheduler_.running().size());
  metrics_.kv_blocks_used = scheduler_.pool().num_used();
  metrics_.kv_blocks_free = scheduler_.pool().num_free();
  // The positions the running step writes count as stored: their blocks were taken for them,
  // and a gauge read during the step (most of the time) would otherwise show them as waste.
  int64_t in_flight = 0;
  for (const StepEntry& entry : running_step) in_flight += entry.rows;
  metrics_.kv_tokens_stored = scheduler_.tokens_stored() + in_flight;
  metrics_.preemptions = scheduler_.preemptions();
  metrics_.kv_blocks_cached = scheduler_.pool().num_cached();
  metrics_.prefix_cache_queries = scheduler_.prefix_queried_tokens();
  metrics_.prefix_cache_hits = scheduler_.prefix_hit_tokens();
}

void Engine::finish(const std::shared_ptr<Sequence>& sequence, FinishReason reason) {
  scheduler_.remove(sequence);
  sequence->finish = reason;
  sequence->streamable = sequence->text.size();
}

void Engine::retire_expired(ServeClock::time_point now) {
  std::vector<std::shared_ptr<Sequence>> expired;
  auto collect = [&](const std::shared_ptr<Sequence>& sequence) {
    if (!sequence->cancelled && sequence->client_gone && sequence->client_gone()) {
      sequence->cancelled = true;
    }
    if (sequence->cancelled || now >= sequence->deadline) expired.push_back(sequence);
  };
  for (const auto& sequence : scheduler_.running()) collect(sequence);
  for (const auto& sequence : scheduler_.waiting()) collect(sequence);
  for (const auto& sequence : expired) {
    finish(sequence, sequence->cancelled ? FinishReason::cancelled : FinishReason::timeout);
  }
}

void Engine::publish(Sequence& sequence) {
  const int64_t generated = sequence.generated();
  // An end-of-text token ends the completion; it counts as generated but has no text.
  const bool ended = generated > 0 && sequence.sampling.ends_generation(sequence.tokens.back());
  // Without a tokenizer a completion has no text, only ids (and their logprobs).
  std::string text = tokenizer_
                         ? tokenizer_->decode(sequence.tokens.data() + sequence.prompt_tokens,
                                              generated - (ended ? 1 : 0))
                         : std::string();
  size_t cut = std::string::npos;
  for (const std::string& word : sequence.stop) cut = std::min(cut, text.find(word));
  sequence.completion_tokens = generated;
  if (ended && cut == std::string::npos) {
    sequence.text = std::move(text);
    sequence.finish = FinishReason::stop;
  } else if (cut != std::string::npos) {
    text.resize(cut);
    sequence.text = std::move(text);
    sequence.finish = FinishReason::stop;
  } else {
    sequence.text = std::move(text);
    if (generated >= sequence.sampling.max_new_tokens) sequence.finish = FinishReason::length;
  }
  sequence.streamable = sequence.finish == FinishReason::none
                            ? streamable_length(sequence.text, sequence.stop)
                            : sequence.text.size();
}

void Engine::apply(const std::vector<StepEntry>& step, const at::Tensor& logits) {
  const auto now = ServeClock::now();
  int64_t row = 0;  // of `logits`: the plan's returned rows, sequence after sequence
  std::vector<std::shared_ptr<Sequence>> finished;
  for (const StepEntry& entry : step) {
    Sequence& sequence = *entry.sequence;
    const bool all_rows = sequence.scores_prompt();  // as the plan was made
    if (all_rows) {  // the plan returned every row: row r scores the token after it
      for (int64_t r = 0; r < entry.rows; ++r) {
        const int64_t next = sequence.computed + r + 1;
        // A prefill recomputed after a preemption scores only what it has not yet.
        if (next < sequence.prompt_tokens &&
            next == static_cast<int64_t>(sequence.prompt_logprobs.size()) + 1) {
          sequence.prompt_logprobs.push_back(
              token_logprob(logits[row + r], sequence.tokens[next], sequence.logprobs));
        }
      }
      row += entry.rows;
    }
    sequence.computed += entry.rows;
    scheduler_.cache_filled_blocks(sequence);
    if (sequence.computed < static_cast<int64_t>(sequence.tokens.size())) continue;
    // The last row samples (with all rows returned, it is already counted).
    const at::Tensor sampled = all_rows ? logits[row - 1] : logits[row++];
    if (sequence.sampling.max_new_tokens == 0) {  // echo only: the prompt is scored
      publish(sequence);
      finished.push_back(entry.sequence);
      continue;
    }
    const int64_t token = sample_token(
        penalized_logits(sampled, sequence.sampling,
                         sequence.tokens.data() + sequence.prompt_tokens, sequence.generated()),
        sequence.sampling, sequence.generator);
    sequence.tokens.push_back(token);
    if (sequence.logprobs >= 0) {
      sequence.generated_logprobs.push_back(token_logprob(sampled, token, sequence.logprobs));
    }
    ++metrics_.generation_tokens;
    if (sequence.generated() == 1) {
      metrics_.time_to_first_token.observe(
          std::chrono::duration<double>(now - sequence.arrival).count());
    } else {
      metrics_.time_per_output_token.observe(
          std::chrono::duration<double>(now - sequence.last_token_time).count());
    }
    sequence.last_token_time = now;
    publish(sequence);
    if (sequence.finish != FinishReason::none) finished.push_back(entry.sequence);
  }
  STRATA_CHECK(row == (logits.defined() ? logits.size(0) : 0), "used ", row,
               " rows of the step's logits");
  for (const auto& sequence : finished) finish(sequence, sequence->finish);
}

void Engine::serve() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    for (auto& sequence : incoming_) {
      metrics_.prompt_tokens += sequence->prompt_tokens;
      scheduler_.add(std::move(sequence));
    }
    incoming_.clear();
    if (stopping_) break;
    retire_expired(ServeClock::now());
    const std::vector<StepEntry> step = scheduler_.schedule();
    update_gauges(step);
    if (step.empty()) {
      changed_.notify_all();  // sequences retired above
      changed_.wait(lock, [&] { return stopping_ || !incoming_.empty(); });
      continue;
    }
    StepPlan plan = plan_of(step);
    lock.unlock();
    broadcast_plan(plan, world_);
    const at::Tensor logits = stage_.run(plan);
    lock.lock();
    apply(step, logits);
    update_gauges();
    changed_.notify_all();
  }
  // Stopping: what is left is cancelled, and the other ranks leave their loop.
  std::vector<std::shared_ptr<Sequence>> left(scheduler_.running().begin(),
                                              scheduler_.running().end());
  left.insert(left.end(), scheduler_.waiting().begin(), scheduler_.waiting().end());
  for (const auto& sequence : left) finish(sequence, FinishReason::cancelled);
  update_gauges();
  lock.unlock();
  changed_.notify_all();
  StepPlan stop_plan;
  stop_plan.stop = true;
  broadcast_plan(stop_plan, world_);
}

void follow_engine(ServedStage& stage, Comm& world) {
  while (true) {
    StepPlan plan;
    broadcast_plan(plan, world);
    if (plan.stop) return;
    stage.run(plan);
  }
}

}  // namespace strata
