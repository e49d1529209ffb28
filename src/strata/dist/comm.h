// Comm: every byte that crosses processes goes through here (only dist/ includes <mpi.h>).
// A Comm owns a duplicated MPI communicator (freed on destruction) and offers collectives
// and point-to-point on contiguous CPU at::Tensors: float32, float64, bfloat16, float16,
// int8, int16, int32, int64, uint8 and bool. bfloat16/float16 move 2 bytes per element and
// reduce in float, rounding back to nearest-even (user-defined MPI operations).
//
// Contracts (c10d-style; docs/communication.md has the long form):
//  - Every operation has a timeout (CommOptions::timeout_s, default from the Comm). A blocking
//    call that does not complete in time throws CommError naming the op, the group, this
//    rank and the ranks of the group that had not arrived at that collective, e.g.
//    "all_reduce on group 'tp' timed out after 1.0 s on rank 3 (world rank 3); ranks that
//    had not arrived: [1]". A timed-out operation stays posted: its buffers are kept alive
//    until a late peer completes it, and the group stays usable (the late rank's entry
//    completes the abandoned collective). Until then MPI may still write into the tensors
//    of a timed-out call: treat their contents as undefined.
//  - Every MPI error becomes CommError naming the op, group, rank, peer and MPI's message.
//  - Bad arguments (undefined, non-CPU, non-contiguous or overlapping tensors, unsupported
//    dtypes, mismatched dtypes or sizes, ranks or counts out of range, Avg on integers)
//    throw UserError quoting the numbers, before anything is sent.
//  - Non-blocking calls return a Work; wait() returns when done, throws CommError on error
//    or timeout. Destroying a Work that is still in flight is a bug: it aborts loudly.
//    The timeout of a non-blocking call counts from the call that posted it.
//  - The tensors passed to a non-blocking call must stay alive and untouched until wait().
//    (Work keeps a reference, so they are not freed early; touching them is still a race.)
//  - Collectives on a group must be called in the same order by every member (as in MPI).
//    Creating a Comm (world, split) is collective over the group as well. Destroying one
//    frees its communicator without waiting for the peers, so a rank unwinding from an
//    error never hangs in a destructor.
//  - Single-threaded: call a Comm only from the thread that initialized MPI (FUNNELED).
//  - Tensors with zero elements are fine everywhere.
//  - Byte counters: bytes this rank sent, per kind of operation (see CommKind), for metrics,
//    counted when the operation is posted, as the bandwidth-optimal (ring) algorithm would
//    send them, whatever algorithm MPI actually picks. With N the tensor's bytes, n the group
//    size and r this rank, a ring splits N into n chunks c_0..c_{n-1} of as-equal-as-possible
//    element counts (the first N/elem % n chunks one element larger):
//      all_reduce      2N - c_r - c_{(r+1)%n}      (= 2(n-1)/n * N when n divides the elements)
//      reduce_scatter  input_bytes - output_bytes  (= (n-1)/n * input_bytes)
//      all_gather      output_bytes - input_bytes  (= (n-1)/n * output_bytes)
//      all_to_all(_v)  bytes of the rows sent to the other ranks
//      broadcast       N - c_r on every rank, root included (the (n-1)N every broadcast
//                      must move, spread evenly: (n-1)/n * N each)
//      send            N (0 to oneself); recv and barrier 0
//    A group of one rank sends 0 bytes. Calls count every operation posted (send and recv
//    both count as a SendRecv call). Summed over the ranks, all_reduce gives 2(n-1)N.
#pragma once
#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata {

enum class ReduceOp { Sum, Avg, Max, Min };

enum class CommKind {
  AllReduce,
  ReduceScatter,
  AllGather,
  AllToAll,
  Broadcast,
  SendRecv,
  Barrier,
  Count
};
const char* comm_kind_name(CommKind kind);  // "all_reduce", "reduce_scatter", ...

// The bytes rank r's counters charge an all_reduce of `elements` elements of `element_size`
// bytes over n ranks: 2N - c_r - c_{(r+1) mod n} (ring chunks; 0 when n = 1). Compression
// (data_parallel/) prices the uncompressed exchange it replaced with it.
int64_t all_reduce_bytes(int64_t elements, int64_t element_size, int n, int r);

struct CommOptions {
  // < 0: the Comm's default timeout; otherwise > 0 seconds (infinity: wait forever).
  double timeout_s = -1;
};

class Work {
 public:
  class Impl;
  Work();
  explicit Work(std::unique_ptr<Impl> impl);
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  ~Work();
  // Blocks until done; throws CommError on failure or timeout (and again on a later wait()).
  // Returns at once when already done. wait() on an empty Work is a bug (InternalError).
  void wait();
  // Non-blocking test: true once the operation finished, successfully or not (a failure is
  // then thrown by wait()). Does not enforce the timeout.
  bool is_completed();
  bool valid() const;  // false for a default-constructed or moved-from Work

