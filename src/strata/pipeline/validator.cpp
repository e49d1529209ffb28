// The validator in three passes: the shape of every action, how often each (microbatch,
// virtual stage) occurs per kind, the order of messages per channel; then an in-order
// execution (execution.h) that checks each action's dependencies at the moment it runs and
// detects deadlock.
#include "strata/pipeline/validator.h"

#include <map>
#include <tuple>

#include "strata/core/error.h"
#include "strata/pipeline/execution.h"

namespace strata {
namespace {

constexpr int kKinds = 8;

int kind_index(ActionKind kind) { return static_cast<int>(kind); }

// The peer a send or receive must name, or -1 where the action cannot exist on that stage.
int expected_peer(ActionKind kind, int stage, int last_stage) {
  switch (kind) {
    case ActionKind::SendActivation:
    case ActionKind::RecvGrad:
      return stage < last_stage ? stage + 1 : -1;
    case ActionKind::RecvActivation:
    case ActionKind::SendGrad:
      return stage > 0 ? stage - 1 : -1;
    default:
      return -1;
  }
}

void check_shape(const Schedule& schedule, std::vector<ScheduleProblem>* problems) {
  const int last_stage = schedule.virtual_stages() - 1;
  for (int rank = 0; rank < schedule.stages; ++rank) {
    const auto& actions = schedule.ranks[rank];
    for (int index = 0; index < static_cast<int>(actions.size()); ++index) {
      const Action& action = actions[index];
      auto report = [&](const std::string& what) {
        problems->push_back({rank, index, to_string(action) + ": " + what});
      };
      if (action.microbatch < 0 || action.microbatch >= schedule.microbatches) {
        report(str("microbatch out of range [0, ", schedule.microbatches, ")"));
      }
      if (action.chunk < 0 || action.chunk >= schedule.chunks) {
        report(str("chunk out of range [0, ", schedule.chunks, ")"));
        continue;
      }
      const int stage = schedule.virtual_stage(rank, action.chunk);
      if (is_compute(action.kind)) {
        if (action.peer_stage != -1) report("a compute action has no peer stage (use -1)");
        continue;
      }
      const int peer = expected_peer(action.kind, stage, last_stage);
      if (peer < 0) {
        report(str("virtual stage ", stage, " has no ",
                   is_send(action.kind) ? "receiver" : "sender", " for this data"));
      } else if (action.peer_stage != peer) {
        report(str("the peer of virtual stage ", stage, " for this data is stage ", peer));
      }
    }
  }
}

// Exactly one F per (microbatch, virtual stage); one full backward or one B plus one W; one
// send and one receive wherever data crosses a stage boundary.
void check_counts(const Schedule& schedule, std::vector<ScheduleProblem>* problems) {
  const int last_stage = schedule.virtual_stages() - 1;
  for (int rank = 0; rank < schedule.stages; ++rank) {
    // counts[chunk][microbatch][kind], and the index of each action's first occurrence
    std::vector<std::vector<std::vector<int>>> counts(
        schedule.chunks,
        std::vector<std::vector<int>>(schedule.microbatches, std::vector<int>(kKinds, 0)));
    const auto& actions = schedule.ranks[rank];
    for (int index = 0; index < static_cast<int>(actions.size()); ++index) {
      const Action& action = actions[index];
      int& count = counts[action.chunk][action.microbatch][kind_index(action.kind)];
      if (++count == 2) {
        problems->push_back({rank, index, to_string(action) + ": appears a second time"});
      }
    }
    for (int chunk = 0; chunk < schedule.chunks; ++chunk) {
      const int stage = schedule.virtual_stage(rank, chunk);
      for (int mb = 0; mb < schedule.microbatches; ++mb) {
        const auto& count = counts[chunk][mb];
        auto missing = [&](const std::string& what) {
          problems->push_back(
              {rank, -1,
               str("mb ", mb, ", chunk ", chunk, " (virtual stage ", stage, "): ", what)});
        };
        auto has = [&](ActionKind kind) { return count[kind_index(kind)] > 0; };
        if (!has(ActionKind::Forward)) missing("no forward (F)");
        const bool full = has(ActionKind::Backward);
        const bool split = has(ActionKind::BackwardInput) || has(ActionKind::BackwardWeight);
        if (full && split) missing("both a full backward and a split one (B/W)");
        if (!full && !split) missing("no backward");
        if (split && !has(ActionKind::BackwardInput)) missing("a W without its B");
        if (split && !has(ActionKind::BackwardWeight)) missing("a B whose W never runs");
        if (stage > 0 && !has(ActionKind::RecvActivation)) missing("its input is never received");
        if (stage > 0 && !has(ActionKind::SendGrad)) missing("its input gradient is never sent");
        if (stage < last_stage && !has(ActionKind::SendActivation)) {
          missing("its output is never sent");
        }
        if (stage < last_stage && !has(ActionKind::RecvGrad)) {
          missing("its output gradient is never received");
        }
      }
    }
  }
}

// Per channel (sender rank, receiver rank, activations or gradients) the receiver must take
// the messages in the order they are sent.
void check_message_order(const Schedule& schedule, std::vector<ScheduleProblem>* problems) {
  struct Endpoint {
    int microbatch, from_stage, to_stage, index;
  };
  using Key = std::tuple<int, int, bool>;
  std::map<Key, std::vector<Endpoint>> sends, receives;
  for (int rank = 0; rank < schedule.stages; ++rank) {
    const auto& actions = schedule.ranks[rank];
    for (int index = 0; index < static_cast<int>(actions.size()); ++index) {
      const Action& action = actions[index];
      if (is_compute(action.kind)) continue;
      const bool gradient =
          action.kind == ActionKind::SendGrad || action.kind == ActionKind::RecvGrad;
      const int stage = schedule.virtual_stage(rank, action.chunk);
      const int peer_rank = schedule.rank_of(action.peer_stage);
      if (is_send(action.kind)) {
        sends[{rank, peer_rank, gradient}].push_back(
            {action.microbatch, stage, action.peer_stage, index});
      } else if (is_recv(action.kind)) {
        receives[{peer_rank, rank, gradient}].push_back(
            {action.microbatch, action.peer_stage, stage, index});
      }
    }
  }
  for (const auto& [key, received] : receives) {
    const auto& [sender, receiver, gradient] = key;
    const auto& sent = sends[key];
    const char* data = gradient ? "gradient" : "activation";
    for (size_t i = 0; i < received.size() && i < sent.size(); ++i) {
      const Endpoint& r = received[i];
      const Endpoint& s = sent[i];
      if (r.microbatch == s.microbatch && r.from_stage == s.from_stage &&
          r.to_stage == s.to_stage) {
        continue;
      }
      problems->push_back(
          {receiver, r.index,
           str("receive #", i, " of ", data, "s from rank ", sender, " expects mb ", r.microbatch,
               " (stage ", r.from_stage, " to ", r.to_stage, ") but rank ", sender, "'s send #", i,
               " (action ", s.index, ") carries mb ", s.microbatch, " (stage ", s.from_stage,
               " to ", s.to_stage, ")")});
      break;  // later positions of this channel are shifted echoes of the same mistake
    }
    if (received.size() != sent.size()) {
      problems->push_back({receiver, -1,
                           str("receives ", received.size(), " ", data, "s from rank ", sender,
                               ", which sends ", sent.size())});
    }
  }
  for (const auto& [key, sent] : sends) {
    if (receives.count(key) == 0) {
      problems->push_back({std::get<0>(key), sent.front().index,
                           str("sends ", sent.size(), " messages to rank ", std::get<1>(key),
                               ", which receives none of them")});
    }
  }
}

// What one rank has done so far, per (chunk, microbatch), while the execution runs.
struct RankProgress {
  explicit RankProgress(int cells) : forward(cells), input_grad(cells), input(cells), grad(cells) {}
  std::vector<bool> forward;     // F done
  std::vector<bool> input_grad;  // full backward or B done
  std::vector<bool> input;       // activation received
  std::vector<bool> grad;        // output gradient received
};

void check_dependencies(const Schedule& schedule, std::vector<ScheduleProblem>* problems) {
  const int last_stage = schedule.virtual_stages() - 1;
  std::vector<RankProgress> progress(schedule.stages,
                                     RankProgress(schedule.chunks * schedule.microbatches));
  auto runner = [&](int rank, int index, const Action& action, double) {
    const int cell = action.chunk * schedule.microbatches + action.microbatch;
    const int stage = schedule.virtual_stage(rank, action.chunk);
    RankProgress& done = progress[rank];
    auto require = [&](bool condition, const char* what) {
      if (!condition)
        problems->push_back({rank, index, to_string(action) + ": runs before " + what});
    };
    switch (action.kind) {
      case ActionKind::Forward:
        require(stage == 0 || done.input[cell], "its input arrived");
        done.forward[cell] = true;
        break;
      case ActionKind::Backward:
      case ActionKind::BackwardInput:
        require(done.forward[cell], "its forward");
        require(stage == last_stage || done.grad[cell], "its output gradient arrived");
        done.input_grad[cell] = true;
        break;
      case ActionKind::BackwardWeight:
        require(done.input_grad[cell], "its B");
        break;
      case ActionKind::SendActivation:
        require(done.forward[cell], "its forward");
        break;
      case ActionKind::SendGrad:
        require(done.input_grad[cell], "its backward");
        break;
      case ActionKind::RecvActivation:
        done.input[cell] = true;
        break;
      case ActionKind::RecvGrad:
        done.grad[cell] = true;
        break;
    }
    return 0.0;
  };
  for (auto& problem : execute_in_order(schedule, runner)) problems->push_back(problem);
}

}  // namespace

std::string to_string(const ScheduleProblem& problem) {
  std::string where;
  if (problem.rank >= 0) where += str("rank ", problem.rank);
  if (problem.action_index >= 0) where += str(" action ", problem.action_index);
  return where.empty() ? problem.message : where + ": " + problem.message;
}

std::vector<ScheduleProblem> validate_schedule(const Schedule& schedule) {
  std::vector<ScheduleProblem> problems;
  if (schedule.stages < 1 || schedule.microbatches < 1 || schedule.chunks < 1) {
    problems.push_back({-1, -1,
                        str("p (", schedule.stages, "), m (", schedule.microbatches, ") and v (",
                            schedule.chunks, ") must all be at least 1")});
    return problems;
  }
  if (schedule.placement == ChunkPlacement::v_shape && schedule.chunks != 2) {
    problems.push_back({-1, -1,
                        str("a V placement holds 2 chunks per rank (virtual stages r and 2p-1-r), "
                            "not v = ",
                            schedule.chunks)});
    return problems;
  }
  if (static_cast<int>(schedule.ranks.size()) != schedule.stages) {
    problems.push_back({-1, -1,
                        str("the schedule has ", schedule.ranks.size(),
                            " rank lists for p = ", schedule.stages, " stages")});
    return problems;
  }
  check_shape(schedule, &problems);
  if (!problems.empty()) return problems;
  check_counts(schedule, &problems);
  check_message_order(schedule, &problems);
  if (!problems.empty()) return problems;
  check_dependencies(schedule, &problems);
  return problems;
}

void require_valid_schedule(const Schedule& schedule) {
  const auto problems = validate_schedule(schedule);
  if (problems.empty()) return;
  std::string message =
      str("schedule '", schedule.name, "' (p=", schedule.stages, ", m=", schedule.microbatches,
          ", v=", schedule.chunks, ") is invalid:");
  const size_t shown = std::min<size_t>(problems.size(), 20);
  for (size_t i = 0; i < shown; ++i) message += "\n  " + to_string(problems[i]);
  if (shown < problems.size()) message += str("\n  ... and ", problems.size() - shown, " more");
  throw UserError(message);
}

}  // namespace strata
