// Mesh: the one layout value. Built once from the [parallel] sizes; knows this rank's
// coordinates and owns every sub-communicator, created in the same order on every rank.
// Rank order: tp fastest, then cp, dp, pp:  rank = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i.
// Experts are spread over the dp*cp ranks: ep divides dp*cp; the "ep" group holds ep
// consecutive ranks of dp*cp, and "expert_dp" the ranks holding the same experts.
#pragma once
#include <cstdint>
#include <string>

#include "strata/dist/comm.h"

namespace strata {

struct MeshShape {
  int64_t pp = 1, dp = 1, cp = 1, tp = 1, ep = 1;
  int64_t world() const { return pp * dp * cp * tp; }
};

struct MeshCoords {
  int64_t pp = 0, dp = 0, cp = 0, tp = 0;
  int64_t ep = 0;         // index inside the ep group
  int64_t expert_dp = 0;  // index inside the expert-data-parallel group
};

// Pure arithmetic, no MPI: used by tests and by the planner.
MeshCoords mesh_coords_of(const MeshShape& shape, int64_t rank);
int64_t mesh_rank_of(const MeshShape& shape, const MeshCoords& coords);
// Throws UserError if the sizes do not multiply to world or ep does not divide dp*cp.
void check_mesh_shape(const MeshShape& shape, int64_t world_size);

class Mesh {
 public:
  // Collective over `world`: splits every sub-communicator.
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

  // "PP(2)-DP(2)-CP(1)-TP(2) rank 5"
  std::string to_string() const;

 private:
  MeshShape shape_;
  MeshCoords coords_;
  int rank_ = 0;
  Comm world_, tp_, cp_, dp_, pp_, dp_cp_, ep_, expert_dp_;
};

}  // namespace strata
