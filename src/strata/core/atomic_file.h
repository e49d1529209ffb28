// Crash- and race-safe file replacement (prepared data, metrics, the product probe's cache):
// write a uniquely named sibling, fsync it, rename it over the target, fsync the directory. A
// reader sees the old file or the whole new one, never a prefix.
#pragma once
#include <cstddef>
#include <string>

namespace strata {

// Throws UserError naming `path` and the OS reason when any step fails.
void write_file_atomically(const std::string& path, const void* data, size_t size);

// A path next to `path` that no other process or host picks at the same time.
std::string unique_sibling_path(const std::string& path);

}  // namespace strata
