// Corrupting files the way damage and hostile input do, for the tests that feed thousands of
// corrupted headers, indexes and manifests to the readers of untrusted files.
#pragma once
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <typeinfo>

#include "strata/core/error.h"

namespace strata::testing {

// One random corruption of `text`: a few flipped bits, a cut, a deleted stretch, a run of
// digits replaced by a hostile value (-1, 2^63 - 1, 2^64 - 1, 1e308, null, ...), or a
// duplicated stretch. For JSON the hostile numbers reach the checks of sizes and offsets.
std::string mutate(const std::string& text, std::mt19937& random);

// Runs `read` on mutation number `mutation`: true when it threw a UserError, false when it
// succeeded (a harmless mutation); any other exception fails the test, naming the mutation.
// (A crash ends the test binary, which fails too.)
template <typename Read>
bool refused_cleanly(int mutation, Read&& read) {
  try {
    read();
  } catch (const UserError&) {
    return true;
  } catch (const std::exception& error) {
    ADD_FAILURE() << "mutation " << mutation << ": " << typeid(error).name() << ": "
                  << error.what();
  }
  return false;
}

}  // namespace strata::testing
