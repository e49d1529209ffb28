// SVG timeline of a simulated step. The scale gives the shortest compute box room for its
// label where the picture stays under a few thousand pixels; narrower boxes go unlabeled and
// keep their tooltip (<title>).
#include "strata/pipeline/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <set>
#include <sstream>

namespace strata {
namespace {

constexpr double kLeft = 90;   // room for the stage labels
constexpr double kRight = 90;  // room for the idle share at the end of each row
constexpr double kTop = 46;    // title and legend
constexpr double kRowHeight = 26;
constexpr double kRowGap = 8;
constexpr double kAxisHeight = 34;
constexpr double kMinPlotWidth = 900;
constexpr double kMaxPlotWidth = 6000;
constexpr double kLabelWidth = 22;  // a box narrower than this gets no label

struct Rgb {
  int red, green, blue;
};

Rgb base_color(ActionKind kind) {
  switch (kind) {
    case ActionKind::Forward:
      return {78, 121, 167};  // blue
    case ActionKind::Backward:
      return {89, 161, 79};  // green
    case ActionKind::BackwardInput:
      return {118, 183, 178};  // teal
    default:
      return {242, 142, 43};  // W: orange
  }
}

// Chunk c of v is mixed with white by up to 45%, so chunks of one kind stay one hue.
std::string fill_color(ActionKind kind, int chunk, int chunks) {
  const Rgb rgb = base_color(kind);
  const double white = chunks > 1 ? 0.45 * chunk / (chunks - 1) : 0.0;
  auto mix = [&](int channel) {
    return static_cast<int>(std::lround(channel + (255 - channel) * white));
  };
  std::ostringstream out;
  out << "rgb(" << mix(rgb.red) << "," << mix(rgb.green) << "," << mix(rgb.blue) << ")";
  return out.str();
}

const char* kind_title(ActionKind kind) {
  switch (kind) {
    case ActionKind::Forward:
      return "forward (F)";
    case ActionKind::Backward:
      return "full backward (B+W)";
    case ActionKind::BackwardInput:
      return "input grad (B)";
    default:
      return "weight grad (W)";
  }
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// 1, 2 or 5 times a power of ten, so that the axis gets about ten ticks.
double tick_step(double span) {
  if (span <= 0) return 1;
  const double raw = span / 10;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0}) {
    if (raw <= factor * power) return factor * power;
  }
  return 10 * power;
}

std::string number(double value) {
  std::ostringstream out;
  out << std::setprecision(6) << value;
  return out.str();
}

std::string percent(double fraction) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << 100 * fraction << "%";
  return out.str();
}

}  // namespace

std::string render_timeline_svg(const SimulationResult& result) {
  double shortest = 0;
  std::set<ActionKind> kinds;
  for (const auto& entries : result.timeline) {
    for (const TimelineEntry& entry : entries) {
      if (!is_compute(entry.action.kind) || entry.end <= entry.start) continue;
      kinds.insert(entry.action.kind);
      const double duration = entry.end - entry.start;
      shortest = shortest == 0 ? duration : std::min(shortest, duration);
    }
  }
  const double span = result.step_time > 0 ? result.step_time : 1;
  double scale = kMinPlotWidth / span;
  if (shortest > 0) scale = std::max(scale, kLabelWidth / shortest);
  scale = std::min(scale, kMaxPlotWidth / span);
  const double plot_width = span * scale;
  const double width = kLeft + plot_width + kRight;
  const double rows_bottom = kTop + result.stages * (kRowHeight + kRowGap);
  const double height = rows_bottom + kAxisHeight;

  std::ostringstream svg;
  svg << std::fixed << std::setprecision(1);
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect x=\"0\" y=\"0\" width=\"" << width << "\" height=\"" << height
      << "\" fill=\"white\"/>\n";
  svg << "<text x=\"" << kLeft << "\" y=\"16\" font-size=\"13\" font-weight=\"bold\">"
      << escape(result.schedule) << ": p=" << result.stages << ", m=" << result.microbatches
      << ", v=" << result.chunks << "; step time " << number(result.step_time) << ", bubble "
      << percent(result.bubble_fraction) << "</text>\n";
  double legend_x = kLeft;
  for (ActionKind kind : kinds) {
    svg << "<rect x=\"" << legend_x << "\" y=\"26\" width=\"12\" height=\"12\" fill=\""
        << fill_color(kind, 0, 1) << "\"/>"
        << "<text x=\"" << legend_x + 16 << "\" y=\"36\">" << kind_title(kind) << "</text>\n";
    legend_x += 150;
  }
  if (result.chunks > 1) {
    svg << "<text x=\"" << legend_x << "\" y=\"36\">lighter = later chunk; label = microbatch"
        << "</text>\n";
  }

  for (int rank = 0; rank < result.stages; ++rank) {
    const double y = kTop + rank * (kRowHeight + kRowGap);
    const StageReport& stage = result.per_stage[rank];
    svg << "<g class=\"stage\" data-stage=\"" << rank << "\">\n"
        << "<text x=\"" << kLeft - 8 << "\" y=\"" << y + kRowHeight / 2 + 4
        << "\" text-anchor=\"end\">stage " << rank << "</text>\n"
        << "<rect x=\"" << kLeft << "\" y=\"" << y << "\" width=\"" << plot_width << "\" height=\""
        << kRowHeight << "\" fill=\"#eeeeee\"/>\n";
    for (const TimelineEntry& entry : result.timeline[rank]) {
      if (!is_compute(entry.action.kind)) continue;
      const double x = kLeft + entry.start * scale;
      const double box = (entry.end - entry.start) * scale;
      svg << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << box << "\" height=\""
          << kRowHeight << "\" fill=\""
          << fill_color(entry.action.kind, entry.action.chunk, result.chunks)
          << "\" stroke=\"white\" stroke-width=\"0.5\"><title>" << kind_name(entry.action.kind)
          << " mb " << entry.action.microbatch << " chunk " << entry.action.chunk << ": "
          << number(entry.start) << " to " << number(entry.end) << "</title></rect>\n";
      if (box >= kLabelWidth) {
        svg << "<text x=\"" << x + box / 2 << "\" y=\"" << y + kRowHeight / 2 + 4
            << "\" text-anchor=\"middle\" fill=\"white\">" << entry.action.microbatch
            << "</text>\n";
      }
    }
    svg << "<text x=\"" << kLeft + plot_width + 8 << "\" y=\"" << y + kRowHeight / 2 + 4
        << "\">idle " << percent(stage.bubble_fraction) << "</text>\n"
        << "</g>\n";
  }

  const double step = tick_step(span);
  svg << "<g class=\"axis\">\n"
      << "<line x1=\"" << kLeft << "\" y1=\"" << rows_bottom << "\" x2=\"" << kLeft + plot_width
      << "\" y2=\"" << rows_bottom << "\" stroke=\"black\"/>\n";
  for (int tick = 0; tick * step <= span * (1 + 1e-9); ++tick) {
    const double x = kLeft + tick * step * scale;
    svg << "<line x1=\"" << x << "\" y1=\"" << rows_bottom << "\" x2=\"" << x << "\" y2=\""
        << rows_bottom + 5 << "\" stroke=\"black\"/>"
        << "<text x=\"" << x << "\" y=\"" << rows_bottom + 18 << "\" text-anchor=\"middle\">"
        << number(tick * step) << "</text>\n";
  }
  svg << "<text x=\"" << kLeft + plot_width << "\" y=\"" << rows_bottom + 30
      << "\" text-anchor=\"end\">time</text>\n"
      << "</g>\n</svg>\n";
  return svg.str();
}

}  // namespace strata
