// Comm's operations. Each one validates its arguments (UserError, before anything is sent),
// counts its ring-algorithm bytes, posts the nonblocking MPI call and returns a Work; the
// blocking form is that Work's wait(), whose polling loop enforces the timeout.
#include <ATen/core/grad_mode.h>

#include <climits>
#include <numeric>

#include "strata/core/error.h"
#include "strata/dist/mpi_internal.h"
#include "strata/dist/runtime.h"

namespace strata {

using dist_internal::CommState;
using dist_internal::InFlight;
using dist_internal::OpCode;

class Comm::Impl {
 public:
  explicit Impl(std::shared_ptr<CommState> comm_state) : state(std::move(comm_state)) {}
  std::shared_ptr<CommState> state;
};

const char* comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::AllReduce:
      return "all_reduce";
    case CommKind::ReduceScatter:
      return "reduce_scatter";
    case CommKind::AllGather:
      return "all_gather";
    case CommKind::AllToAll:
      return "all_to_all";
    case CommKind::Broadcast:
      return "broadcast";
    case CommKind::SendRecv:
      return "send_recv";
    case CommKind::Barrier:
      return "barrier";
    case CommKind::Count:
      break;
  }
  return "unknown";
}

int64_t CommCounters::total_bytes() const {
  return std::accumulate(bytes.begin(), bytes.end(), int64_t{0});
}

double CommCounters::total_wait_s() const {
  return std::accumulate(wait_s.begin(), wait_s.end(), 0.0);
}

namespace {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "Sum";
    case ReduceOp::Avg:
      return "Avg";
    case ReduceOp::Max:
      return "Max";
    case ReduceOp::Min:
      return "Min";
  }
  return "?";
}

// "all_gather on group 'tp'": the start of every argument error.
std::string on_group(const CommState& comm, const std::string& op) {
  return str(op, " on group '", comm.name, "'");
}

// role: "output", "input", or "" for the one tensor of an in-place op.
void require_tensor(const CommState& comm, const std::string& op, const std::string& role,
                    const at::Tensor& tensor) {
  const std::string the_tensor =
      on_group(comm, op) + ": the " + role + (role.empty() ? "" : " ") + "tensor";
  STRATA_REQUIRE(tensor.defined(), the_tensor, " is undefined");
  STRATA_REQUIRE(tensor.layout() == at::kStrided, the_tensor, " must be dense (got layout ",
                 tensor.layout(), ")");
  STRATA_REQUIRE(tensor.device().is_cpu(), the_tensor, " must be on the CPU (got ", tensor.device(),
                 ")");
  STRATA_REQUIRE(tensor.is_contiguous(), the_tensor, " must be contiguous (sizes ", tensor.sizes(),
                 ", strides ", tensor.strides(), "); pass .contiguous()");
  STRATA_REQUIRE(dist_internal::mpi_datatype_of(tensor.scalar_type()) != MPI_DATATYPE_NULL,
                 the_tensor, " has dtype ", tensor.scalar_type(),
                 "; supported: float32, float64, bfloat16, float16, int8, int16, int32, int64, "
                 "uint8, bool");
}

void require_same_dtype(const CommState& comm, const std::string& op, const at::Tensor& output,
                        const at::Tensor& input) {
  STRATA_REQUIRE(output.scalar_type() == input.scalar_type(), on_group(comm, op), ": output dtype ",
                 output.scalar_type(), " differs from input dtype ", input.scalar_type());
}

// MPI counts are C ints.
int mpi_count(const CommState& comm, const std::string& op, int64_t count, const char* what) {
  STRATA_REQUIRE(count <= INT_MAX, on_group(comm, op), ": ", count, " ", what,
                 " exceed MPI's count limit (", INT_MAX, "); split the tensor");
  return static_cast<int>(count);
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto* a_begin = static_cast<const char*>(a.data_ptr());
  const auto* b_begin = static_cast<const char*>(b.data_ptr());
  return a_begin < b_begin + b.nbytes() && b_begin < a_begin + a.nbytes();
}

