# cmake -P run_consumer.cmake: builds and runs tests/consumption/consumer against this checkout.
# Inputs: MODE (fetchcontent | add_subdirectory | find_package), SOURCE_DIR (gpubatch's root),
# WORK_DIR (scratch folder), GENERATOR, CXX_COMPILER.
cmake_minimum_required(VERSION 3.23)

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumption (${MODE}): ${step} failed (${rc}):\n${out}")
  endif()
  message(STATUS "${step}: ok\n${out}")
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
  set(consumer_args "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
endif()
run("configure consumer" ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/consumption/consumer"
    -B "${WORK_DIR}/consumer-build" ${common} -DGPUBATCH_CONSUME_MODE=${MODE}
    -DGPUBATCH_SOURCE_DIR=${SOURCE_DIR} ${consumer_args})
run("build consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/consumer-build")
run("run consumer" "${WORK_DIR}/consumer-build/consumer")
