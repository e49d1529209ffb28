// Names and printing of schedule actions.
#include "strata/pipeline/schedule.h"

#include <sstream>

#include "strata/core/error.h"

namespace strata {

const char* kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::Forward:
      return "F";
    case ActionKind::Backward:
      return "B";
    case ActionKind::BackwardInput:
      return "Bi";
    case ActionKind::BackwardWeight:
      return "W";
    case ActionKind::SendActivation:
      return "SendAct";
    case ActionKind::RecvActivation:
      return "RecvAct";
    case ActionKind::SendGrad:
      return "SendGrad";
    case ActionKind::RecvGrad:
      return "RecvGrad";
  }
  STRATA_CHECK(false, "unknown ActionKind ", static_cast<int>(kind));
}

bool is_compute(ActionKind kind) {
  return kind == ActionKind::Forward || kind == ActionKind::Backward ||
         kind == ActionKind::BackwardInput || kind == ActionKind::BackwardWeight;
}

bool is_send(ActionKind kind) {
  return kind == ActionKind::SendActivation || kind == ActionKind::SendGrad;
}

bool is_recv(ActionKind kind) {
  return kind == ActionKind::RecvActivation || kind == ActionKind::RecvGrad;
}

std::string to_string(const Action& action) {
  std::ostringstream out;
  out << kind_name(action.kind) << "(mb " << action.microbatch << ", chunk " << action.chunk;
  if (is_send(action.kind)) out << ", to stage " << action.peer_stage;
  if (is_recv(action.kind)) out << ", from stage " << action.peer_stage;
  out << ")";
  return out.str();
}

std::string to_string(const Schedule& schedule) {
  std::ostringstream out;
  out << schedule.name << ": p=" << schedule.stages << " m=" << schedule.microbatches
      << " v=" << schedule.chunks << "\n";
  for (size_t rank = 0; rank < schedule.ranks.size(); ++rank) {
    out << "rank " << rank << ":";
    for (const Action& action : schedule.ranks[rank]) out << " " << to_string(action);
    out << "\n";
  }
  return out.str();
}

}  // namespace strata