void require_disjoint(const CommState& comm, const std::string& op, const at::Tensor& output,
                      const at::Tensor& input) {
  STRATA_REQUIRE(!overlaps(output, input), on_group(comm, op),
                 ": output and input share memory; pass separate tensors");
}

void require_rank(const CommState& comm, const std::string& op, const char* role, int rank) {
  STRATA_REQUIRE(rank >= 0 && rank < comm.size, on_group(comm, op), ": ", role, " ", rank,
                 " is not a rank of this group of ", comm.size);
}

MPI_Datatype datatype_of(const at::Tensor& tensor) {
  return dist_internal::mpi_datatype_of(tensor.scalar_type());
}

// Elements of ring chunk i when `elements` are split over n ranks as evenly as possible.
int64_t ring_chunk(int64_t elements, int n, int i) {
  return elements / n + (i < elements % n ? 1 : 0);
}

}  // namespace

int64_t all_reduce_bytes(int64_t elements, int64_t element_size, int n, int r) {
  if (n <= 1) return 0;
  return element_size *
         (2 * elements - ring_chunk(elements, n, r) - ring_chunk(elements, n, (r + 1) % n));
}

namespace {

void count_bytes(CommState& comm, CommKind kind, int64_t bytes) {
  const auto index = static_cast<size_t>(kind);
  comm.counters->bytes[index] += comm.size > 1 ? bytes : 0;
  comm.counters->calls[index] += 1;
}

Work make_work(const std::shared_ptr<CommState>& comm, std::unique_ptr<InFlight> op) {
  comm->record_posted(*op);
  return Work(std::make_unique<Work::Impl>(comm, std::move(op)));
}

// Divides `tensor` by the group size once the sum arrived (ReduceOp::Avg).
std::function<void()> divide_by_size(at::Tensor tensor, int size) {
  return [tensor, size]() mutable {
    at::NoGradGuard no_grad;
    tensor.div_(size);
  };
}

MPI_Op reduce_op_for(const CommState& comm, const std::string& op, ReduceOp reduce,
                     const at::Tensor& tensor) {
  const MPI_Op mpi_op = dist_internal::mpi_op_of(reduce, tensor.scalar_type());
  STRATA_REQUIRE(mpi_op != MPI_OP_NULL, on_group(comm, op), ": ", reduce_op_name(reduce),
                 " is not supported on dtype ", tensor.scalar_type(),
                 reduce == ReduceOp::Avg ? " (Avg needs a floating-point dtype; use Sum)" : "");
  return mpi_op;
}

}  // namespace

Comm::Comm() = default;
Comm::Comm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Comm::Comm(Comm&&) noexcept = default;
Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->state->close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Comm::~Comm() {
  if (impl_) impl_->state->close();
}

Comm Comm::world(double default_timeout_s) {
  STRATA_REQUIRE(mpi_initialized(), "Comm::world: MPI is not initialized; call init_mpi() first");
  STRATA_REQUIRE(default_timeout_s > 0, "Comm::world: the default timeout (", default_timeout_s,
                 " s) must be > 0");
  MPI_Comm comm;
  const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) {
    throw CommError("Comm::world: MPI_Comm_dup of MPI_COMM_WORLD failed: " +
                    dist_internal::mpi_error_string(rc));
  }
  auto state = std::make_shared<CommState>(comm, "world", default_timeout_s,
                                           std::make_shared<CommCounters>());
  state->join_census(state->agree_on_group_id("create world"));
  return Comm(std::make_unique<Impl>(std::move(state)));
}

namespace {
// The state of a usable Comm; using an empty one is a bug.
CommState& usable(const std::unique_ptr<Comm::Impl>& impl) {
  STRATA_CHECK(impl != nullptr && !impl->state->closed(),
               "use of an empty Comm (default-constructed, moved from, or from a split with a "
               "negative color)");
  return *impl->state;
}
}  // namespace

