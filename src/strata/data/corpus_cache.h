// The corpus cache: a text corpus is tokenized on first use into a prepared shard directory
// under the cache directory, keyed by what went in, so later runs and the other ranks of a
// run just load shards.
#pragma once
#include <string>
#include <vector>

#include "strata/core/cache_dir.h"  // default_cache_dir
#include "strata/data/text_source.h"
#include "strata/data/tokenizer.h"

namespace strata {

// "<tokenizer>-<16 hex digits>" (the tokenizer's name made safe for a file name: a directory
// path's '/' become '_'): a hash of the cache format version, the tokenizer name and
// every source's path, format, size and modification time, so editing a file or changing
// the preprocessing makes a new entry instead of reusing a stale one.
std::string corpus_cache_key(const std::vector<TextSource>& sources, const Tokenizer& tokenizer);

// cache_dir/corpus/<key>: the prepared shard directory for `sources`, prepared first if it
// is absent. Safe when several processes (ranks, on one host or sharing a file system) call
// it at once: each builds in its own temporary directory and renames it into place; a
// process that loses the race deletes its copy and uses the winner's.
std::string cached_corpus_dir(const std::vector<TextSource>& sources, const Tokenizer& tokenizer,
                              const std::string& cache_dir);

}  // namespace strata
