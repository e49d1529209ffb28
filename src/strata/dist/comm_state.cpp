// The state behind a Comm: ownership of the MPI communicator, error messages, the
// collective sequence numbers and the census taken after a timeout, and the graveyard that
// keeps abandoned operations' buffers alive until MPI lets go of them.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "strata/core/error.h"
#include "strata/dist/mpi_internal.h"

namespace strata::dist_internal {
namespace {

std::string join_ranks(const std::vector<int>& ranks) {
  std::string text = "[";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text + "]";
}

// " on h3" (" on h1, h3"): the hosts of these world ranks, when the world spans several.
std::string on_hosts(const std::vector<int>& world_ranks) {
  const std::vector<std::string>& hosts = world_hosts();
  if (!world_spans_hosts()) return "";
  std::vector<std::string> named;
  for (int rank : world_ranks) {
    const std::string& host = hosts.at(static_cast<size_t>(rank));
    if (std::find(named.begin(), named.end(), host) == named.end()) named.push_back(host);
  }
  std::string text = " on ";
  for (size_t i = 0; i < named.size(); ++i) text += (i ? ", " : "") + named[i];
  return text;
}

// "[1]", "[1] (world ranks [3])", "[1] (world ranks [3]) on h2".
std::string describe_ranks(const std::vector<int>& ranks, const std::vector<int>& world_ranks) {
  std::string text = join_ranks(ranks);
  if (ranks != world_ranks) text += " (world ranks " + join_ranks(world_ranks) + ")";
  return text + on_hosts(world_ranks);
}

}  // namespace

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

const char* op_code_name(OpCode code) {
  switch (code) {
    case OpCode::None:
      return "nothing";
    case OpCode::AllReduce:
      return "all_reduce";
    case OpCode::ReduceScatter:
      return "reduce_scatter";
    case OpCode::AllGather:
      return "all_gather";
    case OpCode::AllToAll:
      return "all_to_all";
    case OpCode::AllToAllV:
      return "all_to_all_v";
    case OpCode::Broadcast:
      return "broadcast";
    case OpCode::Barrier:
      return "barrier";
    case OpCode::Split:
      return "split";
  }
  return "unknown op";
}

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS)
    return "MPI error code " + std::to_string(rc);
  return std::string(text, length);
}

std::string format_seconds(double seconds) {
  if (std::isinf(seconds)) return "inf s";
  char text[32];
  const bool tenths = std::abs(seconds * 10 - std::round(seconds * 10)) < 1e-9;
  std::snprintf(text, sizeof text, tenths ? "%.1f s" : "%.3g s", seconds);
  return text;
}

CommState::CommState(MPI_Comm owned, std::string group_name, double timeout_s,
                     std::shared_ptr<CommCounters> shared_counters)
    : comm(owned),
      name(std::move(group_name)),
      default_timeout_s(timeout_s),
      counters(std::move(shared_counters)) {
  check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "create communicator");
  check(MPI_Comm_rank(comm, &rank), "create communicator");
  check(MPI_Comm_size(comm, &size), "create communicator");

  MPI_Group group, world_group;
  check(MPI_Comm_group(comm, &group), "create communicator");
  check(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "create communicator");
  std::vector<int> group_ranks(size);
  for (int r = 0; r < size; ++r) group_ranks[r] = r;
  world_ranks.resize(size);
  check(MPI_Group_translate_ranks(group, size, group_ranks.data(), world_group, world_ranks.data()),
        "create communicator");
  check(MPI_Group_free(&group), "create communicator");
  check(MPI_Group_free(&world_group), "create communicator");

  int* tag_ub_value = nullptr;
  int found = 0;
  check(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub_value, &found), "create communicator");
  if (found) tag_ub = *tag_ub_value;
}

CommState::~CommState() { close(); }

void CommState::close() {
  if (closed()) return;
  if (mpi_finalized()) {  // too late to free anything; the process is ending
    comm = MPI_COMM_NULL;
    return;
  }
  reap_graveyard();
  for (auto& op : graveyard_) bury_globally(std::move(op));
  graveyard_.clear();
  const int rc = MPI_Comm_free(&comm);
  if (rc != MPI_SUCCESS) {  // destructors do not throw: report, drop the handle
    std::fprintf(stderr, "strata: MPI_Comm_free of group '%s' failed%s: %s\n", name.c_str(),
                 where().c_str(), mpi_error_string(rc).c_str());
  }
  comm = MPI_COMM_NULL;
}

std::string CommState::describe_rank(int group_rank) const {
  const int world = group_rank >= 0 && group_rank < size ? world_ranks[group_rank] : -1;
  return str("rank ", group_rank, " (world rank ", world, ")");
}

std::string CommState::where() const { return " on " + describe_rank(rank); }

void CommState::check(int rc, const std::string& op, int peer) const {
  if (rc == MPI_SUCCESS) return;
  std::string peer_text = peer >= 0 ? ", peer " + describe_rank(peer) : "";
  throw CommError(
      str(op, " on group '", name, "' failed", where(), peer_text, ": ", mpi_error_string(rc)));
}

double CommState::resolve_timeout(const CommOptions& options, const std::string& op) const {
  if (options.timeout_s < 0) return default_timeout_s;
  STRATA_REQUIRE(options.timeout_s > 0, op, " on group '", name, "': timeout_s (",
                 options.timeout_s, ") must be > 0 (or < 0 for the group's default)");
  return options.timeout_s;
}

