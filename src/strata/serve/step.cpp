// The step plan's wire format (one int64 tensor) and the forward of one step across the
// pipeline stages.
#include "strata/serve/step.h"

#include "strata/core/error.h"

namespace strata {

StepPlan plan_of(const std::vector<StepEntry>& entries) {
  StepPlan plan;
  for (const StepEntry& entry : entries) {
    const Sequence& sequence = *entry.sequence;
    StepPlan::Sequence planned;
    planned.rows = entry.rows;
    planned.context = sequence.computed + entry.rows;
    planned.sample = planned.context == static_cast<int64_t>(sequence.tokens.size());
    planned.all_rows = sequence.scores_prompt();
    planned.blocks.assign(sequence.blocks.begin(),
                          sequence.blocks.begin() + blocks_for(planned.context));
    for (int64_t position = sequence.computed; position < planned.context; ++position) {
      plan.tokens.push_back(sequence.tokens[position]);
      plan.positions.push_back(position);
    }
    plan.sequences.push_back(std::move(planned));
  }
  return plan;
}

namespace {

// [stop, N, S, tokens (N), positions (N), then per sequence: rows, context, flags (1: sample,
// 2: all rows), blocks...]
std::vector<int64_t> pack_plan(const StepPlan& plan) {
  std::vector<int64_t> out = {plan.stop ? 1 : 0, static_cast<int64_t>(plan.tokens.size()),
                              static_cast<int64_t>(plan.sequences.size())};
  out.insert(out.end(), plan.tokens.begin(), plan.tokens.end());
  out.insert(out.end(), plan.positions.begin(), plan.positions.end());
  for (const StepPlan::Sequence& sequence : plan.sequences) {
    out.push_back(sequence.rows);
    out.push_back(sequence.context);
    out.push_back((sequence.sample ? 1 : 0) | (sequence.all_rows ? 2 : 0));
    out.insert(out.end(), sequence.blocks.begin(), sequence.blocks.end());
  }
  return out;
}

StepPlan unpack_plan(const int64_t* data, int64_t size) {
  StepPlan plan;
  int64_t at = 0;
  auto next = [&]() {
    STRATA_CHECK(at < size, "step plan truncated at ", at, " of ", size);
    return data[at++];
  };
  plan.stop = next() != 0;
  const int64_t tokens = next(), sequences = next();
  for (int64_t i = 0; i < tokens; ++i) plan.tokens.push_back(next());
  for (int64_t i = 0; i < tokens; ++i) plan.positions.push_back(next());
  for (int64_t s = 0; s < sequences; ++s) {
    StepPlan::Sequence sequence;
    sequence.rows = next();
    sequence.context = next();
    const int64_t flags = next();
    sequence.sample = (flags & 1) != 0;
    sequence.all_rows = (flags & 2) != 0;
    for (int64_t b = 0; b < blocks_for(sequence.context); ++b) sequence.blocks.push_back(next());
    plan.sequences.push_back(std::move(sequence));
  }
  STRATA_CHECK(at == size, "step plan of ", size, " values has ", size - at, " left over");
  return plan;
}

// Slots of positions [first, last) of a sequence with this block table.
at::Tensor slots_of(const std::vector<int64_t>& blocks, int64_t first, int64_t last) {
  std::vector<int64_t> slots;
  slots.reserve(last - first);
  for (int64_t position = first; position < last; ++position) {
    slots.push_back(blocks[position / kBlockTokens] * kBlockTokens + position % kBlockTokens);
  }
  return at::tensor(slots, at::kLong);
}

}  // namespace

void broadcast_plan(StepPlan& plan, Comm& world) {
  const CommOptions forever{std::numeric_limits<double>::infinity()};
  std::vector<int64_t> packed;
  if (world.rank() == 0) packed = pack_plan(plan);
  at::Tensor size = at::tensor({static_cast<int64_t>(packed.size())}, at::kLong);
  world.broadcast(size, 0, forever);
  at::Tensor payload = world.rank() == 0 ? at::tensor(packed, at::kLong)
                                         : at::empty({size.item<int64_t>()}, at::kLong);
  world.broadcast(payload, 0);
  if (world.rank() != 0) plan = unpack_plan(payload.data_ptr<int64_t>(), payload.numel());
}

int64_t kv_block_bytes(const GPT& stage) {
  const ModelConfig& config = stage.config();
  return stage.num_layers() * 2 * kBlockTokens * stage.local_kv_heads() * config.head_dim() *
         static_cast<int64_t>(at::elementSize(stage.dtype()));
}

int64_t kv_blocks_in(const GPT& stage, double megabytes) {
  return static_cast<int64_t>(megabytes * 1024 * 1024 / static_cast<double>(kv_block_bytes(stage)));
}

ServedStage::ServedStage(std::unique_ptr<GPT> model, Mesh& mesh, int64_t num_blocks)
    : model_(std::move(model)), mesh_(mesh) {
  const int64_t slots = num_blocks * kBlockTokens;
  const auto options = at::TensorOptions().dtype(model_->dtype());
  for (int64_t layer = 0; layer < model_->num_layers(); ++layer) {
    cache_.keys.push_back(
        at::zeros({slots, model_->local_kv_heads(), model_->config().head_dim()}, options));
    cache_.values.push_back(at::zeros_like(cache_.keys.back()));
  }
}

at::Tensor ServedStage::run(const StepPlan& plan) {
  const int64_t N = static_cast<int64_t>(plan.tokens.size());
  PagedBatch batch;
  batch.cache = &cache_;
  batch.positions = at::tensor(plan.positions, at::kLong);
  std::vector<int64_t> logit_rows;
  std::vector<at::Tensor> write_slots;
  int64_t row = 0;
  for (const StepPlan::Sequence& sequence : plan.sequences) {
    PagedBatch::Sequence paged;
    paged.first_row = row;
    paged.rows = sequence.rows;
    paged.context_slots = slots_of(sequence.blocks, 0, sequence.context);
    write_slots.push_back(
        paged.context_slots.narrow(0, sequence.context - sequence.rows, sequence.rows));
    batch.sequences.push_back(std::move(paged));
    if (sequence.all_rows) {
      for (int64_t r = row; r < row + sequence.rows; ++r) logit_rows.push_back(r);
    } else if (sequence.sample) {
      logit_rows.push_back(row + sequence.rows - 1);
    }
    row += sequence.rows;
  }
  STRATA_CHECK(row == N, "step plan rows ", row, " != tokens ", N);
  batch.write_slots = at::cat(write_slots);

  // One stage after another: the pipeline runs the step's single microbatch.
  Comm& pp = mesh_.pp();
  const bool first = mesh_.pp_is_first_stage(), last = mesh_.pp_is_last_stage();
  at::Tensor input;
  if (first) {
    input = at::tensor(plan.tokens, at::kLong).view({1, N});
  } else {
    input = at::empty({1, N, model_->config().d_model}, at::TensorOptions(model_->dtype()));
    pp.recv(input, pp.rank() - 1);
  }
  at::Tensor rows = at::tensor(logit_rows, at::kLong);
  at::Tensor output = model_->forward_paged(input, batch, rows);
  if (!last) {
    pp.send(output.contiguous(), pp.rank() + 1);
    output = at::Tensor();
  }
  // The last stage's tp rank 0 hands the logits to the first stage's tp rank 0: world rank 0.
  if (mesh_.shape().pp > 1 && mesh_.coords().tp == 0) {
    if (last) {
      pp.send(output.contiguous(), 0);
    } else if (first) {
      output = at::empty({static_cast<int64_t>(logit_rows.size()), model_->config().vocab_size},
                         at::TensorOptions(model_->dtype()));
      pp.recv(output, pp.size() - 1);
    }
  }
  if (mesh_.rank() != 0) return at::Tensor();
  return output.to(at::kFloat);
}

}  // namespace strata
