// Opening token sources, the train/eval split, and building sampled rows.
#include "strata/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "strata/core/error.h"
#include "strata/data/corpus_cache.h"
#include "strata/data/prepare.h"
#include "strata/data/sampler.h"
#include "strata/data/synthetic.h"
#include "strata/data/text_source.h"
#include "strata/data/token_shard.h"
#include "strata/data/tokenizer.h"

namespace strata {

namespace {

TokenStream load_corpus(const DataConfig& data, std::string* origin) {
  auto tokenizer = make_tokenizer(data.tokenizer);
  std::error_code error;
  STRATA_REQUIRE(data.path.empty() || std::filesystem::exists(data.path, error), "data.path ",
                 data.path,
                 " does not exist: for data.source = \"corpus\" give a text file or a "
                 "directory of .txt files (or no path for the default corpus)");
  std::vector<TextSource> sources =
      data.path.empty() ? fortune_sources() : text_sources({data.path});
  std::string dir = cached_corpus_dir(sources, *tokenizer, default_cache_dir());
  TokenStream stream;
  try {
    stream = load_token_shards(dir);
  } catch (const UserError& failure) {
    throw UserError(str("the corpus cache entry ", dir, " is damaged (", failure.what(),
                        "); delete that directory and run again"));
  }
  *origin =
      str(data.path.empty() ? "the fortunes corpus" : "corpus " + data.path, " (", sources.size(),
          " file(s), tokenizer ", tokenizer->name(), ", cached in ", dir, ")");
  return stream;
}

TokenStream load_shards(const DataConfig& data, std::string* origin) {
  STRATA_REQUIRE(!data.path.empty(),
                 "data.source = \"shards\" needs data.path: a directory "
                 "made by `strata data prepare` or a single shard file");
  TokenStream stream = load_token_shards(data.path);
  STRATA_REQUIRE(shard_tokenizer_label(stream.tokenizer) == shard_tokenizer_label(data.tokenizer),
                 "the shards in ", data.path, " were made by tokenizer \"", stream.tokenizer,
                 "\" but data.tokenizer = \"", data.tokenizer, "\"; set data.tokenizer = \"",
                 stream.tokenizer, "\"");
  *origin = str("shards ", data.path, " (tokenizer ", stream.tokenizer, ")");
  return stream;
}

}  // namespace

std::shared_ptr<TokenDataset> TokenDataset::open(const DataConfig& data, const ModelConfig& model,
                                                 uint64_t seed) {
  std::string origin;
  TokenStream stream;
  switch (data.source) {
    case DataSource::corpus:
      stream = load_corpus(data, &origin);
      break;
    case DataSource::shards:
      stream = load_shards(data, &origin);
      break;
    case DataSource::synthetic:
      STRATA_REQUIRE(model.vocab_size >= 1, "model.vocab_size (", model.vocab_size,
                     ") must be at least 1");
      stream.tokens = synthetic_tokens(seed, model.vocab_size);
      origin = str("synthetic motifs (seed ", seed, ")");
      break;
  }
  if (data.loss_mask == LossMask::none) {
    stream.loss_mask.clear();  // every target carries loss
  } else {
    STRATA_REQUIRE(!stream.loss_mask.empty(), "data.loss_mask = \"completion\" needs shards that ",
                   "carry a loss mask, but ", origin,
                   " has none: prepare prompt/completion JSONL with `strata data prepare "
                   "--prompt-completion` (chat JSONL with `--chat`) and set data.source = "
                   "\"shards\", or set "
                   "data.loss_mask = \"none\"");
  }
  return from_tokens(std::move(stream.tokens), data, model, seed, origin,
                     std::move(stream.document_starts), std::move(stream.loss_mask));
}

namespace {

// The document starts of tokens [first, first + count) of a stream, relative to `first`: the
// part begins a document (0) whether or not the stream's document began there.
std::vector<int64_t> starts_within(const std::vector<int64_t>& starts, int64_t first,
                                   int64_t count) {
  if (starts.empty() || count == 0) return {};
  std::vector<int64_t> part = {0};
  for (int64_t start : starts) {
    if (start > first && start < first + count) part.push_back(start - first);
  }
  return part;
}

}  // namespace

std::shared_ptr<TokenDataset> TokenDataset::from_tokens(std::vector<int32_t> tokens,
                                                        const DataConfig& data,
                                                        const ModelConfig& model, uint64_t seed,
                                                        const std::string& origin,
                                                        std::vector<int64_t> document_starts,
                                                        std::vector<uint8_t> loss_mask) {
  STRATA_CHECK(loss_mask.empty() || loss_mask.size() == tokens.size(), loss_mask.size(),
               " loss mask entries for ", tokens.size(), " tokens");
  STRATA_REQUIRE(data.eval_fraction >= 0.0 && data.eval_fraction < 1.0, "data.eval_fraction (",
                 data.eval_fraction, ") must be in [0, 1)");
  STRATA_REQUIRE(model.seq_len >= 1, "model.seq_len (", model.seq_len, ") must be at least 1");
  if (!tokens.empty()) {
    auto [lowest, highest] = std::minmax_element(tokens.begin(), tokens.end());
    STRATA_REQUIRE(*lowest >= 0, origin, " holds the negative token id ", *lowest);
    STRATA_REQUIRE(*highest < model.vocab_size, origin, " holds token id ", *highest,
                   " but model.vocab_size is ", model.vocab_size,
                   ": every id must be < model.vocab_size; set model.vocab_size to at least ",
                   int64_t{*highest} + 1);
  }

  const int64_t total = static_cast<int64_t>(tokens.size());
  STRATA_REQUIRE(document_starts.empty() ||
                     (document_starts.front() == 0 && document_starts.back() < total &&
                      std::adjacent_find(document_starts.begin(), document_starts.end(),
                                         std::greater_equal<int64_t>()) == document_starts.end()),
                 origin, ": the document starts must ascend strictly from 0 and lie within its ",
                 total, " tokens; prepare the data again with `strata data prepare`");
  const int64_t window = model.seq_len + 1;
  const auto eval_count =
      static_cast<int64_t>(std::floor(static_cast<double>(total) * data.eval_fraction));
  const int64_t train_count = total - eval_count;
  STRATA_REQUIRE(train_count >= window, origin, ": the train split has ", train_count, " of ",
                 total, " tokens (data.eval_fraction = ", data.eval_fraction,
                 "), fewer than one sequence of model.seq_len + 1 = ", window,
                 " tokens; use more data or a smaller model.seq_len");
  STRATA_REQUIRE(data.eval_fraction == 0.0 || eval_count >= window, origin, ": the eval split has ",
                 eval_count, " of ", total, " tokens (data.eval_fraction = ", data.eval_fraction,
                 "), fewer than one sequence of model.seq_len + 1 = ", window,
                 " tokens; raise data.eval_fraction, use more data, or set it to 0 for no eval");

  std::shared_ptr<TokenDataset> dataset(new TokenDataset());
  dataset->seed_ = seed;
  dataset->train_document_starts_ = starts_within(document_starts, 0, train_count);
  dataset->eval_document_starts_ = starts_within(document_starts, train_count, eval_count);
  dataset->eval_.assign(tokens.begin() + train_count, tokens.end());
  tokens.resize(static_cast<size_t>(train_count));
  dataset->train_ = std::move(tokens);
  if (!loss_mask.empty()) {
    dataset->eval_mask_.assign(loss_mask.begin() + train_count, loss_mask.end());
    loss_mask.resize(static_cast<size_t>(train_count));
    dataset->train_mask_ = std::move(loss_mask);
  }
  dataset->description_ =
      str(origin, ": ", total, " tokens, train ", train_count, ", eval ", eval_count);
  return dataset;
}

int64_t TokenDataset::num_tokens(Split split) const {
  return static_cast<int64_t>(tokens(split).size());
}

int64_t TokenDataset::row_start_of(Split split, int64_t step, int64_t row, int64_t seq_len) const {
  STRATA_CHECK(step >= 0 && row >= 0 && seq_len >= 1, "step ", step, ", row ", row, ", seq_len ",
               seq_len);
  const int64_t available = num_tokens(split);
  STRATA_REQUIRE(!(split == Split::Eval && available == 0),
                 "evaluation needs an eval split but data.eval_fraction is 0; set it above 0 "
                 "or set train.eval_every = 0");
  STRATA_REQUIRE(available >= seq_len + 1, "the ", split == Split::Train ? "train" : "eval",
                 " split has ", available,
                 " tokens, fewer than one sequence of seq_len + 1 = ", seq_len + 1);
  return row_start(seed_, split, step, row, available - seq_len);
}

at::Tensor TokenDataset::rows(Split split, int64_t step, int64_t first_row, int64_t count,
                              int64_t seq_len) const {
  STRATA_CHECK(first_row >= 0 && count >= 0, "first_row ", first_row, ", count ", count);
  const std::vector<int32_t>& source = tokens(split);
  const int64_t width = seq_len + 1;
  at::Tensor out = at::empty({count, width}, at::kLong);  // (count, seq_len + 1)
  int64_t* out_data = out.data_ptr<int64_t>();
  for (int64_t r = 0; r < count; ++r) {
    const int64_t start = row_start_of(split, step, first_row + r, seq_len);
    std::copy(source.begin() + start, source.begin() + start + width, out_data + r * width);
  }
  return out;
}

at::Tensor TokenDataset::documents(Split split, int64_t step, int64_t first_row, int64_t count,
                                   int64_t seq_len) const {
  STRATA_CHECK(first_row >= 0 && count >= 0, "first_row ", first_row, ", count ", count);
  const std::vector<int64_t>& starts = document_starts(split);
  const int64_t width = seq_len + 1;
  at::Tensor out = at::empty({count, width}, at::kLong);  // (count, seq_len + 1)
  int64_t* out_data = out.data_ptr<int64_t>();
  for (int64_t r = 0; r < count; ++r) {
    const int64_t start = row_start_of(split, step, first_row + r, seq_len);
    // The documents that begin after the row's first token, in order.
    auto next = std::upper_bound(starts.begin(), starts.end(), start);
    int64_t id = 0;
    for (int64_t column = 0; column < width; ++column) {
      if (next != starts.end() && *next == start + column) id = *next++ - start;
      out_data[r * width + column] = id;
    }
  }
  return out;
}

at::Tensor TokenDataset::loss_mask_rows(Split split, int64_t step, int64_t first_row, int64_t count,
                                        int64_t seq_len) const {
  STRATA_CHECK(has_loss_mask(), "loss_mask_rows of a dataset without a loss mask");
  const std::vector<uint8_t>& mask = split == Split::Train ? train_mask_ : eval_mask_;
  const int64_t available = static_cast<int64_t>(mask.size());
  STRATA_CHECK(available >= seq_len + 1, available, " mask entries for seq_len ", seq_len);
  at::Tensor out = at::empty({count, seq_len}, at::kByte);  // (count, seq_len)
  uint8_t* out_data = out.data_ptr<uint8_t>();
  for (int64_t r = 0; r < count; ++r) {
    // The row's targets are tokens start + 1 .. start + seq_len.
    const int64_t start = row_start(seed_, split, step, first_row + r, available - seq_len);
    std::copy(mask.begin() + start + 1, mask.begin() + start + 1 + seq_len, out_data + r * seq_len);
  }
  return out;
}

int64_t TokenDataset::loss_tokens(Split split, int64_t step, int64_t count, int64_t seq_len) const {
  if (!has_loss_mask()) return count * seq_len;
  return loss_mask_rows(split, step, 0, count, seq_len).sum().item<int64_t>();
}

}  // namespace strata
