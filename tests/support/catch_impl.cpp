// Catch2's implementation, compiled once and shared by the host and gpu test runners (it is the
// single most expensive translation unit of the test suite).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_runner.hpp"

int gpubatch::test::run_catch(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
