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
# Nor does the ASan + UBSan pass check Catch2 itself (its heap is still ASan's): instrumented,
# it takes three times as long to build.
if(GPUBATCH_SANITIZE)
  set_source_files_properties("${PROJECT_SOURCE_DIR}/tests/support/catch_impl.cpp" PROPERTIES
                              COMPILE_OPTIONS -fno-sanitize=all)
endif()
add_library(gpubatch_test_main_host OBJECT "${PROJECT_SOURCE_DIR}/tests/support/host_main.cpp")
target_link_libraries(gpubatch_test_main_host PUBLIC gpubatch_catch2 gpubatch::gpubatch gpubatch_dev_options)

# Precompiled headers: every test unit parses gpubatch.hpp and Catch2 (about 2.5 s of its front
# end with g++), so one unit per flavor of compile flags parses them once and the tests of that
# flavor load the result. The PCH is included before the test's own first line: a unit that
# defines a macro the library or its dependencies read (GPUBATCH_*, NVTX, CCCL) keeps parsing
# them itself, and CMake builds with -Winvalid-pch, so a unit whose flags would make GCC refuse
# the PCH fails to build rather than quietly losing it.
option(GPUBATCH_TEST_PCH "Precompile gpubatch.hpp and Catch2 for the host and emulated test units" ON)
# CMake opens a PCH with "#pragma GCC system_header", which would silence every warning in the
# library's headers and templates: the tests build with warnings as errors to check just those.
set(CMAKE_PCH_PROLOGUE "")

# The owner of a flavor's PCH: an empty unit with the flavor's flags, libraries and headers.
function(_gpubatch_test_pch_owner owner)
  cmake_parse_arguments(ARG "" "" "HEADERS;LIBRARIES;OPTIONS;INCLUDE_BEFORE" ${ARGN})
  set(anchor "${PROJECT_BINARY_DIR}/tests/pch/${owner}.cpp")
  file(CONFIGURE OUTPUT "${anchor}" CONTENT "// The precompiled headers' own unit.\n")
  add_library(${owner} OBJECT "${anchor}")
  if(ARG_INCLUDE_BEFORE)
    target_include_directories(${owner} BEFORE PRIVATE ${ARG_INCLUDE_BEFORE})
  endif()
  target_link_libraries(${owner} PRIVATE ${ARG_LIBRARIES})
  target_compile_options(${owner} PRIVATE ${ARG_OPTIONS})
  target_precompile_headers(${owner} PRIVATE ${ARG_HEADERS})
endfunction()

# True when one of `sources` defines a macro that the precompiled headers read, so it must parse
# them after its own definitions.
function(_gpubatch_defines_library_macro sources out)
  set(${out} FALSE PARENT_SCOPE)
  foreach(source IN LISTS sources)
    get_filename_component(source "${source}" ABSOLUTE)
    file(STRINGS "${source}" defines
         REGEX "^[ \t]*#[ \t]*define[ \t]+(GPUBATCH_|LIBCUDACXX_|_LIBCUDACXX_|CCCL_|CUB_|THRUST_|NVTX|CATCH_)")
    if(defines)
      set(${out} TRUE PARENT_SCOPE)
    endif()
  endforeach()
endfunction()

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
  set(host_options $<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-O2>)
  if(ARG_NATIVE)
    target_compile_options(${target} PRIVATE -march=native
                           $<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-O3>)
  else()
    target_compile_options(${target} PRIVATE ${host_options})
    # The few NATIVE units share no PCH: its own would cost what it saves them.
    _gpubatch_defines_library_macro("${ARG_UNPARSED_ARGUMENTS}" own_macros)
    if(GPUBATCH_TEST_PCH AND NOT own_macros)
      if(NOT TARGET gpubatch_test_pch_host)
        _gpubatch_test_pch_owner(gpubatch_test_pch_host
          HEADERS <gpubatch/gpubatch.hpp> "${PROJECT_SOURCE_DIR}/tests/support/catch.hpp"
          LIBRARIES gpubatch::gpubatch gpubatch_catch2 gpubatch_dev_options
          OPTIONS ${host_options})
      endif()
      target_precompile_headers(${target} REUSE_FROM gpubatch_test_pch_host)
    endif()
  endif()
  # CTest runs a test per core, each with an OpenMP team as wide as the machine: threads that
  # spin while they wait would take the cores from the other tests (on 2 cores the host tests
  # took a third longer). The sanitizers' options are built into the runner
  # (tests/support/sanitizer_options.hpp).
  _gpubatch_register(${target} PROPERTIES LABELS host ENVIRONMENT OMP_WAIT_POLICY=passive)
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
