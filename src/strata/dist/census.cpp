// The census board (see mpi_internal.h): where each rank publishes which collective it
// entered last on each of its groups, and where a rank whose collective timed out reads
// who had not arrived.
#include <algorithm>
#include <cstdio>

#include "strata/core/error.h"
#include "strata/dist/mpi_internal.h"

namespace strata::dist_internal {
namespace {

constexpr int kSlotWords = 3;  // group id, op code, sequence number
// A census read that did not finish in time is abandoned like an operation.
constexpr double kCensusReadTimeoutS = 1.0;

struct Board {
  MPI_Comm comm = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD: targets are world ranks
  MPI_Win window = MPI_WIN_NULL;
  int64_t* words = nullptr;  // this rank's kCensusSlots * kSlotWords words, in the window
  int64_t next_group_id = 0;
  std::vector<std::string> hosts;  // of each world rank
};
Board& board() {
  static Board instance;
  return instance;
}

int64_t slot_offset(int64_t group_id) { return (group_id % kCensusSlots) * kSlotWords; }

// Once per job (world rank 0): every rank fails alike here.
void warn(const char* what, int rc) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (world_rank != 0) return;
  std::fprintf(stderr, "strata: %s failed (%s); timeouts will not name the missing ranks\n", what,
               mpi_error_string(rc).c_str());
}

}  // namespace

void open_census_board() {
  Board& b = board();
  if (b.comm != MPI_COMM_NULL) return;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &b.comm);
  if (rc != MPI_SUCCESS) {
    throw CommError("census board: MPI_Comm_dup(MPI_COMM_WORLD) failed: " + mpi_error_string(rc));
  }
  rc = MPI_Comm_set_errhandler(b.comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    throw CommError("census board: MPI_Comm_set_errhandler failed: " + mpi_error_string(rc));
  }
  // Every rank's host, for messages that name the host of a missing rank.
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  int size = 0;
  MPI_Comm_size(b.comm, &size);
  std::vector<char> names(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  rc = MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                     MPI_CHAR, b.comm);
  if (rc != MPI_SUCCESS) {
    throw CommError("census board: MPI_Allgather of the host names failed: " +
                    mpi_error_string(rc));
  }
  for (int rank = 0; rank < size; ++rank) {
    b.hosts.emplace_back(names.data() + static_cast<size_t>(rank) * MPI_MAX_PROCESSOR_NAME);
  }
  // Some transports refuse windows (e.g. Open MPI's osc/rdma over TCP; the launcher excludes
  // it on hosts, leaving osc/pt2pt): then no census.
  const MPI_Aint bytes = kCensusSlots * kSlotWords * sizeof(int64_t);
  rc = MPI_Win_allocate(bytes, sizeof(int64_t), MPI_INFO_NULL, b.comm, &b.words, &b.window);
  if (rc != MPI_SUCCESS) {
    warn("MPI_Win_allocate for the census board", rc);
    b.window = MPI_WIN_NULL;
    b.words = nullptr;
    return;
  }
  for (int64_t i = 0; i < kCensusSlots * kSlotWords; ++i) b.words[i] = -1;
  rc = MPI_Win_set_errhandler(b.window, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, b.window);
  if (rc != MPI_SUCCESS) {  // every rank fails alike here, so freeing stays collective
    warn("locking the census board", rc);
    MPI_Win_free(&b.window);
    b.words = nullptr;
  }
}

void close_census_board() {
  Board& b = board();
  if (b.comm == MPI_COMM_NULL) return;
  auto report = [](int rc, const char* call) {
    if (rc != MPI_SUCCESS) {
      std::fprintf(stderr, "strata: %s of the census board failed: %s\n", call,
                   mpi_error_string(rc).c_str());
    }
  };
  if (b.words != nullptr) report(MPI_Win_unlock_all(b.window), "MPI_Win_unlock_all");
  if (b.window != MPI_WIN_NULL) report(MPI_Win_free(&b.window), "MPI_Win_free");
  b.words = nullptr;
  report(MPI_Comm_free(&b.comm), "MPI_Comm_free");
}

bool census_board_open() { return board().words != nullptr; }

const std::vector<std::string>& world_hosts() { return board().hosts; }

bool world_spans_hosts() {
  const std::vector<std::string>& hosts = board().hosts;
  return std::any_of(hosts.begin(), hosts.end(),
                     [&](const std::string& host) { return host != hosts.front(); });
}

int64_t next_census_group_id() { return board().next_group_id; }
void set_next_census_group_id(int64_t id) { board().next_group_id = id; }

void publish_census(int64_t group_id, OpCode code, int64_t seq) {
  Board& b = board();
  if (b.words == nullptr || group_id < 0) return;
  int64_t* slot = b.words + slot_offset(group_id);
  // Group and op first, the number last: a reader that sees the new number usually sees its
  // op too (the census is a diagnosis, not a synchronization).
  __atomic_store_n(&slot[0], group_id, __ATOMIC_RELEASE);
  __atomic_store_n(&slot[1], static_cast<int64_t>(code), __ATOMIC_RELEASE);
  __atomic_store_n(&slot[2], seq, __ATOMIC_RELEASE);
  // A failure here only blurs a later diagnosis; it must not fail the operation itself.
  static_cast<void>(MPI_Win_sync(b.window));
}

bool read_census(int64_t group_id, const std::vector<int>& world_ranks,
                 std::vector<CensusEntry>* entries, std::string* failure) {
  Board& b = board();
  if (b.words == nullptr || group_id < 0) {
    *failure = "no census board";
    return false;
  }
  // One read per rank into one buffer, then poll them all against one deadline.
  const int64_t count = static_cast<int64_t>(world_ranks.size());
  auto slots = at::full({count, kSlotWords}, -1, at::kLong);
  auto reads = std::make_unique<InFlight>();
  reads->op = "census read";
  reads->buffers.push_back(slots);
  int64_t* data = slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    MPI_Request request;
    const int rc = MPI_Rget(data + i * kSlotWords, kSlotWords, MPI_INT64_T, world_ranks[i],
                            slot_offset(group_id), kSlotWords, MPI_INT64_T, b.window, &request);
    if (rc != MPI_SUCCESS) {
      *failure =
          str("the read from world rank ", world_ranks[i], " failed: ", mpi_error_string(rc));
      bury_globally(std::move(reads));
      return false;
    }
    reads->requests.push_back(request);
  }
  // Each read on its own: the ranks that answer are told apart from those that do not.
  const auto deadline = Clock::now() + std::chrono::duration<double>(kCensusReadTimeoutS);
  std::vector<int> answered(static_cast<size_t>(count), 0);
  for (int64_t left = count; left > 0 && Clock::now() < deadline;) {
    for (int64_t i = 0; i < count; ++i) {
      if (answered[i]) continue;
      const int rc = MPI_Test(&reads->requests[i], &answered[i], MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        *failure =
            str("the read from world rank ", world_ranks[i], " failed: ", mpi_error_string(rc));
        bury_globally(std::move(reads));
        return false;
      }
      if (answered[i]) --left;
    }
  }
  entries->resize(count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t* slot = data + i * kSlotWords;
    (*entries)[i] = {slot[0], static_cast<OpCode>(slot[1]), slot[2], answered[i] != 0};
  }
  const bool all = std::all_of(answered.begin(), answered.end(), [](int done) { return done; });
  if (!all) bury_globally(std::move(reads));  // reads left in flight keep their buffer
  return true;
}

}  // namespace strata::dist_internal
