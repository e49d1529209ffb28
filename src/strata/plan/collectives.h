// Alpha-beta times of the collectives the runtime uses, on the links a group actually spans.
// Ranks are numbered tp fastest, then cp, dp, pp (dist/mesh.h), and consecutive ranks share a
// node, so a group of `size` ranks spaced `stride` apart has max(1, devices_per_node / stride)
// members in each node it touches: tp (stride 1) stays inside a node while tp <= node size.
//
// Each message costs alpha (latency) + bytes / beta (bandwidth per device and direction).
// With n members and N bytes of the full tensor, the ring algorithms take:
//   all_reduce      2(n-1) alpha + 2(n-1)/n N / beta
//   reduce_scatter   (n-1) alpha +  (n-1)/n N / beta     (N = the unreduced input)
//   all_gather       (n-1) alpha +  (n-1)/n N / beta     (N = the gathered output)
//   all_to_all       (n-1) alpha +  (n-1)/n N / beta     (N = what one rank sends in all)
//   p2p                      alpha +         N / beta
// A group inside one node uses the intra-node link. A group spanning g nodes with k members
// in each runs hierarchically: the steps among the k members of a node on the intra-node
// link, then the steps among the g nodes on the inter-node link with each member carrying 1/k
// of the data (every device has its own NIC); for k = 1 it is the plain ring between nodes.
#pragma once
#include <cstdint>

#include "strata/plan/cluster.h"

namespace strata {

struct GroupSpan {
  int64_t size = 1;   // members
  int64_t nodes = 1;  // nodes it touches
  int64_t members_per_node = 1;
  bool crosses_nodes() const { return nodes > 1; }
};

// The group of `size` ranks spaced `stride` apart, starting at a node boundary.
GroupSpan group_span(int64_t stride, int64_t size, int64_t devices_per_node);

double all_reduce_seconds(const NetworkProfile& network, const GroupSpan& group, double bytes);
double reduce_scatter_seconds(const NetworkProfile& network, const GroupSpan& group, double bytes);
double all_gather_seconds(const NetworkProfile& network, const GroupSpan& group, double bytes);
double all_to_all_seconds(const NetworkProfile& network, const GroupSpan& group, double bytes);
// One message between two ranks, on the inter-node link when crosses_nodes.
double p2p_seconds(const NetworkProfile& network, bool crosses_nodes, double bytes);

}  // namespace strata
