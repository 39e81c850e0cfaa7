# Compile options for gpubatch's own tests, benchmarks and examples (never for consumers).
include_guard(GLOBAL)

add_library(gpubatch_dev_options INTERFACE)
target_compile_options(gpubatch_dev_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra>)
if(GPUBATCH_WARNINGS_AS_ERRORS)
  target_compile_options(gpubatch_dev_options INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Werror> $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endif()
if(GPUBATCH_SANITIZE)
  target_compile_options(gpubatch_dev_options INTERFACE
    -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
    # GCC's flow analysis under the sanitizers reports false positives inside libstdc++.
    -Wno-maybe-uninitialized)
  target_link_options(gpubatch_dev_options INTERFACE -fsanitize=address,undefined)
endif()
if(GPUBATCH_SANITIZE_THREAD)
  # The racecheck stand-in for the emulated device: its CUDA threads are fibers that
  # ThreadSanitizer tells apart, so a missing __syncthreads is a data race it reports.
  target_compile_options(gpubatch_dev_options INTERFACE -fsanitize=thread -fno-omit-frame-pointer)
  target_link_options(gpubatch_dev_options INTERFACE -fsanitize=thread)
endif()
