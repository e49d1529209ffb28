// Training on real ranks in MPI tests, wired as `strata train` wires it: the config validated
// for the ranks (the layout rules, the schedule's included), the mesh built from its layout,
// then the trainer.
// Header-only: it needs strata_train, which only the binaries that include it link.
#pragma once
#include <functional>

#include "strata/core/config.h"
#include "strata/dist/mesh.h"
#include "strata/train/trainer.h"

namespace strata::testing {

// Trains `config` on the ranks of `world` (validated for world.size() ranks, so dp = -1 takes
// the remaining ranks). `inspect`, if given, sees the trainer after the run; `prepare` before;
// `dataset`, if given, replaces the tokens config.data names.
inline TrainResult train_on(Comm& world, Config config,
                            const std::function<void(const Trainer&)>& inspect = nullptr,
                            const std::function<void(Trainer&)>& prepare = nullptr,
                            std::shared_ptr<TokenDataset> dataset = nullptr) {
  config = validate_config(config, world.size());
  Mesh mesh(world, mesh_shape_of(config.parallel));
  Trainer trainer(config, mesh, std::move(dataset));
  if (prepare) prepare(trainer);
  TrainResult result = trainer.run();
  if (inspect) inspect(trainer);
  return result;
}

}  // namespace strata::testing