bool Comm::valid() const { return impl_ != nullptr && !impl_->state->closed(); }
int Comm::rank() const { return usable(impl_).rank; }
int Comm::size() const { return usable(impl_).size; }
const std::string& Comm::name() const { return usable(impl_).name; }
double Comm::default_timeout_s() const { return usable(impl_).default_timeout_s; }
void Comm::set_default_timeout_s(double seconds) {
  CommState& comm = usable(impl_);
  STRATA_REQUIRE(seconds > 0, "group '", comm.name, "': the default timeout (", seconds,
                 " s) must be > 0");
  comm.default_timeout_s = seconds;
}
int Comm::world_rank_of(int group_rank) const {
  const CommState& comm = usable(impl_);
  require_rank(comm, "world_rank_of", "rank", group_rank);
  return comm.world_ranks[group_rank];
}
CommCounters& Comm::counters() { return *usable(impl_).counters; }
const CommCounters& Comm::counters() const { return *usable(impl_).counters; }
int64_t Comm::abandoned_in_flight() const {
  CommState& comm = usable(impl_);
  comm.reap_graveyard();
  return comm.graveyard_size();
}

Comm Comm::split(int color, int key, const std::string& name) const {
  CommState& comm = usable(impl_);
  const std::string op = "split into '" + name + "'";
  // MPI_Comm_split blocks with no timeout: first meet in a timed collective, which also
  // agrees on the new groups' census id (siblings share it: no rank is in two of them).
  const int64_t group_id = comm.agree_on_group_id(op);
  MPI_Comm child;
  comm.check(MPI_Comm_split(comm.comm, color < 0 ? MPI_UNDEFINED : color, key, &child), op);
  if (child == MPI_COMM_NULL) return Comm();
  auto state = std::make_shared<CommState>(child, name, comm.default_timeout_s, comm.counters);
  state->join_census(group_id);
  return Comm(std::make_unique<Impl>(std::move(state)));
}

void Comm::all_reduce(at::Tensor& tensor, ReduceOp op, CommOptions options) {
  iall_reduce(tensor, op, options).wait();
}

Work Comm::iall_reduce(at::Tensor& tensor, ReduceOp op, CommOptions options) {
  CommState& comm = usable(impl_);
  const std::string name = "all_reduce";
  require_tensor(comm, name, "", tensor);
  const MPI_Op mpi_op = reduce_op_for(comm, name, op, tensor);
  const int count = mpi_count(comm, name, tensor.numel(), "elements");

  auto flight = comm.begin(name, OpCode::AllReduce, options);
  const int64_t elements = tensor.numel(), n = comm.size, r = comm.rank;
  count_bytes(
      comm, CommKind::AllReduce,
      all_reduce_bytes(elements, tensor.element_size(), static_cast<int>(n), static_cast<int>(r)));
  MPI_Request request;
  comm.check(MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), count, datatype_of(tensor), mpi_op,
                            comm.comm, &request),
             name);
  flight->requests.push_back(request);
  flight->buffers.push_back(tensor);
  if (op == ReduceOp::Avg && comm.size > 1) flight->on_success = divide_by_size(tensor, comm.size);
  return make_work(impl_->state, std::move(flight));
}

void Comm::reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op,
                          CommOptions options) {
  ireduce_scatter(output, input, op, options).wait();
}

