// Where strata keeps what it can make again but should not have to: tokenized corpora
// (data/corpus_cache.h) and the product probe's choices (kernels/product_probe.h).
#pragma once
#include <string>

namespace strata {

// $STRATA_CACHE_DIR, else $XDG_CACHE_HOME/strata, else $HOME/.cache/strata. Throws
// UserError when none of these variables is set.
std::string default_cache_dir();

}  // namespace strata
