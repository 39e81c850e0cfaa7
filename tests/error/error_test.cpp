#include <gpubatch/error.hpp>

#include "../support/catch.hpp"

#include <new>
#include <string>

using gpubatch::test::Contains;

TEST_CASE("GPUBATCH_CUDA_TRY throws cuda_error with the code, its name, the call and file:line",
          "[error]") {
  const auto failing_call = [] { return cudaErrorInvalidValue; };
  try {
    GPUBATCH_CUDA_TRY(failing_call());
    FAIL("no exception");
  } catch (const gpubatch::cuda_error& e) {
    CHECK(e.code() == cudaErrorInvalidValue);
    CHECK(std::string(e.name()) == "cudaErrorInvalidValue");
    CHECK_THAT(e.what(), Contains("cudaErrorInvalidValue"));
    CHECK_THAT(e.what(), Contains("failing_call()"));
    CHECK_THAT(e.what(), Contains("error_test.cpp:"));
  }
}

TEST_CASE("GPUBATCH_CUDA_TRY passes success through", "[error]") {
  CHECK_NOTHROW(GPUBATCH_CUDA_TRY(cudaSuccess));
}

TEST_CASE("GPUBATCH_CUDA_TRY_NOTHROW swallows the error", "[error]") {
  int calls = 0;
  const auto failing_call = [&] {
    ++calls;
    return cudaErrorInvalidValue;
  };
  CHECK_NOTHROW([&] { GPUBATCH_CUDA_TRY_NOTHROW(failing_call()); }());
  CHECK(calls == 1);  // evaluated exactly once
}

TEST_CASE("cuda_error and invalid_argument are gpubatch::error", "[error]") {
  CHECK_THROWS_AS(throw gpubatch::cuda_error(cudaErrorMemoryAllocation, "f()", "x.cpp", 1),
                  gpubatch::error);
  CHECK_THROWS_AS(throw gpubatch::invalid_argument("ld", "too small"), gpubatch::error);
  CHECK_THROWS_AS(throw gpubatch::invalid_argument("ld", "too small"), std::runtime_error);
}

TEST_CASE("invalid_argument names the parameter and says what is wrong", "[error]") {
  const gpubatch::invalid_argument e("ld", "leading dimension 3 is smaller than 4");
  CHECK(e.parameter() == "ld");
  CHECK_THAT(e.what(), Contains("'ld'") && Contains("leading dimension 3 is smaller than 4"));
}

TEST_CASE("out_of_memory is a std::bad_alloc with bytes requested and free", "[error]") {
  const gpubatch::out_of_memory e("device", 1024, 512);
  CHECK(e.bytes_requested() == 1024);
  CHECK(e.bytes_free() == 512);
  CHECK_THAT(e.what(), Contains("device") && Contains("1024") && Contains("512"));
  CHECK_THROWS_AS(throw e, std::bad_alloc);
}
