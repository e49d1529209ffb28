// The pipeline schedule as data: for every rank (pipeline stage), the ordered list of actions it
// performs in one training step. Generators (generators.h) build these lists, the validator
// proves them complete and deadlock-free, the simulator times them, the executor runs them.
//
// Virtual stages: with v model chunks per rank, the model is cut into p*v virtual stages
// s = 0..p*v-1, placed on the ranks by the schedule's ChunkPlacement (core/layout.h): Megatron's
// interleaving (s on rank s % p as its chunk s / p) or zb-v's V (rank r holds r and 2p-1-r).
// With v = 1, virtual stage, rank and stage are the same number.
#pragma once
#include <string>
#include <vector>

#include "strata/core/layout.h"

namespace strata {

enum class ActionKind {
  Forward,         // F: forward of one microbatch through one chunk; keeps its activations
  Backward,        // full backward: input gradient and weight gradient together
  BackwardInput,   // B: input gradient only (zero-bubble); the weight gradient is queued
  BackwardWeight,  // W: the queued weight gradient of a BackwardInput; frees the activations
  SendActivation,  // non-blocking send of a forward output to the next virtual stage
  RecvActivation,  // blocking receive of a forward input from the previous virtual stage
  SendGrad,        // non-blocking send of an input gradient to the previous virtual stage
  RecvGrad,        // blocking receive of an output gradient from the next virtual stage
};

struct Action {
  ActionKind kind = ActionKind::Forward;
  int microbatch = 0;
  int chunk = 0;  // which of this rank's v chunks (Schedule::virtual_stage maps it)
  // The virtual stage on the other end of a send or receive; -1 for compute actions.
  int peer_stage = -1;

  bool operator==(const Action& other) const {
    return kind == other.kind && microbatch == other.microbatch && chunk == other.chunk &&
           peer_stage == other.peer_stage;
  }
};

// "F", "B", "Bi", "W", "SendAct", "RecvAct", "SendGrad", "RecvGrad".
const char* kind_name(ActionKind kind);
bool is_compute(ActionKind kind);
bool is_send(ActionKind kind);
bool is_recv(ActionKind kind);
// Readable form for messages and dumps: "F(mb 3, chunk 1)", "SendAct(mb 3, chunk 1, to stage 6)".
std::string to_string(const Action& action);

struct Schedule {
  std::string name;      // "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v", or a test's own
  int stages = 1;        // p: pipeline ranks
  int microbatches = 1;  // m: microbatches per step
  int chunks = 1;        // v: model chunks (virtual stages) per rank
  ChunkPlacement placement = ChunkPlacement::interleaved;  // which rank holds which stage
  std::vector<std::vector<Action>> ranks;  // ranks[r]: rank r's actions in execution order

  StagePlacement stage_placement() const { return {placement, stages, chunks}; }
  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int rank, int chunk) const {
    return static_cast<int>(stage_placement().virtual_stage(rank, chunk));
  }
  int rank_of(int virtual_stage) const {
    return static_cast<int>(stage_placement().rank_of(virtual_stage));
  }
};

// One line per action, rank by rank: a dump for debugging and for golden tests.
std::string to_string(const Schedule& schedule);

}  // namespace strata
