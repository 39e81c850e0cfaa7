# cmake -DSOURCE_DIR=<gpubatch's root> -P check_cmake_minimum.cmake: every place that states the
# CMake version gpubatch needs states the same one, and it is new enough for what the presets
# ask of CMake (CMAKE_CUDA_ARCHITECTURES=native needs 3.24).
cmake_minimum_required(VERSION 3.24)

function(minimum_of file out)
  file(READ "${SOURCE_DIR}/${file}" text)
  if(NOT text MATCHES "cmake_minimum_required\\(VERSION ([0-9]+\\.[0-9]+)")
    message(FATAL_ERROR "${file}: no cmake_minimum_required(VERSION x.y)")
  endif()
  set(${out} ${CMAKE_MATCH_1} PARENT_SCOPE)
endfunction()

minimum_of(CMakeLists.txt required)
foreach(file IN ITEMS tests/consumption/consumer/CMakeLists.txt
                      tests/consumption/run_consumer.cmake)
  minimum_of(${file} other)
  if(NOT other VERSION_EQUAL required)
    message(FATAL_ERROR "${file} requires CMake ${other}, CMakeLists.txt ${required}")
  endif()
endforeach()

file(READ "${SOURCE_DIR}/CMakePresets.json" presets)
string(JSON major GET "${presets}" cmakeMinimumRequired major)
string(JSON minor GET "${presets}" cmakeMinimumRequired minor)
if(NOT "${major}.${minor}" VERSION_EQUAL required)
  message(FATAL_ERROR "CMakePresets.json requires CMake ${major}.${minor}, CMakeLists.txt ${required}")
endif()

file(READ "${SOURCE_DIR}/README.md" readme)
if(NOT readme MATCHES "CMake ${required}\\+")
  message(FATAL_ERROR "README.md does not say 'CMake ${required}+'")
endif()

# CMAKE_CUDA_ARCHITECTURES=native (presets, scripts) appeared in CMake 3.24.
set(native_users "")
string(JSON count LENGTH "${presets}" configurePresets)
math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  string(JSON name GET "${presets}" configurePresets ${i} name)
  string(JSON arch ERROR_VARIABLE missing GET "${presets}" configurePresets ${i} cacheVariables
         CMAKE_CUDA_ARCHITECTURES)
  if(NOT missing AND arch STREQUAL "native")
    list(APPEND native_users "preset ${name}")
  endif()
endforeach()
file(GLOB scripts "${SOURCE_DIR}/scripts/*")
foreach(script IN LISTS scripts)
  file(READ "${script}" text)
  if(text MATCHES "CMAKE_CUDA_ARCHITECTURES=native")
    list(APPEND native_users "${script}")
  endif()
endforeach()
if(native_users AND required VERSION_LESS 3.24)
  message(FATAL_ERROR "CMAKE_CUDA_ARCHITECTURES=native (${native_users}) needs CMake 3.24; "
                      "gpubatch requires ${required}")
endif()
message(STATUS "CMake ${required} everywhere; native architectures used by: ${native_users}")
