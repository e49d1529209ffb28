// `strata plan published`: the calibration fitted on every published run, each run's in-sample
// and leave-one-out prediction next to its published number, and what was fitted on what.
#pragma once
#include <string>
#include <vector>

#include "strata/plan/published_runs.h"

namespace strata {

// Lines saying which constants were fitted to which values on which runs; the table
// "| run | devices | layout | stack | published | in-sample | error | leave-one-out | error |
// fitted without it | step (s) | compute | tp comm | bubble | dp comm | source |", one row per
// run; the max and mean absolute error of both kinds; and "N of M runs within 10% of their
// published number in sample", `within` being N.
struct PublishedReport {
  std::string text;
  size_t within = 0;
};
PublishedReport published_runs_report(const PublishedRuns& runs,
                                      const std::vector<std::string>& free);

}  // namespace strata