Work Comm::ireduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op,
                           CommOptions options) {
  CommState& comm = usable(impl_);
  const std::string name = "reduce_scatter";
  require_tensor(comm, name, "output", output);
  require_tensor(comm, name, "input", input);
  require_same_dtype(comm, name, output, input);
  STRATA_REQUIRE(input.numel() == output.numel() * comm.size, on_group(comm, name), ": input has ",
                 input.numel(), " elements; it must hold ", comm.size, " chunks of output's ",
                 output.numel(), " elements (", output.numel() * comm.size, ")");
  require_disjoint(comm, name, output, input);
  const MPI_Op mpi_op = reduce_op_for(comm, name, op, input);
  const int count = mpi_count(comm, name, output.numel(), "output elements");

  auto flight = comm.begin(name, OpCode::ReduceScatter, options);
  count_bytes(comm, CommKind::ReduceScatter, input.nbytes() - output.nbytes());
  MPI_Request request;
  comm.check(MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(), count,
                                       datatype_of(input), mpi_op, comm.comm, &request),
             name);
  flight->requests.push_back(request);
  flight->buffers = {output, input};
  if (op == ReduceOp::Avg && comm.size > 1) flight->on_success = divide_by_size(output, comm.size);
  return make_work(impl_->state, std::move(flight));
}

void Comm::all_gather(at::Tensor& output, const at::Tensor& input, CommOptions options) {
  iall_gather(output, input, options).wait();
}

Work Comm::iall_gather(at::Tensor& output, const at::Tensor& input, CommOptions options) {
  CommState& comm = usable(impl_);
  const std::string name = "all_gather";
  require_tensor(comm, name, "output", output);
  require_tensor(comm, name, "input", input);
  require_same_dtype(comm, name, output, input);
  STRATA_REQUIRE(output.numel() == input.numel() * comm.size, on_group(comm, name), ": output has ",
                 output.numel(), " elements; it must hold ", comm.size, " chunks of input's ",
                 input.numel(), " elements (", input.numel() * comm.size, ")");
  // In place when input is this rank's chunk of output (MPI_IN_PLACE).
  const bool in_place =
      input.numel() > 0 && input.data_ptr() == static_cast<char*>(output.data_ptr()) +
                                                   comm.rank * static_cast<int64_t>(input.nbytes());
  if (!in_place) require_disjoint(comm, name, output, input);
  const int count = mpi_count(comm, name, input.numel(), "input elements");

  auto flight = comm.begin(name, OpCode::AllGather, options);
  count_bytes(comm, CommKind::AllGather, output.nbytes() - input.nbytes());
  const MPI_Datatype type = datatype_of(input);
  MPI_Request request;
  comm.check(MPI_Iallgather(in_place ? MPI_IN_PLACE : input.data_ptr(), count, type,
                            output.data_ptr(), count, type, comm.comm, &request),
             name);
  flight->requests.push_back(request);
  flight->buffers = {output, input};
  return make_work(impl_->state, std::move(flight));
}

void Comm::all_to_all(at::Tensor& output, const at::Tensor& input, CommOptions options) {
  CommState& comm = usable(impl_);
  const std::string name = "all_to_all";
  require_tensor(comm, name, "output", output);
  require_tensor(comm, name, "input", input);
  require_same_dtype(comm, name, output, input);
  STRATA_REQUIRE(input.numel() == output.numel() && input.numel() % comm.size == 0,
                 on_group(comm, name), ": input (", input.numel(), " elements) and output (",
                 output.numel(), " elements) must be equal and divisible by the group size (",
                 comm.size, ")");
  require_disjoint(comm, name, output, input);
  const int count = mpi_count(comm, name, input.numel() / comm.size, "elements per rank");

  auto flight = comm.begin(name, OpCode::AllToAll, options);
  count_bytes(comm, CommKind::AllToAll, input.nbytes() - input.nbytes() / comm.size);
  const MPI_Datatype type = datatype_of(input);
  MPI_Request request;
  comm.check(MPI_Ialltoall(input.data_ptr(), count, type, output.data_ptr(), count, type, comm.comm,
                           &request),
             name);
  flight->requests.push_back(request);
  flight->buffers = {output, input};
  make_work(impl_->state, std::move(flight)).wait();
}

