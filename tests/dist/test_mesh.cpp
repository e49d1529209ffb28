// Mesh arithmetic for every factorization of 1..8 ranks into pp x dp x cp x tp (and every ep
// dividing dp x cp): coordinates round-trip, and each group matches a brute-force search
// over all ranks written straight from the definitions in mesh.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "expect_error.h"
#include "strata/core/error.h"
#include "strata/dist/mesh.h"

namespace strata {
namespace {

// Every MeshShape with pp*dp*cp*tp == world and ep dividing dp*cp.
std::vector<MeshShape> all_shapes(int64_t world) {
  std::vector<MeshShape> shapes;
  for (int64_t pp = 1; pp <= world; ++pp) {
    for (int64_t dp = 1; dp <= world; ++dp) {
      for (int64_t cp = 1; cp <= world; ++cp) {
        if (world % (pp * dp * cp) != 0) continue;
        const int64_t tp = world / (pp * dp * cp);
        for (int64_t ep = 1; ep <= dp * cp; ++ep) {
          if ((dp * cp) % ep == 0) shapes.push_back({pp, dp, cp, tp, ep});
        }
      }
    }
  }
  return shapes;
}

std::string describe(const MeshShape& s) {
  return strata::str("pp=", s.pp, " dp=", s.dp, " cp=", s.cp, " tp=", s.tp, " ep=", s.ep);
}

// Brute force: the ranks q that share `same(q)` with `rank`, ordered by `index(q)`.
std::vector<int64_t> search(const MeshShape& shape, int64_t rank,
                            const std::function<std::vector<int64_t>(const MeshCoords&)>& same,
                            const std::function<int64_t(const MeshCoords&)>& index) {
  const MeshCoords mine = mesh_coords_of(shape, rank);
  std::vector<std::pair<int64_t, int64_t>> members;  // (index, rank)
  for (int64_t q = 0; q < shape.world(); ++q) {
    const MeshCoords theirs = mesh_coords_of(shape, q);
    if (same(theirs) == same(mine)) members.push_back({index(theirs), q});
  }
  std::sort(members.begin(), members.end());
  std::vector<int64_t> ranks;
  for (size_t i = 0; i < members.size(); ++i) {
    EXPECT_EQ(members[i].first, static_cast<int64_t>(i)) << "group indices are not 0..size-1";
    ranks.push_back(members[i].second);
  }
  return ranks;
}

std::vector<int64_t> expected_group(const MeshShape& s, int64_t rank, MeshGroup group) {
  auto d = [&s](const MeshCoords& c) { return c.dp * s.cp + c.cp; };
  switch (group) {
    case MeshGroup::tp:
      return search(
          s, rank,
          [](auto& c) {
            return std::vector{c.pp, c.dp, c.cp};
          },
          [](auto& c) { return c.tp; });
    case MeshGroup::cp:
      return search(
          s, rank,
          [](auto& c) {
            return std::vector{c.pp, c.dp, c.tp};
          },
          [](auto& c) { return c.cp; });
    case MeshGroup::dp:
      return search(
          s, rank,
          [](auto& c) {
            return std::vector{c.pp, c.cp, c.tp};
          },
          [](auto& c) { return c.dp; });
    case MeshGroup::pp:
      return search(
          s, rank,
          [](auto& c) {
            return std::vector{c.dp, c.cp, c.tp};
          },
          [](auto& c) { return c.pp; });
    case MeshGroup::dp_cp:
      return search(
          s, rank,
          [](auto& c) {
            return std::vector{c.pp, c.tp};
          },
          d);
    case MeshGroup::ep:
      return search(
          s, rank,
          [&](auto& c) {
            return std::vector{c.pp, c.tp, d(c) / s.ep};
          },
          [&](auto& c) { return d(c) % s.ep; });
    case MeshGroup::expert_dp:
      return search(
          s, rank,
          [&](auto& c) {
            return std::vector{c.pp, c.tp, d(c) % s.ep};
          },
          [&](auto& c) { return d(c) / s.ep; });
  }
  return {};
}

const MeshGroup kGroups[] = {MeshGroup::tp,    MeshGroup::cp, MeshGroup::dp,       MeshGroup::pp,
                             MeshGroup::dp_cp, MeshGroup::ep, MeshGroup::expert_dp};

TEST(MeshArithmetic, CoordinatesRoundTripForEveryFactorization) {
  for (int64_t world = 1; world <= 8; ++world) {
    for (const MeshShape& shape : all_shapes(world)) {
      SCOPED_TRACE(describe(shape));
      for (int64_t rank = 0; rank < world; ++rank) {
        const MeshCoords c = mesh_coords_of(shape, rank);
        EXPECT_EQ(mesh_rank_of(shape, c), rank);
        EXPECT_EQ(((c.pp * shape.dp + c.dp) * shape.cp + c.cp) * shape.tp + c.tp, rank);
        EXPECT_TRUE(c.pp < shape.pp && c.dp < shape.dp && c.cp < shape.cp && c.tp < shape.tp);
        EXPECT_EQ(c.ep, (c.dp * shape.cp + c.cp) % shape.ep);
        EXPECT_EQ(c.expert_dp, (c.dp * shape.cp + c.cp) / shape.ep);
      }
    }
  }
}

TEST(MeshArithmetic, GroupsMatchTheirDefinitionForEveryFactorization) {
  int shapes_checked = 0;
  for (int64_t world = 1; world <= 8; ++world) {
    for (const MeshShape& shape : all_shapes(world)) {
      SCOPED_TRACE(describe(shape));
      ++shapes_checked;
      for (MeshGroup group : kGroups) {
        for (int64_t rank = 0; rank < world; ++rank) {
          const auto ranks = mesh_group_ranks(shape, rank, group);
          EXPECT_EQ(ranks, expected_group(shape, rank, group))
              << mesh_group_name(group) << " group of rank " << rank;
          // Groups partition the ranks: every member sees the same group.
          for (int64_t member : ranks) {
            EXPECT_EQ(mesh_group_ranks(shape, member, group), ranks);
          }
        }
      }
      const MeshCoords c0 = mesh_coords_of(shape, world - 1);
      EXPECT_EQ(static_cast<int64_t>(mesh_group_ranks(shape, world - 1, MeshGroup::ep).size()),
                shape.ep);
      EXPECT_EQ(
          static_cast<int64_t>(mesh_group_ranks(shape, world - 1, MeshGroup::expert_dp).size()),
          shape.dp * shape.cp / shape.ep);
      EXPECT_LT(c0.expert_dp, shape.dp * shape.cp / shape.ep);
    }
  }
  EXPECT_GT(shapes_checked, 100);
}

TEST(MeshArithmetic, KnownLayout) {
  const MeshShape shape{2, 2, 1, 2, 2};  // PP(2)-DP(2)-CP(1)-TP(2), ep 2
  const MeshCoords c = mesh_coords_of(shape, 5);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(mesh_group_ranks(shape, 5, MeshGroup::tp), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(mesh_group_ranks(shape, 5, MeshGroup::dp), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(mesh_group_ranks(shape, 5, MeshGroup::pp), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(mesh_group_ranks(shape, 5, MeshGroup::ep), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(mesh_group_ranks(shape, 5, MeshGroup::expert_dp), (std::vector<int64_t>{5}));
}

std::string error_of(const MeshShape& shape, int64_t world) {
  return testing::user_error([&] { check_mesh_shape(shape, world); });
}

TEST(MeshShapeCheck, MessagesQuoteTheNumbers) {
  EXPECT_NO_THROW(check_mesh_shape({2, 2, 1, 2, 1}, 8));
  EXPECT_EQ(error_of({2, 2, 1, 2, 1}, 6),
            "pp (2) x dp (2) x cp (1) x tp (2) = 8 ranks, but the world has 6; choose sizes "
            "whose product is the number of ranks");
  EXPECT_EQ(error_of({1, 2, 2, 1, 3}, 4), "ep (3) must divide dp x cp (2 x 2 = 4)");
  EXPECT_EQ(error_of({1, 0, 1, 1, 1}, 0), "parallel size dp (0) must be at least 1");
  EXPECT_EQ(error_of({1, 1, 1, 1, -1}, 1), "parallel size ep (-1) must be at least 1");
  EXPECT_THROW(mesh_coords_of({1, 2, 1, 2, 1}, 4), UserError);
  EXPECT_THROW(mesh_rank_of({1, 2, 1, 2, 1}, MeshCoords{0, 2, 0, 0}), UserError);
}

}  // namespace
}  // namespace strata
