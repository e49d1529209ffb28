// Mesh: the layout (core/layout.h) made ranks. Built once from its sizes; knows this rank's
// coordinates and owns every sub-communicator, created in the same order on every rank.
// Rank order: tp fastest, then cp, dp, pp:  rank = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i.
// Experts are spread over the dp*cp ranks: ep divides dp*cp; the "ep" group holds ep
// consecutive ranks of dp*cp, and "expert_dp" the ranks holding the same experts.
// With d = dp_i * cp + cp_i (the index in dp_cp): ep index = d % ep, expert_dp index = d / ep.
// Groups (each ordered by its own index):
//   tp: same pp, dp, cp      cp: same pp, dp, tp      dp: same pp, cp, tp
//   pp: same dp, cp, tp      dp_cp: same pp, tp (index d)
//   ep: same pp, tp, d / ep (index d % ep)   expert_dp: same pp, tp, d % ep (index d / ep)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/layout.h"
#include "strata/dist/comm.h"

namespace strata {

struct MeshShape {
  int64_t pp = 1, dp = 1, cp = 1, tp = 1, ep = 1;
  int64_t world() const { return pp * dp * cp * tp; }
};
bool operator==(const MeshShape& a, const MeshShape& b);
inline bool operator!=(const MeshShape& a, const MeshShape& b) { return !(a == b); }
// "PP(2)-DP(2)-CP(1)-TP(2)", "-EP(2)" following when ep > 1.
std::string to_string(const MeshShape& shape);

// The mesh a layout runs on: the one place a shape is made from a Layout. dp must be resolved
// (validate_config, resolve_layout), as in config.parallel of a validated config.
MeshShape mesh_shape_of(const Layout& resolved);

struct MeshCoords {
  int64_t pp = 0, dp = 0, cp = 0, tp = 0;
  int64_t ep = 0;         // index inside the ep group
  int64_t expert_dp = 0;  // index inside the expert-data-parallel group
};

// Pure arithmetic, no MPI: used by tests and by the planner.
MeshCoords mesh_coords_of(const MeshShape& shape, int64_t rank);
int64_t mesh_rank_of(const MeshShape& shape, const MeshCoords& coords);
// Throws UserError if a size is < 1, the sizes do not multiply to world or ep does not
// divide dp*cp; the message quotes the numbers.
void check_mesh_shape(const MeshShape& shape, int64_t world_size);

enum class MeshGroup { tp, cp, dp, pp, dp_cp, ep, expert_dp };
const char* mesh_group_name(MeshGroup group);  // "tp", ..., "expert_dp"
// The mesh ranks of `rank`'s group, in group-rank order.
std::vector<int64_t> mesh_group_ranks(const MeshShape& shape, int64_t rank, MeshGroup group);

class Mesh {
 public:
  // Collective over `world`: checks the shape (UserError), then splits "world" (a copy of
  // `world`), tp, cp, dp, pp, dp_cp, ep and expert_dp, in that order, all sharing `world`'s
  // counters and default timeout.
  Mesh(const Comm& world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoords& coords() const { return coords_; }
  int rank() const { return rank_; }

  Comm& world() { return world_; }
  Comm& tp() { return tp_; }
  Comm& cp() { return cp_; }
  Comm& dp() { return dp_; }
  Comm& pp() { return pp_; }
  Comm& dp_cp() { return dp_cp_; }
  Comm& ep() { return ep_; }
  Comm& expert_dp() { return expert_dp_; }

  bool pp_is_first_stage() const { return coords_.pp == 0; }
  bool pp_is_last_stage() const { return coords_.pp == shape_.pp - 1; }

  // to_string(shape()) and the rank: "PP(2)-DP(2)-CP(1)-TP(2) rank 5"
  std::string to_string() const;

 private:
  MeshShape shape_;
  MeshCoords coords_;
  int rank_ = 0;
  Comm world_, tp_, cp_, dp_, pp_, dp_cp_, ep_, expert_dp_;
};

}  // namespace strata
