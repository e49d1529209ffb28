// The parallel half of corpus preparation: one reader thread streams the sources as batches
// of raw documents (document_reader.h), `threads` workers parse and tokenize batches as they
// come, and the consumer takes the tokenized batches back in input order, so the output
// never depends on the thread count. At most a few batches per worker are in flight, which
// bounds memory whatever the corpus size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "strata/data/document_reader.h"
#include "strata/data/tokenizer.h"

namespace strata {

// The tokens of one DocumentBatch: its documents one after another, each ending in the
// document separator (the tokenizer's end-of-text token; for a tokenizer without one,
// trailing newlines are trimmed and a blank line, "\n\n", follows instead).
struct TokenizedBatch {
  size_t source = 0;
  int64_t first_document = 0;
  int64_t input_bytes = 0;
  std::vector<int32_t> tokens;
  // Masked data (prompt/completion, chat) only: 1 for the tokens that carry loss, else 0.
  std::vector<uint8_t> loss_mask;
  // One per document of the batch, in order: how many of `tokens` it became (0 for a
  // document without text, and for one the consumer asked to skip).
  std::vector<int64_t> document_lengths;
};

// Appends the tokens (and, when `masked`, the mask) of one document: each segment tokenized on
// its own, then the separator, which carries loss.
void tokenize_document(const DocumentText& document, const Tokenizer& tokenizer, bool masked,
                       TokenizedBatch* out);

class TokenizePipeline {
 public:
  // Documents with an index below skip_documents (already in shards of an interrupted run)
  // are read but not tokenized. threads >= 1.
  TokenizePipeline(std::vector<TextSource> sources, const Tokenizer& tokenizer,
                   DocumentFields fields, int threads, int64_t skip_documents);
  // Stops the threads (also when the consumer gives up early, e.g. on an error).
  ~TokenizePipeline();

  // The next batch in input order; false after the last. Rethrows the first failure (a
  // read error, a bad JSON line) when the consumer reaches it, so the batches before it are
  // delivered first and the error reported is the same for any thread count.
  bool next(TokenizedBatch* batch);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace strata
