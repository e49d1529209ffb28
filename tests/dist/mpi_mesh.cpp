// Mesh on real communicators: for every factorization of this run's world into
// pp x dp x cp x tp (and every ep dividing dp x cp), each group's members, gathered as world
// ranks, are exactly the ranks the coordinates say.
#include "dist_test_util.h"
#include "strata/dist/mesh.h"

namespace strata {
namespace {

using namespace dist_test;

std::vector<MeshShape> shapes_of(int64_t world) {
  std::vector<MeshShape> shapes;
  for (int64_t pp = 1; pp <= world; ++pp) {
    for (int64_t dp = 1; dp <= world; ++dp) {
      for (int64_t cp = 1; cp <= world; ++cp) {
        if (world % (pp * dp * cp) != 0) continue;
        for (int64_t ep = 1; ep <= dp * cp; ++ep) {
          if ((dp * cp) % ep == 0) shapes.push_back({pp, dp, cp, world / (pp * dp * cp), ep});
        }
      }
    }
  }
  return shapes;
}

// World ranks of the group, in group order, as the group itself reports them.
std::vector<int64_t> gathered_members(Comm& group) {
  auto mine = at::full({1}, group.world_rank_of(group.rank()), at::kLong);
  auto all = at::zeros({group.size()}, at::kLong);
  group.all_gather(all, mine);
  return std::vector<int64_t>(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + group.size());
}

// Every rank q whose coordinates satisfy `same`, in order of `index` (independent of
// mesh_group_ranks, straight from the definitions in mesh.h).
template <typename Same, typename Index>
std::vector<int64_t> members_by_definition(const MeshShape& shape, Same same, Index index) {
  std::vector<std::pair<int64_t, int64_t>> members;
  for (int64_t q = 0; q < shape.world(); ++q) {
    const MeshCoords c = mesh_coords_of(shape, q);
    if (same(c)) members.push_back({index(c), q});
  }
  std::sort(members.begin(), members.end());
  std::vector<int64_t> ranks;
  for (auto& member : members) ranks.push_back(member.second);
  return ranks;
}

TEST(MeshGroups, EveryFactorizationOfThisWorld) {
  Comm world = test_world();
  const int64_t n = world.size(), r = world.rank();
  for (const MeshShape& shape : shapes_of(n)) {
    Mesh mesh(world, shape);
    SCOPED_TRACE(mesh.to_string());
    const MeshCoords me = mesh.coords();
    EXPECT_EQ(mesh.rank(), r);
    EXPECT_EQ(mesh_rank_of(shape, me), r);
    EXPECT_EQ(mesh.pp_is_first_stage(), me.pp == 0);
    EXPECT_EQ(mesh.pp_is_last_stage(), me.pp == shape.pp - 1);
    const int64_t d = me.dp * shape.cp + me.cp;
    auto dp_cp_of = [&shape](const MeshCoords& c) { return c.dp * shape.cp + c.cp; };
    struct Expectation {
      Comm& comm;
      const char* name;
      std::vector<int64_t> members;
      int64_t my_index;
    };
    const Expectation expectations[] = {
        {mesh.world(), "world",
         members_by_definition(
             shape, [](auto&) { return true; }, [&](auto& c) { return mesh_rank_of(shape, c); }),
         r},
        {mesh.tp(), "tp",
         members_by_definition(
             shape, [&](auto& c) { return c.pp == me.pp && c.dp == me.dp && c.cp == me.cp; },
             [](auto& c) { return c.tp; }),
         me.tp},
        {mesh.cp(), "cp",
         members_by_definition(
             shape, [&](auto& c) { return c.pp == me.pp && c.dp == me.dp && c.tp == me.tp; },
             [](auto& c) { return c.cp; }),
         me.cp},
        {mesh.dp(), "dp",
         members_by_definition(
             shape, [&](auto& c) { return c.pp == me.pp && c.cp == me.cp && c.tp == me.tp; },
             [](auto& c) { return c.dp; }),
         me.dp},
        {mesh.pp(), "pp",
         members_by_definition(
             shape, [&](auto& c) { return c.dp == me.dp && c.cp == me.cp && c.tp == me.tp; },
             [](auto& c) { return c.pp; }),
         me.pp},
        {mesh.dp_cp(), "dp_cp",
         members_by_definition(
             shape, [&](auto& c) { return c.pp == me.pp && c.tp == me.tp; }, dp_cp_of),
         d},
        {mesh.ep(), "ep",
         members_by_definition(
             shape,
             [&](auto& c) {
               return c.pp == me.pp && c.tp == me.tp && dp_cp_of(c) / shape.ep == d / shape.ep;
             },
             [&](auto& c) { return dp_cp_of(c) % shape.ep; }),
         me.ep},
        {mesh.expert_dp(), "expert_dp",
         members_by_definition(
             shape,
             [&](auto& c) {
               return c.pp == me.pp && c.tp == me.tp && dp_cp_of(c) % shape.ep == d % shape.ep;
             },
             [&](auto& c) { return dp_cp_of(c) / shape.ep; }),
         me.expert_dp},
    };
    for (const Expectation& expected : expectations) {
      SCOPED_TRACE(expected.name);
      EXPECT_EQ(expected.comm.name(), expected.name);
      EXPECT_EQ(expected.comm.rank(), expected.my_index);
      EXPECT_EQ(gathered_members(expected.comm), expected.members);
    }
    EXPECT_EQ(mesh.tp().size(), shape.tp);
    EXPECT_EQ(mesh.ep().size(), shape.ep);
    EXPECT_EQ(mesh.expert_dp().size(), shape.dp * shape.cp / shape.ep);
  }
}

TEST(MeshGroups, ToStringAndBadShapes) {
  Comm world = test_world();
  const int64_t n = world.size();
  Mesh flat(world, MeshShape{1, n, 1, 1, 1});
  EXPECT_EQ(flat.to_string(), strata::str("PP(1)-DP(", n, ")-CP(1)-TP(1) rank ", world.rank()));
  if (n % 2 == 0 && n / 2 > 1) {
    Mesh with_experts(world, MeshShape{1, n / 2, 1, 2, n / 2});
    EXPECT_EQ(with_experts.to_string(),
              strata::str("PP(1)-DP(", n / 2, ")-CP(1)-TP(2)-EP(", n / 2, ") rank ", world.rank()));
  }
  EXPECT_CONTAINS(testing::user_error([&] {
                    Mesh(world, MeshShape{1, n + 1, 1, 1, 1});
                  }),
                  strata::str("pp (1) x dp (", n + 1, ") x cp (1) x tp (1) = ", n + 1,
                              " ranks, but the world has ", n));
  // The failed constructions entered no collective: the world is still in step.
  world.barrier();
}

}  // namespace
}  // namespace strata
