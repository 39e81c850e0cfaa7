# Tests that run under the MPI launcher (mpirun -np N), for the gpubatch::mpi component.
include_guard(GLOBAL)

# gpubatch_mpi_test_properties(<test> <ranks> <timeout>): labels, time limit and environment of
# a test that starts the MPI launcher. OpenMPI refuses to run as root (CI does) and to start
# more ranks than the machine has cores unless told so, and its shared-memory transport's
# single-copy mode needs ptrace rights that containers often lack; all three are set through
# its environment, which other MPIs ignore.
function(gpubatch_mpi_test_properties name ranks timeout)
  set(environment OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
      OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none)
  set_tests_properties(${name} PROPERTIES LABELS "host;mpi" TIMEOUT ${timeout}
                       PROCESSORS ${ranks} ENVIRONMENT "${environment}")
endfunction()

# The launcher's command line for `ranks` ranks of `executable` with `args`, into `out`.
function(gpubatch_mpi_command out ranks executable)
  set(${out} ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} ${MPIEXEC_PREFLAGS}
      ${executable} ${MPIEXEC_POSTFLAGS} ${ARGN} PARENT_SCOPE)
endfunction()

# gpubatch_add_mpi_test(<name> <ranks> <executable> [args...]): a CTest test that runs the
# program on `ranks` ranks; it passes when the launcher exits 0 (every rank did).
function(gpubatch_add_mpi_test name ranks executable)
  gpubatch_mpi_command(command ${ranks} ${executable} ${ARGN})
  add_test(NAME ${name} COMMAND ${command})
  gpubatch_mpi_test_properties(${name} ${ranks} 120)
endfunction()

# gpubatch_add_mpi_abort_test(<name> <ranks> <regex> <executable> [args...]): the program must
# end the job with a non-zero exit code and output matching `regex` within 60 seconds; a hang
# (a rank left waiting in a collective) fails the test instead of stalling CTest.
function(gpubatch_add_mpi_abort_test name ranks regex executable)
  gpubatch_mpi_command(command ${ranks} ${executable} ${ARGN})
  # The command line travels as one argument, its words joined by "|" (";" would split it).
  string(REPLACE ";" "|" command "${command}")
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} "-DCOMMAND=${command}" "-DEXPECT=${regex}" -DSECONDS=60
                   -P "${PROJECT_SOURCE_DIR}/tests/mpi/expect_abort.cmake")
  gpubatch_mpi_test_properties(${name} ${ranks} 90)
endfunction()
