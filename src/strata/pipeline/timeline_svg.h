// Draws a simulated step as an SVG timeline: one row per stage, one box per compute action,
// colored by kind (F, full backward, B, W; lighter for later chunks) and labeled with its
// microbatch, over a time axis. The same picture the Chrome trace of a real run shows.
#pragma once
#include <string>

#include "strata/pipeline/simulator.h"

namespace strata {

// A standalone SVG document. Each stage's row is a <g class="stage" data-stage="r">.
std::string render_timeline_svg(const SimulationResult& result);

}  // namespace strata
