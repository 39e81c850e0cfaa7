# cmake -DCOMMAND=<launcher|args|...> -DEXPECT=<regex> -DSECONDS=<limit> -P expect_abort.cmake
# Passes when the command ends within SECONDS with a non-zero exit code and its output (stdout
# and stderr) matches EXPECT: a failing rank ended the job, with a message, instead of hanging.
string(REPLACE "|" ";" command "${COMMAND}")
execute_process(COMMAND ${command} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out
                TIMEOUT ${SECONDS})
message("${out}")
if(code MATCHES "^[0-9]+$")
  if(code EQUAL 0)
    message(FATAL_ERROR "expected the job to fail, and it exited 0")
  endif()
else()
  # Not a number: the process did not exit by itself ("Process terminated due to timeout").
  message(FATAL_ERROR "the job did not end by itself within ${SECONDS} s: ${code}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the job failed (exit code ${code}), but its output does not match '${EXPECT}'")
endif()
message(STATUS "the job ended with exit code ${code} and the expected message")
