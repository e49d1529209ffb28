// The schedule generators. Each one decides only the order of compute on every rank; the
// RankListBuilder below wraps every compute action in the sends and receives it implies.
#include "strata/pipeline/generators.h"

#include <algorithm>
#include <deque>

#include "strata/core/error.h"
#include "strata/core/layout_rules.h"

namespace strata {
namespace {

// Appends one rank's actions. forward() and backward() add the receive before and the send
// after the compute (none at the first or last virtual stage), and it counts the microbatch
// chunks whose activations are held (forward done, backward not complete) so that the
// generators can assert, at each phase boundary, that the schedule holds what it claims.
class RankListBuilder {
 public:
  RankListBuilder(Schedule* schedule, int rank)
      : schedule_(schedule), rank_(rank), actions_(&schedule->ranks[rank]) {}

  void forward(int microbatch, int chunk) {
    const int stage = schedule_->virtual_stage(rank_, chunk);
    if (stage > 0) add(ActionKind::RecvActivation, microbatch, chunk, stage - 1);
    add(ActionKind::Forward, microbatch, chunk, -1);
    if (stage < last_stage()) add(ActionKind::SendActivation, microbatch, chunk, stage + 1);
    ++inflight_;
  }

  // kind is Backward (full) or BackwardInput (zero-bubble, a weight() follows later).
  void backward(int microbatch, int chunk, ActionKind kind) {
    STRATA_CHECK(kind == ActionKind::Backward || kind == ActionKind::BackwardInput);
    const int stage = schedule_->virtual_stage(rank_, chunk);
    if (stage < last_stage()) add(ActionKind::RecvGrad, microbatch, chunk, stage + 1);
    add(kind, microbatch, chunk, -1);
    if (stage > 0) add(ActionKind::SendGrad, microbatch, chunk, stage - 1);
    if (kind == ActionKind::Backward) --inflight_;
  }

  void weight(int microbatch, int chunk) {
    add(ActionKind::BackwardWeight, microbatch, chunk, -1);
    --inflight_;
  }

  int inflight() const { return inflight_; }

 private:
  int last_stage() const { return schedule_->virtual_stages() - 1; }
  void add(ActionKind kind, int microbatch, int chunk, int peer_stage) {
    actions_->push_back(Action{kind, microbatch, chunk, peer_stage});
  }

