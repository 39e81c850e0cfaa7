# Runs the training example twice, on the host and on the emulated GPU, with the same arguments,
# and fails unless every epoch's loss (to 0.002), accuracies (to 0.01) and, with DP-SGD, share of
# clipped samples (to 1%) agree: the CUDA backend trains the same network as the host backend, up
# to the order of floating-point sums. Usage:
#   cmake -DHOST=<training> -DEMULATED=<training_emulated> "-DARGS=--images 1024 ..." -P <this>
# or, for a second run that is a command line (data-parallel training under mpirun), its words
# joined by "|", and its name for the messages:
#   cmake -DHOST=<training> "-DSECOND=mpiexec|-n|2|training_mpi" "-DSECOND_NAME=2 ranks" ...
separate_arguments(ARGS UNIX_COMMAND "${ARGS}")
set(command_HOST "${HOST}")
if(DEFINED SECOND)
  string(REPLACE "|" ";" command_EMULATED "${SECOND}")
else()
  set(command_EMULATED "${EMULATED}")
  set(SECOND_NAME "emulated GPU")
endif()
set(pattern "loss ([0-9]+)\\.([0-9]+), train accuracy ([0-9]+)\\.([0-9]+), test accuracy ([0-9]+)\\.([0-9]+)")
foreach(run IN ITEMS HOST EMULATED)
  execute_process(COMMAND ${command_${run}} ${ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${command_${run}} failed (${code}):\n${out}\n${err}")
  endif()
  string(REGEX MATCHALL "${pattern}" epochs_${run} "${out}")
  string(REGEX MATCHALL "[0-9]+% clipped" clipped_${run} "${out}")
  set(output_${run} "${out}")
endforeach()

list(LENGTH epochs_HOST count)
list(LENGTH epochs_EMULATED count_emulated)
if(count EQUAL 0 OR NOT count EQUAL count_emulated)
  message(FATAL_ERROR "the runs differ:\n--- host\n${output_HOST}\n--- ${SECOND_NAME}\n${output_EMULATED}")
endif()
# Fixed-point numbers as integers in units of their last printed digit: loss 1.3418 -> 13418.
set(fields loss train test)
set(tolerances 20 10 10)
math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  list(GET epochs_HOST ${i} host)
  list(GET epochs_EMULATED ${i} emulated)
  foreach(what IN ITEMS host emulated)
    string(REGEX MATCH "${pattern}" unused "${${what}}")
    set(digits "${CMAKE_MATCH_1}${CMAKE_MATCH_2};${CMAKE_MATCH_3}${CMAKE_MATCH_4};${CMAKE_MATCH_5}${CMAKE_MATCH_6}")
    foreach(field value IN ZIP_LISTS fields digits)
      string(REGEX REPLACE "^0+([0-9])" "\\1" value "${value}")  # no octal reading of 0365
      set(${what}_${field} ${value})
    endforeach()
  endforeach()
  foreach(field tolerance IN ZIP_LISTS fields tolerances)
    math(EXPR gap "${host_${field}} - ${emulated_${field}}")
    if(gap LESS 0)
      math(EXPR gap "-${gap}")
    endif()
    if(gap GREATER tolerance)
      message(FATAL_ERROR "epoch ${i}: ${field} differs (${host} / ${emulated}):\n--- host\n"
                          "${output_HOST}\n--- ${SECOND_NAME}\n${output_EMULATED}")
    endif()
  endforeach()
endforeach()
# DP-SGD: the share of clipped samples follows from the per-sample norms; it must agree to 1%.
foreach(host emulated IN ZIP_LISTS clipped_HOST clipped_EMULATED)
  if(NOT emulated)
    message(FATAL_ERROR "the ${SECOND_NAME} run reports no clipping:\n${output_EMULATED}")
  endif()
  string(REGEX REPLACE "%.*" "" host "${host}")
  string(REGEX REPLACE "%.*" "" emulated "${emulated}")
  math(EXPR gap "${host} - ${emulated}")
  if(gap GREATER 1 OR gap LESS -1)
    message(FATAL_ERROR "clipping differs (${host}% / ${emulated}%):\n--- host\n${output_HOST}\n"
                        "--- ${SECOND_NAME}\n${output_EMULATED}")
  endif()
endforeach()
message(STATUS "${count} epochs agree: ${epochs_HOST} / ${epochs_EMULATED}")
