// The two failure kinds of core/error.h: STRATA_CHECK (internal bug, says where) and
// STRATA_REQUIRE (user error, says exactly the message given).
#include <gtest/gtest.h>

#include "expect_error.h"
#include "strata/core/error.h"

namespace strata {
namespace {

TEST(Error, CheckFailureSaysBugWhereAndWhat) {
  EXPECT_NO_THROW(STRATA_CHECK(1 + 1 == 2, "never shown"));
  const std::string message = testing::message_of<InternalError>([] {
    const int heads = 3;
    STRATA_CHECK(heads % 2 == 0, "heads = ", heads);
  });
  EXPECT_CONTAINS(message, "bug at ");
  EXPECT_CONTAINS(message, "test_error.cpp:");
  EXPECT_CONTAINS(message, "check 'heads % 2 == 0' failed: heads = 3");

  const std::string bare = testing::message_of<InternalError>([] { STRATA_CHECK(2 < 1); });
  EXPECT_CONTAINS(bare, "check '2 < 1' failed");
  EXPECT_EQ(bare.substr(bare.size() - 6), "failed") << "no message, no trailing colon: " << bare;

  // The message is built only when the check fails.
  int evaluations = 0;
  auto count = [&] { return ++evaluations; };
  STRATA_CHECK(true, count());
  STRATA_REQUIRE(true, count());
  EXPECT_EQ(evaluations, 0);
}

TEST(Error, RequireThrowsUserErrorWithExactlyTheMessage) {
  EXPECT_EQ(testing::user_error([] {
              const int tp = 5, heads = 12;
              STRATA_REQUIRE(heads % tp == 0, "n_heads (", heads, ") is not divisible by tp (", tp,
                             ")");
            }),
            "n_heads (12) is not divisible by tp (5)");

  // A catch for user errors must never swallow a bug, and the other way round.
  EXPECT_THROW(STRATA_REQUIRE(false, "x"), UserError);
  EXPECT_THROW(STRATA_CHECK(false), InternalError);
  EXPECT_FALSE((std::is_base_of_v<UserError, InternalError>));
  EXPECT_FALSE((std::is_base_of_v<InternalError, UserError>));
  EXPECT_FALSE((std::is_base_of_v<UserError, CommError>));

  EXPECT_EQ(str("tp (", 4, ") x ", 2.5, " ", std::string("ok")), "tp (4) x 2.5 ok");
}

}  // namespace
}  // namespace strata
