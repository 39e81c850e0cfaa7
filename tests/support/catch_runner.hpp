#pragma once

namespace gpubatch::test {
/// Runs the Catch2 session; defined next to Catch2's implementation (catch_impl.cpp), so the
/// runners stay cheap to compile.
int run_catch(int argc, char* argv[]);
}  // namespace gpubatch::test
