# The emulated CUDA device: builds gpubatch's CUDA test bodies (*_cuda_test.cu) with the host
# compiler against tests/support/emulation, so the library's real dispatch and kernel code runs
# on a machine without a GPU. Test infrastructure only: never installed, never linked by users.
include_guard(GLOBAL)

find_package(Threads REQUIRED)
set(GPUBATCH_EMULATION_DIR "${CMAKE_CURRENT_LIST_DIR}")

# The runtime (streams, memory, fibers, the block executor) is built without sanitizer
# instrumentation: sanitized tests see their own accesses, and the runtime's bookkeeping between
# fibers is not a data race of the code under test. It tells the sanitizers about stack switches
# and barriers through their interfaces.
add_library(gpubatch_emulation STATIC
  "${GPUBATCH_EMULATION_DIR}/src/device.cpp"
  "${GPUBATCH_EMULATION_DIR}/src/fiber.cpp"
  "${GPUBATCH_EMULATION_DIR}/src/runtime.cpp")
target_include_directories(gpubatch_emulation
  PUBLIC "${GPUBATCH_EMULATION_DIR}/include"
         "$<TARGET_PROPERTY:gpubatch,INTERFACE_INCLUDE_DIRECTORIES>"
         ${CUDAToolkit_INCLUDE_DIRS})
target_compile_features(gpubatch_emulation PUBLIC cxx_std_17)
target_compile_options(gpubatch_emulation PRIVATE -O2 -g -Wall -Wextra
                                                  -fno-tree-loop-distribute-patterns)
# The fiber switch returns to addresses no call pushed: it cannot take part in shadow stacks.
set_source_files_properties("${GPUBATCH_EMULATION_DIR}/src/fiber.cpp" PROPERTIES
                            COMPILE_OPTIONS "-fcf-protection=none")
# The runtime serves every architecture; only test translation units say which they are.
target_compile_definitions(gpubatch_emulation PRIVATE GPUBATCH_EMULATION_RUNTIME)
target_link_libraries(gpubatch_emulation PUBLIC Threads::Threads ${CMAKE_DL_LIBS})
if(OpenMP_CXX_FOUND)
  target_link_libraries(gpubatch_emulation PUBLIC OpenMP::OpenMP_CXX)
endif()

# The runner of the emulated tests: the gpu tests' runner, whose device check finds the
# emulated devices. Compiled once for all of them.
add_library(gpubatch_test_main_emulated OBJECT "${PROJECT_SOURCE_DIR}/tests/support/gpu_main.cpp")
target_link_libraries(gpubatch_test_main_emulated PUBLIC gpubatch_emulation gpubatch_catch2
                                                         gpubatch_dev_options)

# gpubatch_add_emulated_test(<target> <file.cu> [DEVICES <list>] [ARCH <sm>] [RUN_WITHOUT_DEVICE]
#                            [PROPERTIES <test properties>...])
# Compiles <file.cu> as C++ for the emulated device and registers its test cases with the label
# "emulated". DEVICES names the emulated devices (GPUBATCH_EMULATED_DEVICES, default h100);
# ARCH the architecture the kernels count as compiled for (default 90). RUN_WITHOUT_DEVICE uses
# the host tests' runner, for tests of what happens when no device is usable (DEVICES none).
function(gpubatch_add_emulated_test target source)
  cmake_parse_arguments(ARG "RUN_WITHOUT_DEVICE" "DEVICES;ARCH" "PROPERTIES" ${ARGN})
  set(runner gpubatch_test_main_emulated)
  if(ARG_RUN_WITHOUT_DEVICE)
    set(runner gpubatch_test_main_host)
  endif()
  get_filename_component(source "${source}" ABSOLUTE)
  set(wrapper "${CMAKE_CURRENT_BINARY_DIR}/emulated/${target}.cpp")
  file(GENERATE OUTPUT "${wrapper}" CONTENT "#include \"${source}\"\n")
  add_executable(${target} "${wrapper}" $<TARGET_OBJECTS:${runner}>
                 $<TARGET_OBJECTS:gpubatch_catch_impl>)
  # The emulation headers (mma.h, cuda_pipeline_primitives.h) come before the toolkit's.
  target_include_directories(${target} BEFORE PRIVATE "${GPUBATCH_EMULATION_DIR}/include")
  set(options
    # #pragma unroll is nvcc's; the host compiler ignores it.
    -Wno-unknown-pragmas
    # An emulated test runs at the fiber runtime's speed (built -O2 above): its own unit at -O1
    # builds in about half the time of -O3 and runs as fast.
    $<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-O1>)
  target_compile_options(${target} PRIVATE ${options})
  # The emulated device's header comes first in every unit: on the command line, or as the first
  # of the precompiled headers (cmake/GpubatchTesting.cmake), which the units built for the
  # default architecture share.
  _gpubatch_defines_library_macro("${source}" own_macros)
  if(GPUBATCH_TEST_PCH AND NOT ARG_ARCH AND NOT own_macros)
    if(NOT TARGET gpubatch_test_pch_emulated)
      _gpubatch_test_pch_owner(gpubatch_test_pch_emulated
        HEADERS <gpubatch_emulation/device.hpp> <gpubatch/gpubatch.hpp>
                "${PROJECT_SOURCE_DIR}/tests/support/catch.hpp"
        INCLUDE_BEFORE "${GPUBATCH_EMULATION_DIR}/include"
        LIBRARIES gpubatch_emulation gpubatch_catch2 gpubatch_dev_options
        OPTIONS ${options})
    endif()
    target_precompile_headers(${target} REUSE_FROM gpubatch_test_pch_emulated)
  else()
    target_compile_options(${target} PRIVATE -include gpubatch_emulation/device.hpp)
  endif()
  if(ARG_ARCH)
    target_compile_definitions(${target} PRIVATE GPUBATCH_EMULATION_ARCH=${ARG_ARCH})
  endif()
  target_link_libraries(${target} PRIVATE gpubatch_emulation gpubatch_catch2 gpubatch_dev_options)
  set(properties LABELS emulated ${ARG_PROPERTIES})
  if(ARG_DEVICES)
    list(APPEND properties ENVIRONMENT "GPUBATCH_EMULATED_DEVICES=${ARG_DEVICES}")
  endif()
  _gpubatch_register(${target} PROPERTIES ${properties})
endfunction()