  Schedule* schedule_;
  int rank_;
  std::vector<Action>* actions_;
  int inflight_ = 0;
};

Schedule empty_schedule(const std::string& name, int stages, int microbatches, int chunks) {
  STRATA_CHECK(stages >= 1 && microbatches >= 1 && chunks >= 1, "p=", stages, " m=", microbatches,
               " v=", chunks);
  Schedule schedule;
  schedule.name = name;
  schedule.stages = stages;
  schedule.microbatches = microbatches;
  schedule.chunks = chunks;
  schedule.ranks.resize(stages);
  return schedule;
}

}  // namespace

std::vector<PipelineSchedule> pipeline_schedules() {
  std::vector<PipelineSchedule> schedules;
  for (const auto& spelling : Spellings<PipelineSchedule>::table) {
    schedules.push_back(spelling.value);
  }
  return schedules;
}

Schedule build_schedule(const Layout& layout, const LayoutVocabulary& names) {
  check_schedule(layout, names);
  const int stages = static_cast<int>(layout.pp), chunks = static_cast<int>(layout.vpp);
  const int microbatches = static_cast<int>(layout.microbatches);
  switch (layout.schedule) {
    case PipelineSchedule::gpipe:
      return make_gpipe_schedule(stages, microbatches);
    case PipelineSchedule::one_f_one_b:
      return make_1f1b_schedule(stages, microbatches);
    case PipelineSchedule::interleaved_one_f_one_b:
      return make_interleaved_1f1b_schedule(stages, microbatches, chunks);
    case PipelineSchedule::zb_h1:
      return make_zb_h1_schedule(stages, microbatches);
    case PipelineSchedule::zb_v:
      return make_zb_v_schedule(stages, microbatches);
  }
  STRATA_CHECK(false, "unknown schedule ", static_cast<int>(layout.schedule));
  return {};
}

// GPipe (Huang et al. 2019). Every stage runs the forwards of all m microbatches, then all m
// backwards, in microbatch order. Simple and obviously deadlock-free, but each stage holds the
// activations of all m microbatches at the turn, and the pipeline fills and drains twice per
// step: p-1 slots of idle before the last stage starts and p-1 after the first stage's
// forwards, (p-1)(F+B+W) in all.
Schedule make_gpipe_schedule(int stages, int microbatches) {
  Schedule schedule = empty_schedule(name_of(PipelineSchedule::gpipe), stages, microbatches, 1);
  for (int rank = 0; rank < stages; ++rank) {
    RankListBuilder builder(&schedule, rank);
    // Forward phase: fill.
    for (int mb = 0; mb < microbatches; ++mb) builder.forward(mb, 0);
    STRATA_CHECK(builder.inflight() == microbatches);
    // Backward phase: drain.
    for (int mb = 0; mb < microbatches; ++mb) builder.backward(mb, 0, ActionKind::Backward);
    STRATA_CHECK(builder.inflight() == 0);
  }
  return schedule;
}

// Forward only (evaluation): every rank runs each microbatch through its chunks in order,
// microbatch-major. Under either placement a rank's chunks are in virtual-stage order, so every
// list follows the one global order (microbatch, virtual stage); each forward depends only on
// an earlier entry of that order, and sends do not block, so the lists cannot deadlock.
Schedule make_forward_only_schedule(int stages, int microbatches, int chunks,
                                    ChunkPlacement placement) {
  Schedule schedule = empty_schedule("forward-only", stages, microbatches, chunks);
  schedule.placement = placement;
  for (int rank = 0; rank < stages; ++rank) {
    RankListBuilder builder(&schedule, rank);
    for (int mb = 0; mb < microbatches; ++mb) {
      for (int chunk = 0; chunk < chunks; ++chunk) builder.forward(mb, chunk);
    }
  }
  return schedule;
}

// 1F1B, PipeDream-Flush (Narayanan et al. 2021). Stage r (0-based) first runs a warmup of
// w = min(p-r-1, m) forwards: just enough that, once the first gradient comes back, it can
// alternate one forward with one backward. The steady phase then runs m-w pairs "forward of
// microbatch w+i, backward of microbatch i"; the cooldown drains the last w backwards. The
// idle time is GPipe's, (p-1)(F+B+W), but a stage never holds more than w+1 <= p microbatches
// of activations (p on stage 0) instead of m.
Schedule make_1f1b_schedule(int stages, int microbatches) {
  Schedule schedule =
      empty_schedule(name_of(PipelineSchedule::one_f_one_b), stages, microbatches, 1);
  for (int rank = 0; rank < stages; ++rank) {
    RankListBuilder builder(&schedule, rank);
    const int warmup = std::min(stages - rank - 1, microbatches);
    const int steady = microbatches - warmup;
    // Warmup: forwards only.
    for (int mb = 0; mb < warmup; ++mb) builder.forward(mb, 0);
    STRATA_CHECK(builder.inflight() == warmup, "rank ", rank);
    // Steady 1F1B: the forward of microbatch warmup+i, then the backward of microbatch i.
    for (int i = 0; i < steady; ++i) {
      builder.forward(warmup + i, 0);
      STRATA_CHECK(builder.inflight() == warmup + 1, "rank ", rank, " step ", i);
      builder.backward(i, 0, ActionKind::Backward);
    }
    STRATA_CHECK(builder.inflight() == warmup, "rank ", rank);
    // Cooldown: the backwards of the warmup's microbatches.
    for (int mb = steady; mb < microbatches; ++mb) builder.backward(mb, 0, ActionKind::Backward);
    STRATA_CHECK(builder.inflight() == 0, "rank ", rank);
  }
  return schedule;
}

// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM). Each rank holds v chunks; virtual
// stage s = chunk*p + rank. Microbatches move through the chunks in groups of p: a rank's k-th
// forward (k = 0..m*v-1) is microbatch (k / (p*v))*p + k % p on chunk (k / p) % v, so it runs
// p microbatches through chunk 0, the same p through chunk 1, and so on, before the next
// group; its k-th backward visits the chunks in reverse order. Because the group size is p,
// every rank sees the same sequence and a microbatch leaving the last rank's chunk c arrives
// at rank 0 exactly when chunk c+1 wants it: this is why m must be a multiple of p.
// Warmup on rank r: (p-r-1)*2 + (v-1)*p forwards (all m*v when m == p, where no steady
// phase fits), then steady pairs "forward k+warmup, backward k", then the cooldown drains the
// remaining backwards. Each chunk costs 1/v of the stage, so the fill and drain shrink to
// (p-1)(F+B+W)/v, at the price of v times more messages and a longer warmup: with m > p,
// rank 0 holds p*v + p - 1 chunk activations, p*(1 + (p-1)/(p*v)) stages' worth.
Schedule make_interleaved_1f1b_schedule(int stages, int microbatches, int chunks) {
  STRATA_CHECK(stages >= 2 && chunks >= 2 && microbatches % stages == 0, "p=", stages,
               " m=", microbatches, " v=", chunks);
  Schedule schedule = empty_schedule(name_of(PipelineSchedule::interleaved_one_f_one_b), stages,
                                     microbatches, chunks);
  const int total = microbatches * chunks;  // forwards (and backwards) per rank
  const int group = stages * chunks;
  auto microbatch_of = [&](int k) { return k / group * stages + k % stages; };
  auto forward_chunk = [&](int k) { return k % group / stages; };
  auto backward_chunk = [&](int k) { return chunks - 1 - k % group / stages; };
  for (int rank = 0; rank < stages; ++rank) {
    RankListBuilder builder(&schedule, rank);
    const int warmup = microbatches == stages
                           ? total
                           : std::min((stages - rank - 1) * 2 + (chunks - 1) * stages, total);
    const int steady = total - warmup;
    // Warmup: forwards only, through the chunks group by group.
    for (int k = 0; k < warmup; ++k) builder.forward(microbatch_of(k), forward_chunk(k));
    STRATA_CHECK(builder.inflight() == warmup, "rank ", rank);
    // Steady 1F1B: forward k+warmup, then backward k.
    for (int k = 0; k < steady; ++k) {
      builder.forward(microbatch_of(k + warmup), forward_chunk(k + warmup));
      STRATA_CHECK(builder.inflight() == warmup + 1, "rank ", rank, " step ", k);
      builder.backward(microbatch_of(k), backward_chunk(k), ActionKind::Backward);
    }
    STRATA_CHECK(builder.inflight() == warmup, "rank ", rank);
    // Cooldown: the remaining backwards.
    for (int k = steady; k < total; ++k) {
      builder.backward(microbatch_of(k), backward_chunk(k), ActionKind::Backward);
    }
    STRATA_CHECK(builder.inflight() == 0, "rank ", rank);
  }
  return schedule;
}

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241). The backward
// is split in two: B computes the input gradient, the only part the previous stage waits for,
// and W the weight gradient, which nobody waits for. F and B keep 1F1B's order (warmup of
// w = min(p-r-1, m) forwards on stage r, steady pairs, cooldown), so the gradients travel
// from the last stage to the first at B's speed instead of B+W's, and the Ws move into the
// time 1F1B spends waiting:
//  - steady phase: stage r lets up to r Ws queue up before running the oldest after each B.
//    The later the stage, the earlier its backwards start, and the more W it can push back
//    without delaying the gradients the stages before it wait for;
//  - cooldown: where the stage would wait for each next gradient, every B is followed by the
//    oldest queued W; whatever is still queued runs at the end (flush).
// A microbatch's activations stay until its W, so stage r holds at most w + 1 + r <= p
// microbatches: 1F1B's memory on stage 0. With m >= p the idle time per stage is
// (p-1)(F+B-W) when W <= min(F, B) (the paper's setting; a third of 1F1B's for F = B = W), and
// (p-1) max(F+B-W, F, B) in general.
Schedule make_zb_h1_schedule(int stages, int microbatches) {
  Schedule schedule = empty_schedule(name_of(PipelineSchedule::zb_h1), stages, microbatches, 1);
  for (int rank = 0; rank < stages; ++rank) {
    RankListBuilder builder(&schedule, rank);
    const int warmup = std::min(stages - rank - 1, microbatches);
    const int steady = microbatches - warmup;
    std::deque<int> deferred;  // microbatches whose B is done and W is not, oldest first
    auto run_oldest_weight = [&] {
      builder.weight(deferred.front(), 0);
      deferred.pop_front();
    };
    // Warmup: forwards only.
    for (int mb = 0; mb < warmup; ++mb) builder.forward(mb, 0);
    STRATA_CHECK(builder.inflight() == warmup, "rank ", rank);
    // Steady 1F1B with B for the backward; up to r Ws stay queued.
    for (int i = 0; i < steady; ++i) {
      builder.forward(warmup + i, 0);
      STRATA_CHECK(builder.inflight() <= stages, "rank ", rank, " step ", i);
      builder.backward(i, 0, ActionKind::BackwardInput);
      deferred.push_back(i);
      if (static_cast<int>(deferred.size()) > rank) run_oldest_weight();
    }
    STRATA_CHECK(builder.inflight() == warmup + static_cast<int>(deferred.size()), "rank ", rank);
    // Cooldown: each B is followed by one deferred W, filling the wait for the next gradient.
    for (int mb = steady; mb < microbatches; ++mb) {
      builder.backward(mb, 0, ActionKind::BackwardInput);
      deferred.push_back(mb);
      run_oldest_weight();
    }
    // Flush: the weight gradients still queued.
    while (!deferred.empty()) run_oldest_weight();
    STRATA_CHECK(builder.inflight() == 0, "rank ", rank);
  }
  return schedule;
}

// ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR, section 6). Two chunks per
// rank placed in a V (ChunkPlacement::v_shape): rank r holds virtual stage r as chunk 0 and
// 2p-1-r as chunk 1, so a microbatch's forward runs down the ranks and back up, and its
// backward starts on rank 0, where the last virtual stage sits. The backward is split as in
// ZB-H1 (B, then a W nobody waits for). In units of one chunk's F (= B = W here), the phases of
// rank r are timed by when its inputs can first arrive:
//  - warmup 1: microbatch k reaches chunk 0 at time r + k and microbatch 0 reaches chunk 1 at
//    2p-1-r, so 2(p-r)-1 chunk-0 forwards fit before the first chunk-1 forward;
//  - warmup 2: r pairs (chunk-1 forward, chunk-0 forward), as rank r+1 feeds chunk 1 one
//    microbatch per two units while chunk 0's inputs keep coming;
//  - warmup 3: p-r triples (chunk-1 F, B, W), the first gradients arriving for chunk 1; its W
//    runs at once, so the activations in flight stay at 2p-1 chunks after each triple;
//  - steady: rounds of F, B, W on chunk 0 then F, B, W on chunk 1: six units of work for six
//    units of time, one microbatch through both chunks; once chunk 0 has run all forwards,
//    p-r-1 more rounds without it let chunk 1 catch up;
//  - cooldown: r pairs of B on both chunks, their Ws queued (gradients now arrive only as fast
//    as the ranks nearer rank 0 release them), then p-r pairs (chunk-0 B, oldest chunk-0 W),
//    then the queued Ws (chunk 1's, then chunk 0's).
// Peak activations: 2p-1 chunks after the warmup, 2p inside a round: p microbatches' worth of
// whole-stage activations, 1F1B's. With F = B = W the only idle time is the fill and drain, a
// fraction of a chunk per rank, under a third of 1F1B's bubble for m >= 2p. The phases are
// laid out for at least 2p-1 microbatches (warmup 1 on rank 0 needs that many); with fewer,
// the actions of the microbatches that do not exist are left out, which keeps every
// dependency and the order of every channel.
Schedule make_zb_v_schedule(int stages, int microbatches) {
  STRATA_CHECK(stages >= 2, "p=", stages);
  Schedule schedule = empty_schedule(name_of(PipelineSchedule::zb_v), stages, microbatches, 2);
  schedule.placement = ChunkPlacement::v_shape;
  const int laid_out = std::max(microbatches, 2 * stages - 1);
  for (int rank = 0; rank < stages; ++rank) {
    RankListBuilder builder(&schedule, rank);
    // Per chunk, the next microbatch of each kind, counted over the laid-out microbatches.
    int next_forward[2] = {0, 0}, next_input_grad[2] = {0, 0}, next_weight[2] = {0, 0};
    auto forward = [&](int chunk) {
      if (next_forward[chunk] < microbatches) builder.forward(next_forward[chunk], chunk);
      ++next_forward[chunk];
    };
    auto input_grad = [&](int chunk) {
      const int mb = next_input_grad[chunk]++;
      if (mb < microbatches) builder.backward(mb, chunk, ActionKind::BackwardInput);
    };
    auto weight = [&](int chunk) {
      const int mb = next_weight[chunk]++;
      if (mb < microbatches) builder.weight(mb, chunk);
    };
    auto backward_now = [&](int chunk) {
      input_grad(chunk);
      weight(chunk);
    };
    const int peak = 2 * stages;  // chunks in flight: 1F1B's p microbatches of a whole stage
    // Warmup 1: chunk 0 alone.
    for (int i = 0; i < 2 * (stages - rank) - 1; ++i) forward(0);
    // Warmup 2: chunk 1's first inputs arrive between chunk 0's.
    for (int i = 0; i < rank; ++i) {
      forward(1);
      forward(0);
    }
    STRATA_CHECK(builder.inflight() <= peak - 1, "rank ", rank);
    // Warmup 3: chunk 1's first gradients, each backward completed at once.
    for (int i = 0; i < stages - rank; ++i) {
      forward(1);
      backward_now(1);
    }
    STRATA_CHECK(builder.inflight() <= peak - 1, "rank ", rank);
    // Steady: one microbatch through both chunks per round, then chunk 1 catches up.
    const int rounds_with_forward = laid_out - next_forward[0];
    for (int i = 0; i < rounds_with_forward + stages - rank - 1; ++i) {
      if (i < rounds_with_forward) forward(0);
      backward_now(0);
      forward(1);
      STRATA_CHECK(builder.inflight() <= peak, "rank ", rank, " round ", i);
      backward_now(1);
    }
    STRATA_CHECK(next_forward[0] == laid_out && next_forward[1] == laid_out, "rank ", rank);
    // Cooldown: Bs first on both chunks, then chunk 0's with a W each; the rest of the Ws last.
    for (int i = 0; i < rank; ++i) {
      input_grad(0);
      input_grad(1);
    }
    for (int i = 0; i < stages - rank; ++i) backward_now(0);
    STRATA_CHECK(next_input_grad[0] == laid_out && next_input_grad[1] == laid_out, "rank ", rank);
    while (next_weight[1] < laid_out) weight(1);
    while (next_weight[0] < laid_out) weight(0);
    STRATA_CHECK(builder.inflight() == 0, "rank ", rank);
  }
  return schedule;
}

}  // namespace strata
