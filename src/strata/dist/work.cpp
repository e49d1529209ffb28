// Completion of posted operations: the polling wait loop every blocking call runs (MPI has
// no wait-with-timeout), the timeout message with its census, and the Work handle.
#include <sched.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>

#include "strata/core/error.h"
#include "strata/dist/mpi_internal.h"

namespace strata::dist_internal {
namespace {

// Spin while an operation is young (latency), yield the core once it waited a millisecond
// (oversubscribed ranks), and sleep briefly once it waited a second (a late peer).
// MPI progresses nonblocking collectives only inside MPI calls, so the poll never stops.
void pause_between_polls(Clock::duration waited) {
  using namespace std::chrono_literals;
  if (waited < 1ms) return;
  if (waited < 1s) {
    sched_yield();
    return;
  }
  const timespec nap{0, 50 * 1000};
  nanosleep(&nap, nullptr);
}

Clock::time_point deadline_of(const InFlight& op) {
  constexpr double kForever = 1e9;  // ~30 years: treat as no deadline, avoid overflow
  if (!(op.timeout_s < kForever)) return Clock::time_point::max();
  return op.started +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(op.timeout_s));
}

bool is_send(const InFlight& op) { return op.op == "send"; }

// "recv from rank 1 (world rank 1)", "all_reduce"
std::string op_title(const CommState& comm, const InFlight& op) {
  if (op.peer < 0) return op.op;
  return str(op.op, is_send(op) ? " to " : " from ", comm.describe_rank(op.peer), " (tag ", op.tag,
             ")");
}

[[noreturn]] void throw_timeout(CommState& comm, std::unique_ptr<InFlight>& op) {
  std::string message = str(op_title(comm, *op), " on group '", comm.name, "' timed out after ",
                            format_seconds(op->timeout_s), comm.where(), "; ");
  flight_finished(op->flight_id, "timed out");
  if (op->code != OpCode::None) {
    message += comm.census(op->seq, op->code);
  } else {
    message += is_send(*op) ? "the peer had not received the message"
                            : "the peer had not sent a matching message";
  }
  comm.bury(std::move(op));
  throw CommError(message);
}

}  // namespace

bool test_in_flight(CommState& comm, std::unique_ptr<InFlight>& op) {
  for (MPI_Request& request : op->requests) {
    if (request == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Status status;
    const int rc = MPI_Test(&request, &done, &status);
    if (rc != MPI_SUCCESS) {
      const std::string title = op_title(comm, *op);
      flight_finished(op->flight_id, "failed");
      comm.bury(std::move(op));  // other requests of the op may still be running
      comm.check(rc, title);
    }
    if (!done) return false;
    if (op->expected_recv_count >= 0) {
      int received = 0;
      comm.check(MPI_Get_count(&status, op->recv_type, &received), op_title(comm, *op));
      if (received != op->expected_recv_count) {
        const std::string message =
            str(op_title(comm, *op), " on group '", comm.name, "'", comm.where(), ": expected ",
                op->expected_recv_count, " elements, received ", received);
        flight_finished(op->flight_id, "failed");
        op.reset();
        throw CommError(message);
      }
    }
  }
  flight_finished(op->flight_id, "done");
  std::function<void()> on_success = std::move(op->on_success);
  op.reset();
  if (on_success) on_success();
  return true;
}

void wait_in_flight(CommState& comm, std::unique_ptr<InFlight>& op) {
  const Clock::time_point deadline = deadline_of(*op);
  for (;;) {
    if (test_in_flight(comm, op)) return;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) throw_timeout(comm, op);
    pause_between_polls(now - op->started);
  }
}

}  // namespace strata::dist_internal

namespace strata {
namespace {

// A Work dropped while MPI may still use its buffers is a bug that would corrupt memory
// later; fail here, loudly, naming the op.
void abort_if_in_flight(std::unique_ptr<Work::Impl>& impl) {
  if (!impl || !impl->op) return;
  if (!dist_internal::mpi_finalized()) {
    try {
      if (dist_internal::test_in_flight(*impl->comm, impl->op)) return;
    } catch (const std::exception&) {
      return;  // it failed, so it is no longer in flight; the error had no one to go to
    }
  }
  std::fprintf(stderr,
               "strata: bug: the Work of %s on group '%s'%s was destroyed while still in "
               "flight (wait() was never called); aborting\n",
               impl->op->op.c_str(), impl->comm->name.c_str(), impl->comm->where().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace

Work::Work() = default;
Work::Work(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    abort_if_in_flight(impl_);
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Work::~Work() { abort_if_in_flight(impl_); }

namespace {
CommKind kind_of(dist_internal::OpCode code) {
  using dist_internal::OpCode;
  switch (code) {
    case OpCode::AllReduce:
      return CommKind::AllReduce;
    case OpCode::ReduceScatter:
      return CommKind::ReduceScatter;
    case OpCode::AllGather:
      return CommKind::AllGather;
    case OpCode::AllToAll:
    case OpCode::AllToAllV:
      return CommKind::AllToAll;
    case OpCode::Broadcast:
      return CommKind::Broadcast;
    case OpCode::Barrier:
    case OpCode::Split:
      return CommKind::Barrier;
    case OpCode::None:
      break;
  }
  return CommKind::SendRecv;
}
}  // namespace

void Work::wait() {
  STRATA_CHECK(impl_ != nullptr, "wait() on an empty Work (default-constructed or moved from)");
  if (!impl_->error.empty()) throw CommError(impl_->error);
  if (!impl_->op) return;
  dist_internal::CommState& comm = *impl_->comm;
  const auto kind = static_cast<size_t>(kind_of(impl_->op->code));
  const auto start = dist_internal::Clock::now();
  struct AddWait {  // also when the wait throws
    double& total;
    dist_internal::Clock::time_point start;
    ~AddWait() {
      total += std::chrono::duration<double>(dist_internal::Clock::now() - start).count();
    }
  } add_wait{comm.counters->wait_s[kind], start};
  try {
    dist_internal::wait_in_flight(comm, impl_->op);
  } catch (const CommError& error) {
    impl_->error = error.what();
    throw;
  }
}

bool Work::is_completed() {
  STRATA_CHECK(impl_ != nullptr,
               "is_completed() on an empty Work (default-constructed or moved from)");
  if (!impl_->op) return true;
  try {
    return dist_internal::test_in_flight(*impl_->comm, impl_->op);
  } catch (const CommError& error) {
    impl_->error = error.what();  // wait() throws it
    return true;
  }
}

bool Work::valid() const { return impl_ != nullptr; }

}  // namespace strata
