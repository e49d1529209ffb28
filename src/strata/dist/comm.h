// Comm: every byte that crosses processes goes through here (only dist/ includes <mpi.h>).
// A Comm owns a duplicated MPI communicator (freed on destruction) and offers collectives
// and point-to-point on contiguous CPU at::Tensors (float32, float64, bfloat16, int64, ...).
//
// Contracts (c10d-style):
//  - Every operation has a timeout (CommOptions::timeout_s, default from the Comm). A blocking
//    call that does not complete in time throws CommError naming the op, the group, this
//    rank and the ranks of the group that had not arrived at that collective.
//  - Every MPI error becomes CommError naming the op, group, rank, peer and MPI's message.
//  - Non-blocking calls return a Work; wait() returns when done, throws CommError on error
//    or timeout. Destroying a Work that was never waited on is a bug: it aborts loudly.
//  - The tensors passed to a non-blocking call must stay alive and untouched until wait().
//  - Byte counters: bytes this rank sent, per kind of operation (see CommKind), for metrics.
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

struct CommOptions {
  double timeout_s = -1;  // < 0: the Comm's default timeout
};

class Work {
 public:
  class Impl;
  Work();
  explicit Work(std::unique_ptr<Impl> impl);
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  ~Work();
  void wait();             // blocks until done; throws CommError on failure or timeout
  bool is_completed();     // non-blocking test
  bool valid() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// Bytes sent by this rank, per kind, since the counters were last reset. Shared by a Comm
// and every Comm split from it, so the world's counters see every group's traffic.
struct CommCounters {
  std::array<int64_t, static_cast<size_t>(CommKind::Count)> bytes{};
  std::array<int64_t, static_cast<size_t>(CommKind::Count)> calls{};
  void reset() { bytes.fill(0); calls.fill(0); }
  int64_t total_bytes() const;
};

class Comm {
 public:
  // The world communicator (MPI must be initialized; see init_mpi in dist/runtime.h).
  static Comm world(double default_timeout_s = 300.0);

  Comm(Comm&&) noexcept;
  Comm& operator=(Comm&&) noexcept;
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;  // group name used in messages, e.g. "world", "tp"
  double default_timeout_s() const;
  void set_default_timeout_s(double seconds);

  // New communicator of the ranks with the same color, ordered by key. Collective over this.
  Comm split(int color, int key, const std::string& name) const;
  // Global (world) rank of group rank r, for messages.
  int world_rank_of(int group_rank) const;

  // In place. Avg divides by size() after summing.
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
  // recv_counts[i] rows of output come from rank i. Counts are in rows (dim-0 slices).
  void all_to_all_v(at::Tensor& output, const at::Tensor& input,
                    const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& recv_counts, CommOptions options = {});

  void broadcast(at::Tensor& tensor, int root, CommOptions options = {});
  void barrier(CommOptions options = {});

  void send(const at::Tensor& tensor, int peer, int tag = 0, CommOptions options = {});
  void recv(at::Tensor& tensor, int peer, int tag = 0, CommOptions options = {});
  Work isend(const at::Tensor& tensor, int peer, int tag = 0, CommOptions options = {});
  Work irecv(at::Tensor& tensor, int peer, int tag = 0, CommOptions options = {});

  CommCounters& counters();
  const CommCounters& counters() const;

  class Impl;

 private:
  explicit Comm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
