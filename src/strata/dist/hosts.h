// The hosts a job runs on: read from an Open MPI hostfile (`--hostfile FILE`) or a list
// (`--hosts a:2,b:2`), handed to mpirun as `--host a:2,b:2`, and probed for which still
// answer when the supervisor restarts a job elastically (docs/launch.md, "Several hosts").
#pragma once
#include <string>
#include <vector>

namespace strata {

struct Host {
  std::string name;
  int slots = 1;  // ranks it may run

  bool operator==(const Host& other) const { return name == other.name && slots == other.slots; }
};

// Open MPI's hostfile format, read as Open MPI reads it: one host per line, `NAME [slots=N]
// [max_slots=M]` (`cpu=`/`count=` and `max-slots=` as synonyms; max_slots alone is the count),
// `#` starts a comment, blank lines are skipped; a host on several lines without a count has one
// slot per line. Throws UserError naming the file and line for what Open MPI refuses (two
// counts for one host, slots above max_slots, an unknown key), for a host both counted and
// repeated (Open MPI's answer depends on the order), and for a host named once without a count
// (Open MPI counts its cores only when it launches there). tests/multihost checks each accepted
// file against the map Open MPI makes of it.
std::vector<Host> read_hostfile(const std::string& path);

// "a:2,b:2,c" (slots default 1), as Open MPI's --host takes it. `option` names the flag in
// errors ("--hosts").
std::vector<Host> parse_hosts(const std::string& list, const std::string& option);

// "a:2,b:2": the form mpirun's --host takes.
std::string host_list(const std::vector<Host>& hosts);
// "a, b" for messages.
std::string host_names(const std::vector<Host>& hosts);

int total_slots(const std::vector<Host>& hosts);

// The hosts that answer: for each, `true` on one rank there, launched as the job's ranks are
// (launcher.h's mpirun_command, on interface `iface`) through the agent Open MPI starts them
// with, all at once, each given `timeout_s`. A host whose daemon cannot start or cannot reach
// this machine back (a dead host, a cut link) does not answer. Keeps the order of `hosts`.
std::vector<Host> reachable_hosts(const std::vector<Host>& hosts, const std::string& iface,
                                  double timeout_s);

}  // namespace strata