 private:
  std::unique_ptr<Impl> impl_;
};

// Bytes sent by this rank, per kind, since the counters were last reset. Shared by a Comm
// and every Comm split from it, so the world's counters see every group's traffic.
struct CommCounters {
  std::array<int64_t, static_cast<size_t>(CommKind::Count)> bytes{};
  std::array<int64_t, static_cast<size_t>(CommKind::Count)> calls{};
  // Seconds this rank spent blocked in wait() (every blocking call is a post plus a wait):
  // the communication time not hidden behind computation, including waiting for late peers.
  std::array<double, static_cast<size_t>(CommKind::Count)> wait_s{};
  void reset() {
    bytes.fill(0);
    calls.fill(0);
    wait_s.fill(0);
  }
  int64_t total_bytes() const;
  double total_wait_s() const;
};

class Comm {
 public:
  // The world communicator (MPI must be initialized; see init_mpi in dist/runtime.h).
  // Each call duplicates MPI_COMM_WORLD and starts fresh counters.
  static Comm world(double default_timeout_s = 300.0);

  Comm();  // empty: valid() is false (e.g. the result of split for a negative color)

  Comm(Comm&&) noexcept;
  Comm& operator=(Comm&&) noexcept;
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  bool valid() const;
  int rank() const;
  int size() const;
  const std::string& name() const;  // group name used in messages, e.g. "world", "tp"
  double default_timeout_s() const;
  void set_default_timeout_s(double seconds);

  // New communicator of the ranks with the same color, ordered by key (ties by rank here),
  // sharing this Comm's counters and default timeout. Collective over this Comm: the ranks
  // first meet in a timed barrier (so a missing rank is reported, not waited for forever).
  // A negative color returns an empty Comm on that rank.
  Comm split(int color, int key, const std::string& name) const;
  // Global (world) rank of group rank r, for messages.
  int world_rank_of(int group_rank) const;

  // In place. Avg divides by size() after summing (floating-point dtypes only). For bool,
  // Sum and Max are "or", Min is "and".
  void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::Sum, CommOptions options = {});
  Work iall_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::Sum, CommOptions options = {});

  // input: size() equal chunks along dim 0 (numel divisible by size()); output: this rank's
  // chunk, reduced. output.numel() * size() == input.numel().
  void reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op = ReduceOp::Sum,
                      CommOptions options = {});
  Work ireduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op = ReduceOp::Sum,
                       CommOptions options = {});

  // output = concat over ranks (rank order) of input along dim 0.
  void all_gather(at::Tensor& output, const at::Tensor& input, CommOptions options = {});
  Work iall_gather(at::Tensor& output, const at::Tensor& input, CommOptions options = {});

  // Equal splits: input and output hold size() equal chunks along dim 0; chunk j of input
  // goes to rank j, chunk i of output came from rank i.
  void all_to_all(at::Tensor& output, const at::Tensor& input, CommOptions options = {});
  // Variable splits along dim 0: send_counts[j] rows of input go to rank j (in order);
  // recv_counts[i] rows of output come from rank i. Counts are in rows (dim-0 slices);
  // input and output have the same row shape; sum(send_counts) == input.size(0),
  // sum(recv_counts) == output.size(0). recv_counts[i] must equal rank i's send_counts[me]
  // (exchange counts first, e.g. with all_to_all on an int64 tensor).
  void all_to_all_v(at::Tensor& output, const at::Tensor& input,
                    const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& recv_counts, CommOptions options = {});

  // tensor: root's data is copied into every rank's tensor (same shape and dtype everywhere).
  void broadcast(at::Tensor& tensor, int root, CommOptions options = {});
  void barrier(CommOptions options = {});

  // Point-to-point with group ranks; recv's tensor must have exactly the numel sent (else
  // CommError). Tags run from 0 to MPI's limit (at least 32767).
  void send(const at::Tensor& tensor, int peer, int tag = 0, CommOptions options = {});
  void recv(at::Tensor& tensor, int peer, int tag = 0, CommOptions options = {});
  Work isend(const at::Tensor& tensor, int peer, int tag = 0, CommOptions options = {});
  Work irecv(at::Tensor& tensor, int peer, int tag = 0, CommOptions options = {});

  CommCounters& counters();
  const CommCounters& counters() const;

  // Timed-out operations of this group that MPI has not completed yet (their buffers are
  // still held). Drops to 0 once the late peers have caught up.
  int64_t abandoned_in_flight() const;

  class Impl;

 private:
  explicit Comm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
