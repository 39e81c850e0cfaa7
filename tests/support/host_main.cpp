// Runner of the host test executables.
#include "catch_runner.hpp"
#include "sanitizer_options.hpp"

int main(int argc, char* argv[]) { return gpubatch::test::run_catch(argc, argv); }
