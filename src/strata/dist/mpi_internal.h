// Internal to dist/ (the only folder that includes <mpi.h>): the shared state behind a Comm,
// one posted operation (InFlight), the polling wait loop with its timeout census, and the
// mapping of ATen dtypes and ReduceOps to MPI datatypes and operations.
#pragma once
// C bindings only: Open MPI's deprecated C++ bindings would need libmpi_cxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/dist/comm.h"

namespace strata::dist_internal {

using Clock = std::chrono::steady_clock;

// What a rank last entered on a group, published on the census board (see below).
enum class OpCode : int64_t {
  None = 0,
  AllReduce,
  ReduceScatter,
  AllGather,
  AllToAll,
  AllToAllV,
  Broadcast,
  Barrier,
  Split,
};
const char* op_code_name(OpCode code);

// One posted MPI operation and everything MPI may still read or write while it runs.
struct InFlight {
  std::string op;              // the public name: "all_reduce", "send", "recv", ...
  OpCode code = OpCode::None;  // None for point-to-point
  int64_t seq = 0;             // collective number on the group (collectives only)
  int peer = -1;               // group rank of the point-to-point peer, else -1
  int tag = 0;
  std::vector<MPI_Request> requests;
  std::vector<at::Tensor> buffers;             // keep their storage alive until MPI is done
  std::vector<std::vector<int>> int_arrays;    // counts/displacements of *v collectives
  MPI_Datatype recv_type = MPI_DATATYPE_NULL;  // recv: checks the received element count
  int64_t expected_recv_count = -1;
  std::function<void()> on_success;  // runs once when every request completed (e.g. Avg)
  Clock::time_point started;
  double timeout_s = 0;
  int64_t flight_id = -1;  // its entry in the flight record, once posted
};

// The state of one communicator, shared by its Comm and the Works it issued (a Work may
// outlive a failed Comm call, and must still find the group's name and census).
class CommState {
 public:
  // Takes ownership of `comm` (already duplicated or split). Local: no communication.
  CommState(MPI_Comm comm, std::string name, double default_timeout_s,
            std::shared_ptr<CommCounters> counters);
  ~CommState();
  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;

  // Frees the communicator (MPI_Comm_free, which does not wait for the peers); moves
  // still-running abandoned operations to the process-wide graveyard. Idempotent; a no-op
  // after MPI_Finalize.
  void close();
  bool closed() const { return comm == MPI_COMM_NULL; }

  // " on rank 3 (world rank 5)"
  std::string where() const;
  // "rank 1 (world rank 5)" for a group rank.
  std::string describe_rank(int group_rank) const;
  // Throws CommError naming op, group, this rank, the peer and MPI's message.
  void check(int rc, const std::string& op, int peer = -1) const;

  double resolve_timeout(const CommOptions& options, const std::string& op) const;
  // Starts an operation: bumps and publishes the sequence number for collectives, reaps the
  // graveyard. The caller fills in requests and buffers.
  std::unique_ptr<InFlight> begin(const std::string& op, OpCode code, const CommOptions& options);
  // Enters a posted operation (requests and buffers filled in) in the flight record.
  void record_posted(InFlight& op) const;
  // "ranks that had not arrived: [1]" (and more) for collective `seq`.
  std::string census(int64_t seq, OpCode code);
  // A timed collective over this group that agrees on a fresh census group id (the largest
  // next id of any member) and advances this process's next id past it. `op` names it in
  // errors (the split it prepares).
  int64_t agree_on_group_id(const std::string& op);
  // Takes census slot `id` (agreed by every member); groups of one rank take none.
  void join_census(int64_t id);

  // Keeps an abandoned (timed-out) operation alive until MPI completes it.
  void bury(std::unique_ptr<InFlight> op);
  void reap_graveyard();
  int64_t graveyard_size() const { return static_cast<int64_t>(graveyard_.size()); }

  MPI_Comm comm = MPI_COMM_NULL;
  std::string name;
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;  // world rank of each group rank
  double default_timeout_s = 300.0;
  std::shared_ptr<CommCounters> counters;
  int tag_ub = 32767;  // the largest tag MPI accepts on this communicator
  int64_t seq = 0;     // collectives entered on this group