std::unique_ptr<InFlight> CommState::begin(const std::string& op, OpCode code,
                                           const CommOptions& options) {
  STRATA_CHECK(!closed(), op, " on a destroyed communicator");
  auto flight = std::make_unique<InFlight>();
  flight->op = op;
  flight->code = code;
  flight->timeout_s = resolve_timeout(options, op);
  reap_graveyard();
  if (code != OpCode::None) {
    flight->seq = ++seq;
    publish_census(group_id_, code, flight->seq);
  }
  flight->started = Clock::now();
  return flight;
}

void CommState::record_posted(InFlight& op) const {
  const int peer_world_rank = op.peer >= 0 && op.peer < size ? world_ranks[op.peer] : -1;
  const int64_t bytes = op.buffers.empty() ? 0 : static_cast<int64_t>(op.buffers[0].nbytes());
  op.flight_id = flight_posted(op.op, name, peer_world_rank, op.tag, op.seq, bytes);
}

int64_t CommState::agree_on_group_id(const std::string& op) {
  auto agreement = begin(op, OpCode::Split, {});
  auto id = at::full({1}, next_census_group_id(), at::kLong);
  MPI_Request request;
  check(MPI_Iallreduce(MPI_IN_PLACE, id.data_ptr(), 1, MPI_INT64_T, MPI_MAX, comm, &request), op);
  agreement->requests.push_back(request);
  agreement->buffers.push_back(id);
  record_posted(*agreement);
  wait_in_flight(*this, agreement);
  const int64_t agreed = id.item<int64_t>();
  set_next_census_group_id(agreed + 1);
  return agreed;
}

void CommState::join_census(int64_t id) {
  if (size == 1 || !census_board_open()) return;  // nobody to wait for, or no board
  group_id_ = id;
  publish_census(group_id_, OpCode::None, seq);
}

std::string CommState::census(int64_t my_seq, OpCode code) {
  const std::string prefix = "ranks that had not arrived: ";
  if (group_id_ < 0) {
    return prefix + (census_board_open() ? "unknown (the group was still being created)"
                                         : "unknown (no census board)");
  }
  std::vector<CensusEntry> entries;
  std::string failure;
  if (!read_census(group_id_, world_ranks, &entries, &failure)) {
    return prefix + "unknown (census failed: " + failure + ")";
  }
  std::vector<int> missing, missing_world, silent, silent_world;
  std::string mismatches;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const CensusEntry& entry = entries[peer];
    if (!entry.answered) {
      silent.push_back(peer);
      silent_world.push_back(world_ranks[peer]);
      continue;
    }
    // A slot of another group: the peer has not even created this one.
    if (entry.group_id != group_id_ || entry.seq < my_seq) {
      missing.push_back(peer);
      missing_world.push_back(world_ranks[peer]);
    } else if (entry.seq == my_seq && entry.code != code) {
      mismatches += str("; rank ", peer, " entered ", op_code_name(entry.code), " as collective #",
                        my_seq, " instead (mismatched collectives)");
    }
  }
  std::string text;
  if (!missing.empty()) {
    text = prefix + describe_ranks(missing, missing_world);
  } else if (silent.empty()) {
    text = str(prefix, "none (every rank entered collective #", my_seq,
               " of this group; it stalled inside MPI)");
  } else {
    text = prefix + "none of those that answered";
  }
  if (!silent.empty()) {
    text += str("; ranks ", describe_ranks(silent, silent_world),
                " did not answer the census (a host that cannot be reached, or a stopped rank)");
  }
  return text + mismatches;
}

void CommState::bury(std::unique_ptr<InFlight> op) {
  if (closed()) return bury_globally(std::move(op));
  graveyard_.push_back(std::move(op));
}

namespace {
// True when every request of `op` has completed (one that failed has completed too: MPI
// no longer touches its buffers).
bool abandoned_op_finished(InFlight& op) {
  for (MPI_Request& request : op.requests) {
    if (request == MPI_REQUEST_NULL) continue;
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      request = MPI_REQUEST_NULL;
    } else if (!done) {
      return false;
    }
  }
  return true;
}

void reap(std::vector<std::unique_ptr<InFlight>>& graveyard) {
  graveyard.erase(std::remove_if(graveyard.begin(), graveyard.end(),
                                 [](auto& op) { return abandoned_op_finished(*op); }),
                  graveyard.end());
}

std::vector<std::unique_ptr<InFlight>>& global_graveyard() {
  static std::vector<std::unique_ptr<InFlight>> graveyard;
  return graveyard;
}
}  // namespace

void CommState::reap_graveyard() {
  if (!graveyard_.empty()) reap(graveyard_);
}

void bury_globally(std::unique_ptr<InFlight> op) { global_graveyard().push_back(std::move(op)); }

void drain_global_graveyard(double seconds) {
  auto& graveyard = global_graveyard();
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (!graveyard.empty()) {
    reap(graveyard);
    if (Clock::now() >= deadline) break;
  }
  if (graveyard.empty()) return;
  std::string ops;
  for (auto& op : graveyard) ops += (ops.empty() ? "" : ", ") + op->op;
  std::fprintf(stderr,
               "strata: %zu abandoned communication(s) still in flight at MPI finalization (%s); "
               "their buffers are left allocated\n",
               graveyard.size(), ops.c_str());
  for (auto& op : graveyard) static_cast<void>(op.release());  // MPI may still write there
  graveyard.clear();
}

}  // namespace strata::dist_internal
