// One training step's operators, as ATen's profiler records them (log.profile_step = N): every
// ATen operator and autograd node the step ran, with its input shapes, and strata's own
// kernels, which name themselves (strata::product, strata::attention_forward, ...: kernels/
// record their scopes with RECORD_FUNCTION, free when nothing records). Each rank writes
//   <log.dir>/profile_step_N_rank_R.json   the step as a Chrome trace (ui.perfetto.dev),
//                                          an event per operator with its shapes;
//   <log.dir>/profile_step_N_rank_R.txt    the operators by self time (their time less their
//                                          children's), with calls and shapes, and what the
//                                          step spent outside any recorded operator.
// Where a step goes is how a slow kernel is found: such a profile showed the bf16 step's
// whole-tensor attention casts and float32 norm copies (docs/performance.md).
#pragma once
#include <cstdint>
#include <string>

namespace strata {

class StepProfile {
 public:
  // Starts recording on this thread (and what ATen runs from it); `dir` must exist or be
  // creatable.
  StepProfile(std::string dir, int64_t step, int rank);
  // Stops recording, if finish() was not called (nothing written).
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;

  // Stops recording and writes both files; step_seconds is the step's wall time (for the
  // share each operator took and the unrecorded rest). Returns the text file's path.
  std::string finish(double step_seconds);

 private:
  std::string dir_;
  int64_t step_;
  int rank_;
  bool recording_ = true;
};

}  // namespace strata
