// Host lists: the hostfile and --hosts parsers, and the reachability probe of elastic restarts.
#include "strata/dist/hosts.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "strata/core/error.h"
#include "strata/dist/launcher.h"

namespace strata {
namespace {

// A slot count from `text`; `where` names the file and line, or the option, in errors.
int parse_slots(const std::string& text, const std::string& where) {
  size_t used = 0;
  int slots = 0;
  try {
    slots = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  STRATA_REQUIRE(used == text.size() && slots >= 1, where, ": slots '", text,
                 "' must be a positive integer");
  return slots;
}

// Adds `host` to `hosts`, or its slots to the entry of the same name.
void add_host(std::vector<Host>* hosts, const Host& host) {
  for (Host& known : *hosts) {
    if (known.name == host.name) {
      known.slots += host.slots;
      return;
    }
  }
  hosts->push_back(host);
}

bool valid_host_name(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
      return false;
    }
  }
  return true;
}

using Clock = std::chrono::steady_clock;

}  // namespace

std::vector<Host> read_hostfile(const std::string& path) {
  std::ifstream file(path);
  STRATA_REQUIRE(file.good(), "hostfile ", path, ": cannot be read");
  // What each host's lines say, in order of first appearance: how many lines name it, and the
  // line that gave it a count (0: none).
  struct Entry {
    Host host;
    int lines = 0, counted_on = 0, first_line = 0;
  };
  std::vector<Entry> entries;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    const std::string where = str("hostfile ", path, ", line ", number);
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string name;
    if (!(words >> name)) continue;
    STRATA_REQUIRE(valid_host_name(name), where, ": '", name,
                   "' is not a host name (letters, digits, '-', '.', '_')");
    int slots = 0, max_slots = 0;
    for (std::string word; words >> word;) {
      const size_t equals = word.find('=');
      const std::string key = word.substr(0, equals);
      const bool is_slots = key == "slots" || key == "cpu" || key == "count";
      const bool is_max = key == "max_slots" || key == "max-slots";
      STRATA_REQUIRE(equals != std::string::npos && (is_slots || is_max), where, ": '", word,
                     "' is not slots=N or max_slots=N");
      (is_slots ? slots : max_slots) = parse_slots(word.substr(equals + 1), where);
    }
    STRATA_REQUIRE(max_slots == 0 || slots <= max_slots, where, ": slots=", slots,
                   " is more than max_slots=", max_slots);
    auto entry = std::find_if(entries.begin(), entries.end(),
                              [&](const Entry& known) { return known.host.name == name; });
    if (entry == entries.end())
      entry = entries.insert(entries.end(), Entry{{name, 0}, 0, 0, number});
    const bool counted = slots > 0 || max_slots > 0;
    STRATA_REQUIRE(entry->lines == 0 || (!counted && entry->counted_on == 0), where, ": '", name,
                   "' is also on line ", entry->first_line,
                   ". A host is either on one line with its count (", name,
                   " slots=N) or on one line per slot, as Open MPI reads a hostfile");
    ++entry->lines;
    if (counted) entry->counted_on = number;
    entry->host.slots += counted ? (slots > 0 ? slots : max_slots) : 1;
  }
  std::vector<Host> hosts;
  for (const Entry& entry : entries) {
    // Open MPI gives a host named once without a count as many slots as it finds cores there
    // when it starts its daemon: strata must know the ranks before it launches.
    STRATA_REQUIRE(entry.lines > 1 || entry.counted_on > 0, "hostfile ", path, ", line ",
                   entry.first_line, ": '", entry.host.name,
                   "' has no slot count (Open MPI would give it one slot per core it finds there "
                   "at launch): write '",
                   entry.host.name, " slots=N', N the ranks to run on it");
    hosts.push_back(entry.host);
  }
  STRATA_REQUIRE(!hosts.empty(), "hostfile ", path, ": names no host");
  return hosts;
}

std::vector<Host> parse_hosts(const std::string& list, const std::string& option) {
  std::vector<Host> hosts;
  std::istringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    const size_t colon = item.find(':');
    Host host{item.substr(0, colon), 1};
    STRATA_REQUIRE(valid_host_name(host.name), option, " ", list, ": '", item,
                   "' is not NAME or NAME:SLOTS");
    if (colon != std::string::npos) host.slots = parse_slots(item.substr(colon + 1), option);
    add_host(&hosts, host);
  }
  STRATA_REQUIRE(!hosts.empty(), option, " names no host: give NAME:SLOTS,... (e.g. a:2,b:2)");
  return hosts;
}

std::string host_list(const std::vector<Host>& hosts) {
  std::string list;
  for (const Host& host : hosts) {
    list += (list.empty() ? "" : ",") + host.name + ":" + std::to_string(host.slots);
  }
  return list;
}

std::string host_names(const std::vector<Host>& hosts) {
  std::string names;
  for (const Host& host : hosts) names += (names.empty() ? "" : ", ") + host.name;
  return names.empty() ? "none" : names;
}

int total_slots(const std::vector<Host>& hosts) {
  int slots = 0;
  for (const Host& host : hosts) slots += host.slots;
  return slots;
}

std::vector<Host> reachable_hosts(const std::vector<Host>& hosts, const std::string& iface,
                                  double timeout_s) {
  std::vector<pid_t> probes;
  for (const Host& host : hosts) {
    const std::vector<std::string> command =
        mpirun_command(LaunchTarget{1, {{host.name, 1}}, iface}, {"true"});
    const pid_t pid = fork();
    STRATA_REQUIRE(pid >= 0, "cannot fork a host probe: ", std::strerror(errno));
    if (pid == 0) {
      setpgid(0, 0);  // its own group: a probe that times out is killed with its agent
      const int null = open("/dev/null", O_RDWR);
      dup2(null, STDIN_FILENO);
      dup2(null, STDOUT_FILENO);
      dup2(null, STDERR_FILENO);
      exec_command(command);
      std::_Exit(127);
    }
    setpgid(pid, pid);
    probes.push_back(pid);
  }
  std::vector<int> answered(hosts.size(), -1);  // -1 running, 0 no, 1 yes
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (size_t left = hosts.size(); left > 0;) {
    for (size_t i = 0; i < probes.size(); ++i) {
      int status = 0;
      if (answered[i] >= 0 || waitpid(probes[i], &status, WNOHANG) != probes[i]) continue;
      answered[i] = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 1 : 0;
      --left;
    }
    if (left == 0) break;
    if (Clock::now() > deadline) {
      for (size_t i = 0; i < probes.size(); ++i) {
        if (answered[i] >= 0) continue;
        kill(-probes[i], SIGKILL);
        while (waitpid(probes[i], nullptr, 0) < 0 && errno == EINTR) {
        }
        answered[i] = 0;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::vector<Host> reachable;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (answered[i] == 1) reachable.push_back(hosts[i]);
  }
  return reachable;
}

}  // namespace strata
