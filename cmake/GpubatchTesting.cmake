# Helpers that define gpubatch's test executables. Catch2 (v3 or v2) comes from the system or from
# CMAKE_PREFIX_PATH (scripts/gpu-check points it at a folder when Catch2 is not installed).
include_guard(GLOBAL)

# Catch2 v3 (a compiled library) when installed, else v2 (one header): tests include
# tests/support/catch.hpp, which picks the headers; gpubatch_catch2 carries the choice.
find_package(Catch2 3 QUIET CONFIG)
add_library(gpubatch_catch2 INTERFACE)
if(Catch2_FOUND)
  target_link_libraries(gpubatch_catch2 INTERFACE Catch2::Catch2)
  target_compile_definitions(gpubatch_catch2 INTERFACE GPUBATCH_CATCH2_V3)
else()
  find_package(Catch2 2 REQUIRED)
  target_link_libraries(gpubatch_catch2 INTERFACE Catch2::Catch2)
endif()
message(STATUS "gpubatch: tests use Catch2 ${Catch2_VERSION}")
# Catch.cmake (catch_discover_tests) sits beside Catch2's package config.
list(APPEND CMAKE_MODULE_PATH "${Catch2_DIR}")
include(Catch OPTIONAL RESULT_VARIABLE GPUBATCH_CATCH_MODULE)

# Exit code of a gpu test executable without a device; must match tests/support/skip_code.hpp.
set(GPUBATCH_SKIP_RETURN_CODE 77)

# Catch2's implementation is compiled once, for both runners.
add_library(gpubatch_catch_impl OBJECT "${PROJECT_SOURCE_DIR}/tests/support/catch_impl.cpp")
target_link_libraries(gpubatch_catch_impl PUBLIC gpubatch_catch2 gpubatch_dev_options)
# Catch2 v2's implementation is the slowest unit of the suite to build (90 s at -O3) and never
# on a test's hot path: at -O1 it builds in a quarter of that time.
target_compile_options(gpubatch_catch_impl PRIVATE $<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-O1>)
add_library(gpubatch_test_main_host OBJECT "${PROJECT_SOURCE_DIR}/tests/support/host_main.cpp")
target_link_libraries(gpubatch_test_main_host PUBLIC gpubatch_catch2 gpubatch::gpubatch gpubatch_dev_options)

# Registers the test cases of `target` with CTest: one CTest test per Catch2 test case when
# Catch2's CMake module is available, else one per executable.
function(_gpubatch_register target)
  cmake_parse_arguments(ARG "" "" "PROPERTIES" ${ARGN})
  if(GPUBATCH_CATCH_MODULE)
    catch_discover_tests(${target} TEST_PREFIX "${target}: " PROPERTIES ${ARG_PROPERTIES})
  else()
    add_test(NAME ${target} COMMAND ${target})
    set_tests_properties(${target} PROPERTIES ${ARG_PROPERTIES})
  endif()
endfunction()

# A host test: compiled by the host compiler, always run (also under the sanitizers).
# gpubatch_add_host_test(<target> [NATIVE] <sources>...): a Release build compiles it at -O2, the
# level distributions ship, in half the time of -O3; NATIVE units are the performance build's
# flags instead, -O3 -march=native (the widest vector code paths of the host kernels).
function(gpubatch_add_host_test target)
  cmake_parse_arguments(ARG "NATIVE" "" "" ${ARGN})
  add_executable(${target} ${ARG_UNPARSED_ARGUMENTS} $<TARGET_OBJECTS:gpubatch_test_main_host>
                 $<TARGET_OBJECTS:gpubatch_catch_impl>)
  target_link_libraries(${target} PRIVATE gpubatch::gpubatch gpubatch_catch2 gpubatch_dev_options)
  if(ARG_NATIVE)
    target_compile_options(${target} PRIVATE -march=native
                           $<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-O3>)
  else()
    target_compile_options(${target} PRIVATE $<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-O2>)
  endif()
  set(env "")
  if(GPUBATCH_SANITIZE)
    # Impossible allocations must fail with out_of_memory rather than abort inside ASan.
    set(env ENVIRONMENT "ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1")
  endif()
  _gpubatch_register(${target} PROPERTIES LABELS host ${env})
endfunction()

# A gpu test: CUDA sources compiled by nvcc; Skipped without a device. Left out when
# GPUBATCH_BUILD_GPU_TESTS is off.
function(gpubatch_add_gpu_test target)
  if(NOT GPUBATCH_BUILD_GPU_TESTS)
    return()
  endif()
  if(NOT TARGET gpubatch_test_main_gpu)
    add_library(gpubatch_test_main_gpu OBJECT "${PROJECT_SOURCE_DIR}/tests/support/gpu_main.cpp")
    target_link_libraries(gpubatch_test_main_gpu PUBLIC gpubatch_catch2 gpubatch::gpubatch gpubatch_dev_options)
  endif()
  add_executable(${target} ${ARGN} $<TARGET_OBJECTS:gpubatch_test_main_gpu>
                 $<TARGET_OBJECTS:gpubatch_catch_impl>)
  target_link_libraries(${target} PRIVATE gpubatch::gpubatch gpubatch_catch2 gpubatch_dev_options)
  _gpubatch_register(${target} PROPERTIES LABELS gpu SKIP_RETURN_CODE ${GPUBATCH_SKIP_RETURN_CODE})
endfunction()

# A CUDA test body: a gpu test when nvcc is found, and the same body on the emulated device
# (<target>_emulated) when GPUBATCH_EMULATION is on.
function(gpubatch_add_cuda_test target source)
  if(GPUBATCH_HAS_CUDA_COMPILER)
    gpubatch_add_gpu_test(${target} ${source})
  endif()
  if(GPUBATCH_EMULATION)
    gpubatch_add_emulated_test(${target}_emulated ${source} ${ARGN})
  endif()
endfunction()
