// In-order execution with buffered sends and blocking receives. The loop sweeps the ranks,
// running each one as far as it can; a sweep in which no rank moves while some are unfinished
// is a deadlock, since only a receive can block and nothing is left to send its message.
#include "strata/pipeline/execution.h"

#include <deque>
#include <map>
#include <tuple>

#include "strata/core/error.h"

namespace strata {
namespace {

struct Message {
  int microbatch;
  int from_stage;
  int to_stage;
  double value;
  int sender_index;  // the send's position in the sender's list, for messages
};

// (sender rank, receiver rank, true for gradients)
using ChannelKey = std::tuple<int, int, bool>;

bool carries_gradient(ActionKind kind) {
  return kind == ActionKind::SendGrad || kind == ActionKind::RecvGrad;
}

std::string describe_wait(const Schedule& schedule, const std::vector<size_t>& next, int rank) {
  const Action& action = schedule.ranks[rank][next[rank]];
  const int sender = schedule.rank_of(action.peer_stage);
  std::string text = str("waits for ", to_string(action), " from rank ", sender, ", which ");
  const auto& sender_list = schedule.ranks[sender];
  if (next[sender] == sender_list.size()) return text + "has finished without sending it";
  return text + str("is itself waiting at action ", next[sender], ": ",
                    to_string(sender_list[next[sender]]));
}

}  // namespace

std::vector<ScheduleProblem> execute_in_order(const Schedule& schedule, const ActionRunner& run) {
  const int ranks = static_cast<int>(schedule.ranks.size());
  std::map<ChannelKey, std::deque<Message>> channels;
  std::vector<size_t> next(ranks, 0);
  std::vector<ScheduleProblem> problems;
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int rank = 0; rank < ranks; ++rank) {
      const auto& actions = schedule.ranks[rank];
      while (next[rank] < actions.size()) {
        const int index = static_cast<int>(next[rank]);
        const Action& action = actions[index];
        const int stage = schedule.virtual_stage(rank, action.chunk);
        if (is_send(action.kind)) {
          STRATA_CHECK(action.peer_stage >= 0 && action.peer_stage < schedule.virtual_stages());
          const double value = run(rank, index, action, 0.0);
          channels[{rank, schedule.rank_of(action.peer_stage), carries_gradient(action.kind)}]
              .push_back(Message{action.microbatch, stage, action.peer_stage, value, index});
        } else if (is_recv(action.kind)) {
          STRATA_CHECK(action.peer_stage >= 0 && action.peer_stage < schedule.virtual_stages());
          auto& channel =
              channels[{schedule.rank_of(action.peer_stage), rank, carries_gradient(action.kind)}];
          if (channel.empty()) break;  // blocked until the sender gets there
          const Message message = channel.front();
          if (message.microbatch != action.microbatch || message.from_stage != action.peer_stage ||
              message.to_stage != stage) {
            problems.push_back(
                {rank, index,
                 str(to_string(action), " would receive the message of rank ",
                     schedule.rank_of(action.peer_stage), " action ", message.sender_index, " (mb ",
                     message.microbatch, ", stage ", message.from_stage, " to stage ",
                     message.to_stage, "): sends and receives are out of order")});
            return problems;
          }
          channel.pop_front();
          run(rank, index, action, message.value);
        } else {
          run(rank, index, action, 0.0);
        }
        ++next[rank];
        progressed = true;
      }
    }
  }
  for (int rank = 0; rank < ranks; ++rank) {
    if (next[rank] == schedule.ranks[rank].size()) continue;
    problems.push_back(
        {rank, static_cast<int>(next[rank]),
         str("deadlock: no rank can progress; this one ", describe_wait(schedule, next, rank))});
  }
  if (!problems.empty()) return problems;
  for (const auto& [key, channel] : channels) {
    for (const Message& message : channel) {
      problems.push_back(
          {std::get<0>(key), message.sender_index,
           str("the message to rank ", std::get<1>(key), " (mb ", message.microbatch, ", stage ",
               message.from_stage, " to stage ", message.to_stage, ") is never received")});
    }
  }
  return problems;
}

}  // namespace strata