void Comm::all_to_all_v(at::Tensor& output, const at::Tensor& input,
                        const std::vector<int64_t>& send_counts,
                        const std::vector<int64_t>& recv_counts, CommOptions options) {
  CommState& comm = usable(impl_);
  const std::string name = "all_to_all_v";
  const std::string where = on_group(comm, name);
  require_tensor(comm, name, "output", output);
  require_tensor(comm, name, "input", input);
  require_same_dtype(comm, name, output, input);
  STRATA_REQUIRE(input.dim() >= 1 && output.dim() >= 1, where,
                 ": input and output need a row dimension (dim 0)");
  STRATA_REQUIRE(input.sizes().slice(1) == output.sizes().slice(1), where, ": input rows ",
                 input.sizes().slice(1), " and output rows ", output.sizes().slice(1), " differ");
  for (const auto* counts : {&send_counts, &recv_counts}) {
    const char* which = counts == &send_counts ? "send_counts" : "recv_counts";
    STRATA_REQUIRE(static_cast<int>(counts->size()) == comm.size, where, ": ", which, " has ",
                   counts->size(), " entries; the group has ", comm.size, " ranks");
    for (size_t i = 0; i < counts->size(); ++i) {
      STRATA_REQUIRE((*counts)[i] >= 0, where, ": ", which, "[", i, "] = ", (*counts)[i],
                     " is negative");
    }
    const int64_t rows = std::accumulate(counts->begin(), counts->end(), int64_t{0});
    const int64_t available = counts == &send_counts ? input.size(0) : output.size(0);
    STRATA_REQUIRE(rows == available, where, ": ", which, " sum to ", rows, " rows but the ",
                   counts == &send_counts ? "input" : "output", " has ", available);
    mpi_count(comm, name, rows, "rows");
  }
  require_disjoint(comm, name, output, input);
  const auto row_shape = input.sizes().slice(1);
  const int64_t row_elements =
      std::accumulate(row_shape.begin(), row_shape.end(), int64_t{1}, std::multiplies<>());
  const int row_count = mpi_count(comm, name, row_elements, "elements per row");

  auto flight = comm.begin(name, OpCode::AllToAllV, options);
  const int64_t rows_to_others = input.size(0) - send_counts[static_cast<size_t>(comm.rank)];
  count_bytes(comm, CommKind::AllToAll, rows_to_others * row_elements * input.element_size());
  // Counts and displacements in rows of a contiguous row datatype; MPI reads them until the
  // operation completes, so they live in the InFlight.
  auto as_ints = [](const std::vector<int64_t>& counts) {
    std::vector<int> ints(counts.begin(), counts.end());
    std::vector<int> displacements(counts.size(), 0);
    std::partial_sum(ints.begin(), ints.end() - 1, displacements.begin() + 1);
    return std::make_pair(ints, displacements);
  };
  auto [sends, send_displacements] = as_ints(send_counts);
  auto [recvs, recv_displacements] = as_ints(recv_counts);
  flight->int_arrays = {std::move(sends), std::move(send_displacements), std::move(recvs),
                        std::move(recv_displacements)};
  const auto& arrays = flight->int_arrays;
  MPI_Datatype row;
  comm.check(MPI_Type_contiguous(row_count, datatype_of(input), &row), name);
  comm.check(MPI_Type_commit(&row), name);
  MPI_Request request;
  const int post_rc =
      MPI_Ialltoallv(input.data_ptr(), arrays[0].data(), arrays[1].data(), row, output.data_ptr(),
                     arrays[2].data(), arrays[3].data(), row, comm.comm, &request);
  const int free_rc = MPI_Type_free(&row);  // allowed while in use: freed after the operation
  comm.check(post_rc, name);
  flight->requests.push_back(request);
  flight->buffers = {output, input};
  if (free_rc != MPI_SUCCESS) {
    comm.bury(std::move(flight));  // posted: its counts and tensors must outlive it
    comm.check(free_rc, name);
  }
  make_work(impl_->state, std::move(flight)).wait();
}

