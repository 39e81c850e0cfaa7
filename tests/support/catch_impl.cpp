// Catch2's session, compiled once and shared by the host and gpu test runners. With Catch2 v2
// this file also holds Catch2's implementation (the single most expensive translation unit of
// the test suite); v3 ships it as a library.
#if defined(GPUBATCH_CATCH2_V3)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include "catch_runner.hpp"

int gpubatch::test::run_catch(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
