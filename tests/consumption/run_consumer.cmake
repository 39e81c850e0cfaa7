# cmake -P run_consumer.cmake: builds, runs and installs tests/consumption/consumer against this
# checkout. Inputs: MODE (fetchcontent | add_subdirectory | find_package), SOURCE_DIR (gpubatch's
# root), WORK_DIR (scratch folder), GENERATOR, CXX_COMPILER; HAS_MPI (gpubatch::mpi must be
# available to the consumer).
cmake_minimum_required(VERSION 3.24)

# Runs a step; its output is left in `step_output`.
function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumption (${MODE}): ${step} failed (${rc}):\n${out}")
  endif()
  message(STATUS "${step}: ok\n${out}")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

function(fail what)
  message(FATAL_ERROR "consumption (${MODE}): ${what}")
endfunction()

# `file` exists under `prefix` (a relative glob) and, if `same_as` is given, has its content.
function(require_installed prefix file)
  file(GLOB found "${prefix}/${file}")
  if(NOT found)
    fail("${file} is not installed under ${prefix}")
  endif()
  if(ARGC GREATER 2)
    file(READ "${ARGV2}" expected)
    file(READ "${found}" actual)
    if(NOT actual STREQUAL expected)
      fail("${found} differs from ${ARGV2}")
    endif()
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(common -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release)
set(consumer_args "")
if(MODE STREQUAL "find_package")
  run("configure gpubatch" ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/gpubatch-build"
      ${common} -DGPUBATCH_BUILD_TESTS=OFF -DGPUBATCH_BUILD_BENCHMARKS=OFF
      -DGPUBATCH_BUILD_EXAMPLES=OFF -DGPUBATCH_INSTALL=ON)
  run("install gpubatch" ${CMAKE_COMMAND} --install "${WORK_DIR}/gpubatch-build"
      --prefix "${WORK_DIR}/prefix")
  require_installed("${WORK_DIR}/prefix" "share/doc/gpubatch/LICENSE" "${SOURCE_DIR}/LICENSE")
  set(consumer_args "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
endif()
run("configure consumer" ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/consumption/consumer"
    -B "${WORK_DIR}/consumer-build" ${common} -DGPUBATCH_CONSUME_MODE=${MODE}
    -DGPUBATCH_SOURCE_DIR=${SOURCE_DIR} ${consumer_args})
# gpubatch's CUDA architectures are those of its own tests: a consumer's build never shows them.
if(step_output MATCHES "gpubatch: CUDA targets")
  fail("the consumer's configure printed gpubatch's own status line:\n${step_output}")
endif()
run("build consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/consumer-build")
run("run consumer" "${WORK_DIR}/consumer-build/consumer")
# The MPI component, where gpubatch found MPI (HAS_MPI: gpubatch's own build did).
if(HAS_MPI AND NOT EXISTS "${WORK_DIR}/consumer-build/consumer_mpi")
  fail("gpubatch::mpi was not available to the consumer")
endif()
if(EXISTS "${WORK_DIR}/consumer-build/consumer_mpi")
  run("run consumer_mpi" "${WORK_DIR}/consumer-build/consumer_mpi")
endif()
run("install consumer" ${CMAKE_COMMAND} --install "${WORK_DIR}/consumer-build"
    --prefix "${WORK_DIR}/consumer-prefix")
require_installed("${WORK_DIR}/consumer-prefix" "lib*/libconsumer_ops.a")
require_installed("${WORK_DIR}/consumer-prefix" "lib*/cmake/consumer/consumerTargets.cmake")
if(NOT MODE STREQUAL "find_package")
  # gpubatch, a subproject, installs itself beside the consumer: the export set it belongs to.
  require_installed("${WORK_DIR}/consumer-prefix" "lib*/cmake/gpubatch/gpubatchConfig.cmake")
  require_installed("${WORK_DIR}/consumer-prefix" "include/gpubatch/gpubatch.hpp")
  require_installed("${WORK_DIR}/consumer-prefix" "share/doc/gpubatch/LICENSE"
                    "${SOURCE_DIR}/LICENSE")
endif()
