// Alpha-beta collective times; the formulas are in the header. k members per node, g nodes.
#include "strata/plan/collectives.h"

#include <algorithm>

#include "strata/core/error.h"

namespace strata {
namespace {

struct Links {
  double intra_alpha, intra_beta, inter_alpha, inter_beta;  // seconds, bytes per second
};

Links links_of(const NetworkProfile& network) {
  return {network.intra_latency_us() * 1e-6, network.intra_node_gbs * 1e9,
          network.latency_us * 1e-6, network.inter_node_gbs * 1e9};
}

// One ring phase (a reduce-scatter or an all-gather) over the k members of each node and then
// over the g nodes, each member carrying 1/k of the data between nodes.
double ring_phase(const Links& links, const GroupSpan& group, double bytes) {
  const double k = static_cast<double>(group.members_per_node);
  const double g = static_cast<double>(group.nodes);
  const double intra = (k - 1) * links.intra_alpha + (k - 1) / k * bytes / links.intra_beta;
  const double inter = (g - 1) * links.inter_alpha + (g - 1) / g * (bytes / k) / links.inter_beta;
  return intra + inter;
}

}  // namespace

GroupSpan group_span(int64_t stride, int64_t size, int64_t devices_per_node) {
  STRATA_CHECK(stride >= 1 && size >= 1 && devices_per_node >= 1, "stride ", stride, " size ", size,
               " devices_per_node ", devices_per_node);
  GroupSpan span;
  span.size = size;
  span.members_per_node = std::min(size, std::max<int64_t>(1, devices_per_node / stride));
  span.nodes = (size + span.members_per_node - 1) / span.members_per_node;
  return span;
}

double all_reduce_seconds(const NetworkProfile& network, const GroupSpan& group, double bytes) {
  if (group.size <= 1 || bytes <= 0) return 0.0;
  return 2 * ring_phase(links_of(network), group, bytes);
}

double reduce_scatter_seconds(const NetworkProfile& network, const GroupSpan& group, double bytes) {
  if (group.size <= 1 || bytes <= 0) return 0.0;
  return ring_phase(links_of(network), group, bytes);
}

double all_gather_seconds(const NetworkProfile& network, const GroupSpan& group, double bytes) {
  if (group.size <= 1 || bytes <= 0) return 0.0;
  return ring_phase(links_of(network), group, bytes);
}

double all_to_all_seconds(const NetworkProfile& network, const GroupSpan& group, double bytes) {
  if (group.size <= 1 || bytes <= 0) return 0.0;
  const Links links = links_of(network);
  const double n = static_cast<double>(group.size);
  const double k = static_cast<double>(group.members_per_node);
  // A rank's share for its node mates moves on the intra-node link, the rest between nodes.
  const double intra = (k - 1) * links.intra_alpha + (k - 1) / n * bytes / links.intra_beta;
  const double inter = (n - k) * links.inter_alpha + (n - k) / n * bytes / links.inter_beta;
  return intra + inter;
}

double p2p_seconds(const NetworkProfile& network, bool crosses_nodes, double bytes) {
  if (bytes <= 0) return 0.0;
  const Links links = links_of(network);
  return crosses_nodes ? links.inter_alpha + bytes / links.inter_beta
                       : links.intra_alpha + bytes / links.intra_beta;
}

}  // namespace strata
