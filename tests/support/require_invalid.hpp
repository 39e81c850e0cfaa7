// The validation tests' check: a call throws gpubatch::invalid_argument naming the parameter.
#pragma once

#include <gpubatch/error.hpp>

#include "catch.hpp"

#include <string>

namespace gpubatch::test {

/// Runs `call` and checks that it throws invalid_argument whose parameter is `parameter` and
/// whose message names it.
template <class F>
void require_invalid(const std::string& parameter, F&& call) {
  try {
    call();
    FAIL("no exception; expected invalid_argument for '" << parameter << "'");
  } catch (const gpubatch::invalid_argument& e) {
    INFO(e.what());
    CHECK(e.parameter() == parameter);
    CHECK_THAT(e.what(), Contains(parameter));
  }
}

/// As above, and the message also says `what` (the value or the rule at fault).
template <class F>
void require_invalid(const std::string& parameter, const std::string& what, F&& call) {
  try {
    call();
    FAIL("no exception; expected invalid_argument for '" << parameter << "' saying '" << what
                                                         << "'");
  } catch (const gpubatch::invalid_argument& e) {
    INFO(e.what());
    CHECK(e.parameter() == parameter);
    CHECK_THAT(e.what(), Contains(parameter));
    CHECK_THAT(e.what(), Contains(what));
  }
}

}  // namespace gpubatch::test