void Comm::broadcast(at::Tensor& tensor, int root, CommOptions options) {
  CommState& comm = usable(impl_);
  const std::string name = "broadcast";
  require_tensor(comm, name, "", tensor);
  require_rank(comm, name, "root", root);
  const int count = mpi_count(comm, name, tensor.numel(), "elements");

  auto flight = comm.begin(name, OpCode::Broadcast, options);
  count_bytes(
      comm, CommKind::Broadcast,
      tensor.element_size() * (tensor.numel() - ring_chunk(tensor.numel(), comm.size, comm.rank)));
  MPI_Request request;
  comm.check(MPI_Ibcast(tensor.data_ptr(), count, datatype_of(tensor), root, comm.comm, &request),
             name);
  flight->requests.push_back(request);
  flight->buffers.push_back(tensor);
  make_work(impl_->state, std::move(flight)).wait();
}

void Comm::barrier(CommOptions options) {
  CommState& comm = usable(impl_);
  auto flight = comm.begin("barrier", OpCode::Barrier, options);
  count_bytes(comm, CommKind::Barrier, 0);
  MPI_Request request;
  comm.check(MPI_Ibarrier(comm.comm, &request), "barrier");
  flight->requests.push_back(request);
  make_work(impl_->state, std::move(flight)).wait();
}

void Comm::send(const at::Tensor& tensor, int peer, int tag, CommOptions options) {
  isend(tensor, peer, tag, options).wait();
}
void Comm::recv(at::Tensor& tensor, int peer, int tag, CommOptions options) {
  irecv(tensor, peer, tag, options).wait();
}

namespace {
// Validates a point-to-point call and starts its InFlight (no collective sequence number).
std::unique_ptr<InFlight> begin_point_to_point(CommState& comm, const std::string& name,
                                               const at::Tensor& tensor, int peer, int tag,
                                               const CommOptions& options) {
  require_tensor(comm, name, "", tensor);
  require_rank(comm, name, "peer", peer);
  STRATA_REQUIRE(tag >= 0 && tag <= comm.tag_ub, on_group(comm, name), ": tag ", tag,
                 " is outside [0, ", comm.tag_ub, "]");
  mpi_count(comm, name, tensor.numel(), "elements");
  auto flight = comm.begin(name, OpCode::None, options);
  flight->peer = peer;
  flight->tag = tag;
  flight->buffers.push_back(tensor);
  return flight;
}
}  // namespace

Work Comm::isend(const at::Tensor& tensor, int peer, int tag, CommOptions options) {
  CommState& comm = usable(impl_);
  auto flight = begin_point_to_point(comm, "send", tensor, peer, tag, options);
  count_bytes(comm, CommKind::SendRecv, peer == comm.rank ? 0 : tensor.nbytes());
  MPI_Request request;
  comm.check(MPI_Isend(tensor.data_ptr(), static_cast<int>(tensor.numel()), datatype_of(tensor),
                       peer, tag, comm.comm, &request),
             "send", peer);
  flight->requests.push_back(request);
  return make_work(impl_->state, std::move(flight));
}

Work Comm::irecv(at::Tensor& tensor, int peer, int tag, CommOptions options) {
  CommState& comm = usable(impl_);
  auto flight = begin_point_to_point(comm, "recv", tensor, peer, tag, options);
  count_bytes(comm, CommKind::SendRecv, 0);
  flight->recv_type = datatype_of(tensor);
  flight->expected_recv_count = tensor.numel();
  MPI_Request request;
  comm.check(MPI_Irecv(tensor.data_ptr(), static_cast<int>(tensor.numel()), flight->recv_type, peer,
                       tag, comm.comm, &request),
             "recv", peer);
  flight->requests.push_back(request);
  return make_work(impl_->state, std::move(flight));
}

}  // namespace strata