 private:
  int64_t group_id_ = -1;  // census slot owner id; -1: no census for this group
  std::vector<std::unique_ptr<InFlight>> graveyard_;
};

// The census board: one RMA window over a duplicate of MPI_COMM_WORLD, opened by init_mpi
// and freed by finalize_mpi (both collective anyway), so no Comm has to free a window.
// Each rank holds kCensusSlots slots of {group id, op code, sequence number}; a group with
// id g uses slot g % kCensusSlots on each member. Entering a collective writes this rank's
// slot (a local store, no communication). A rank whose collective timed out reads the
// members' slots with MPI_Rget (passive target, under MPI_Win_lock_all): a member whose
// slot has another group id (it has not created the group yet) or a lower sequence number
// had not arrived. The reads are polled one by one with a deadline: a member whose read does
// not complete in time (a stopped rank, an unreachable host, or a transport that needs the
// target's own progress) is reported as not answering, never waited for.
constexpr int64_t kCensusSlots = 1024;
void open_census_board();   // collective over MPI_COMM_WORLD; no-op when open
void close_census_board();  // collective over MPI_COMM_WORLD; no-op when closed
bool census_board_open();
// The host (MPI_Get_processor_name) of each world rank, gathered when the board opens; empty
// before. True when the world spans more than one host.
const std::vector<std::string>& world_hosts();
bool world_spans_hosts();
int64_t next_census_group_id();
void set_next_census_group_id(int64_t id);
void publish_census(int64_t group_id, OpCode code, int64_t seq);
struct CensusEntry {
  int64_t group_id = -1;
  OpCode code = OpCode::None;
  int64_t seq = 0;
  bool answered = true;  // false: the read of this rank's slot did not complete in time
};
// The slots of `group_id` on each of `world_ranks`; a rank whose slot could not be read in
// time (a stopped rank, an unreachable host, on a transport that needs the target's progress)
// comes back with answered = false. On failure returns false and says why.
bool read_census(int64_t group_id, const std::vector<int>& world_ranks,
                 std::vector<CensusEntry>* entries, std::string* failure);

// Polls `op` until its requests completed (runs on_success, resets op) or its deadline
// passed (census, bury, throw CommError). MPI errors throw CommError.
void wait_in_flight(CommState& comm, std::unique_ptr<InFlight>& op);
// One test of every request; true (and on_success run, op reset) when all completed.
bool test_in_flight(CommState& comm, std::unique_ptr<InFlight>& op);

// Process-wide graveyard for abandoned operations of destroyed Comms.
void bury_globally(std::unique_ptr<InFlight> op);
// Waits up to `seconds` for globally buried operations; leaks (never frees) the rest.
void drain_global_graveyard(double seconds);

// The flight record (flight_record.h): an operation posted, and how it ended ("done",
// "failed", "timed out"). flight_posted returns the id flight_finished takes.
int64_t flight_posted(const std::string& op, const std::string& group, int peer_world_rank, int tag,
                      int64_t seq, int64_t bytes);
void flight_finished(int64_t id, const char* state);

bool mpi_finalized();
std::string mpi_error_string(int rc);
// "1.0 s", "0.25 s"
std::string format_seconds(double seconds);

// Datatypes and reductions. bfloat16 and float16 travel as 2-byte MPI_UINT16_T elements
// and reduce with user-defined operations that compute in float and round back.
MPI_Datatype mpi_datatype_of(at::ScalarType dtype);   // MPI_DATATYPE_NULL if unsupported
MPI_Op mpi_op_of(ReduceOp op, at::ScalarType dtype);  // MPI_OP_NULL if unsupported
void free_custom_ops();

}  // namespace strata::dist_internal

namespace strata {

class Work::Impl {
 public:
  Impl(std::shared_ptr<dist_internal::CommState> comm_state,
       std::unique_ptr<dist_internal::InFlight> in_flight)
      : comm(std::move(comm_state)), op(std::move(in_flight)) {}
  std::shared_ptr<dist_internal::CommState> comm;
  std::unique_ptr<dist_internal::InFlight> op;  // null once it finished or was abandoned
  std::string error;                            // the CommError message, once it failed
};

}  // namespace strata
