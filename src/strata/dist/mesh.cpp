// Mesh arithmetic (rank <-> coordinates, group members; pure) and the split of every
// sub-communicator from those same group lists.
#include "strata/dist/mesh.h"

#include <algorithm>

#include "strata/core/error.h"

namespace strata {

bool operator==(const MeshShape& a, const MeshShape& b) {
  return a.pp == b.pp && a.dp == b.dp && a.cp == b.cp && a.tp == b.tp && a.ep == b.ep;
}

std::string to_string(const MeshShape& shape) {
  std::string text =
      str("PP(", shape.pp, ")-DP(", shape.dp, ")-CP(", shape.cp, ")-TP(", shape.tp, ")");
  if (shape.ep > 1) text += str("-EP(", shape.ep, ")");
  return text;
}

MeshShape mesh_shape_of(const Layout& resolved) {
  STRATA_CHECK(resolved.dp >= 1, "mesh_shape_of needs a resolved layout; dp is ", resolved.dp);
  return MeshShape{resolved.pp, resolved.dp, resolved.cp, resolved.tp, resolved.ep};
}

void check_mesh_shape(const MeshShape& shape, int64_t world_size) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"pp", shape.pp}, {"dp", shape.dp}, {"cp", shape.cp}, {"tp", shape.tp}, {"ep", shape.ep}};
  for (const auto& [axis, size] : sizes) {
    STRATA_REQUIRE(size >= 1, "parallel size ", axis, " (", size, ") must be at least 1");
  }
  STRATA_REQUIRE(shape.world() == world_size, "pp (", shape.pp, ") x dp (", shape.dp, ") x cp (",
                 shape.cp, ") x tp (", shape.tp, ") = ", shape.world(),
                 " ranks, but the world has ", world_size,
                 "; choose sizes whose product is the number of ranks");
  STRATA_REQUIRE((shape.dp * shape.cp) % shape.ep == 0, "ep (", shape.ep, ") must divide dp x cp (",
                 shape.dp, " x ", shape.cp, " = ", shape.dp * shape.cp, ")");
}

MeshCoords mesh_coords_of(const MeshShape& shape, int64_t rank) {
  check_mesh_shape(shape, shape.world());
  STRATA_REQUIRE(rank >= 0 && rank < shape.world(), "rank ", rank, " is outside the mesh of ",
                 shape.world(), " ranks");
  MeshCoords coords;
  coords.tp = rank % shape.tp;
  coords.cp = rank / shape.tp % shape.cp;
  coords.dp = rank / (shape.tp * shape.cp) % shape.dp;
  coords.pp = rank / (shape.tp * shape.cp * shape.dp);
  const int64_t dp_cp_index = coords.dp * shape.cp + coords.cp;
  coords.ep = dp_cp_index % shape.ep;
  coords.expert_dp = dp_cp_index / shape.ep;
  return coords;
}

int64_t mesh_rank_of(const MeshShape& shape, const MeshCoords& coords) {
  const std::pair<int64_t, int64_t> axes[] = {
      {coords.pp, shape.pp}, {coords.dp, shape.dp}, {coords.cp, shape.cp}, {coords.tp, shape.tp}};
  for (const auto& [index, size] : axes) {
    STRATA_REQUIRE(index >= 0 && index < size, "mesh coordinate ", index,
                   " is outside its axis of size ", size);
  }
  return ((coords.pp * shape.dp + coords.dp) * shape.cp + coords.cp) * shape.tp + coords.tp;
}

const char* mesh_group_name(MeshGroup group) {
  switch (group) {
    case MeshGroup::tp:
      return "tp";
    case MeshGroup::cp:
      return "cp";
    case MeshGroup::dp:
      return "dp";
    case MeshGroup::pp:
      return "pp";
    case MeshGroup::dp_cp:
      return "dp_cp";
    case MeshGroup::ep:
      return "ep";
    case MeshGroup::expert_dp:
      return "expert_dp";
  }
  return "?";
}

std::vector<int64_t> mesh_group_ranks(const MeshShape& shape, int64_t rank, MeshGroup group) {
  const MeshCoords mine = mesh_coords_of(shape, rank);
  // Walk the group's own index; every other coordinate stays this rank's.
  auto with = [&](auto&& set, int64_t count) {
    std::vector<int64_t> ranks;
    for (int64_t i = 0; i < count; ++i) {
      MeshCoords coords = mine;
      set(coords, i);
      ranks.push_back(mesh_rank_of(shape, coords));
    }
    return ranks;
  };
  auto set_dp_cp = [&shape](MeshCoords& c, int64_t d) {
    c.dp = d / shape.cp;
    c.cp = d % shape.cp;
  };
  switch (group) {
    case MeshGroup::tp:
      return with([](MeshCoords& c, int64_t i) { c.tp = i; }, shape.tp);
    case MeshGroup::cp:
      return with([](MeshCoords& c, int64_t i) { c.cp = i; }, shape.cp);
    case MeshGroup::dp:
      return with([](MeshCoords& c, int64_t i) { c.dp = i; }, shape.dp);
    case MeshGroup::pp:
      return with([](MeshCoords& c, int64_t i) { c.pp = i; }, shape.pp);
    case MeshGroup::dp_cp:
      return with(set_dp_cp, shape.dp * shape.cp);
    case MeshGroup::ep:
      return with([&](MeshCoords& c, int64_t i) { set_dp_cp(c, mine.expert_dp * shape.ep + i); },
                  shape.ep);
    case MeshGroup::expert_dp:
      return with([&](MeshCoords& c, int64_t i) { set_dp_cp(c, i * shape.ep + mine.ep); },
                  shape.dp * shape.cp / shape.ep);
  }
  STRATA_CHECK(false, "unknown MeshGroup ", static_cast<int>(group));
  return {};
}

namespace {

const MeshShape& checked(const MeshShape& shape, int64_t world_size) {
  check_mesh_shape(shape, world_size);
  return shape;
}

// One split of `world`: the color is the group's first rank (unique per group), the key
// this rank's position in it.
Comm split_group(const Comm& world, const MeshShape& shape, MeshGroup group) {
  const std::vector<int64_t> ranks = mesh_group_ranks(shape, world.rank(), group);
  const auto position = std::find(ranks.begin(), ranks.end(), world.rank()) - ranks.begin();
  return world.split(static_cast<int>(ranks.front()), static_cast<int>(position),
                     mesh_group_name(group));
}

}  // namespace

Mesh::Mesh(const Comm& world, const MeshShape& shape)
    : shape_(checked(shape, world.size())),
      coords_(mesh_coords_of(shape_, world.rank())),
      rank_(world.rank()),
      world_(world.split(0, world.rank(), "world")),
      tp_(split_group(world, shape_, MeshGroup::tp)),
      cp_(split_group(world, shape_, MeshGroup::cp)),
      dp_(split_group(world, shape_, MeshGroup::dp)),
      pp_(split_group(world, shape_, MeshGroup::pp)),
      dp_cp_(split_group(world, shape_, MeshGroup::dp_cp)),
      ep_(split_group(world, shape_, MeshGroup::ep)),
      expert_dp_(split_group(world, shape_, MeshGroup::expert_dp)) {}

std::string Mesh::to_string() const { return str(strata::to_string(shape_), " rank ", rank_); }

}  // namespace strata
