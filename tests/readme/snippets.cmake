# gpubatch_add_markdown_snippets(<markdown> <prefix>): every ```cpp block of a Markdown file
# becomes a test, so the code a reader copies cannot rot.
#
# At configure time each block is written to a source file of its own (the Markdown file is a
# configure dependency: a new block adds its tests by itself). #line directives point the
# compilers' messages at the Markdown file's lines. A block is one of three kinds:
#
#   a program   it defines main(): compiled, then run; it must exit 0 on any machine, with a
#               GPU or without one (the CUDA build takes the host backend when there is none)
#   a file      otherwise, by default: compiled as written, a translation unit of its own
#   a function  marked by `<!-- snippet: context=function -->` on the line right before the
#               block: the block is the body of `template <class Exec> void snippet(Exec exec)`
#               after `#include <gpubatch/gpubatch.hpp>`, instantiated with host_exec (and
#               with cuda_exec under nvcc); `<!-- snippet: context=file -->` states the default
#
# The same comment may hold more settings, separated by spaces:
#   link=<target>  the block also links <target> (an optional component, e.g. gpubatch::mpi);
#                  when the target does not exist in this build, the block's tests are left out
#                  with a STATUS message
#   ranks=<n>      a program runs under the MPI launcher on n ranks (cmake/GpubatchMpiTesting)
# e.g. `<!-- snippet: link=gpubatch::mpi ranks=2 -->`.
#
# Tests, named after the heading above the block (a second block under it gets _2, ...):
#   <prefix>.<heading>.host       builds it with the host compiler (labels host, readme)
#   <prefix>.<heading>.host.run   runs it, if it is a program (labels host, readme)
#   <prefix>.<heading>.nvcc       the same as a .cu file, when gpubatch's CUDA targets are
#   <prefix>.<heading>.nvcc.run   enabled (labels nvcc, readme)
# The build tests build targets excluded from `all`, so a broken block fails its test, not the
# build. For each block, <target prefix>_<heading>_LINE is set in the caller's scope to the
# Markdown line of the block's first line; the global property GPUBATCH_SNIPPET_TARGETS_<prefix>
# lists the targets (a build may make them ahead of the tests, in parallel: scripts/test does).
include_guard(GLOBAL)

function(_gpubatch_snippet_newlines text out)
  string(REGEX REPLACE "[^\n]" "" newlines "${text}")
  string(LENGTH "${newlines}" count)
  set(${out} ${count} PARENT_SCOPE)
endfunction()

# Writes `content` to `path` only when it changed, so an unrelated README edit rebuilds nothing.
function(_gpubatch_snippet_write path content)
  if(EXISTS "${path}")
    file(READ "${path}" old)
    if(old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${path}" "${content}")
endfunction()

function(gpubatch_add_markdown_snippets markdown prefix)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${markdown}")
  file(READ "${markdown}" text)
  get_filename_component(markdown_name "${markdown}" NAME)
  string(MAKE_C_IDENTIFIER "${prefix}" target_prefix)
  set(out_dir "${CMAKE_CURRENT_BINARY_DIR}/${target_prefix}")
  set(compilers host)
  if(GPUBATCH_HAS_CUDA_COMPILER)
    list(APPEND compilers nvcc)
  endif()

  set(fence "```cpp\n")
  string(LENGTH "${fence}" fence_length)
  set(rest "${text}")  # the part of the file not yet read
  set(line 1)          # the line `rest` starts on
  set(heading "")
  set(slugs "")
  while(TRUE)
    string(FIND "${rest}" "${fence}" start)
    if(start EQUAL -1)
      break()
    endif()
    string(SUBSTRING "${rest}" 0 ${start} before)
    math(EXPR body_start "${start} + ${fence_length}")
    string(SUBSTRING "${rest}" ${body_start} -1 rest)
    _gpubatch_snippet_newlines("${before}" lines_before)
    math(EXPR fence_line "${line} + ${lines_before}")
    math(EXPR line "${fence_line} + 1")

    string(REGEX MATCHALL "(^|\n)##+ [^\n]*" headings "${before}")
    if(NOT headings STREQUAL "")
      list(GET headings -1 heading)
      string(REGEX REPLACE "^\n?#+ " "" heading "${heading}")
    endif()
    # A fence starts its line, after the indentation of a list item if any.
    if(NOT before MATCHES "(^|\n)([ \t]*)$")
      continue()  # "```cpp" inside a line of text is not a fence
    endif()
    set(indent "${CMAKE_MATCH_2}")

    # The block ends at the first line that starts with ``` (at the same indentation).
    string(FIND "\n${rest}" "\n${indent}```" end)
    if(end EQUAL -1)
      message(FATAL_ERROR "${markdown}:${fence_line}: the ```cpp block is not closed")
    endif()
    string(SUBSTRING "${rest}" 0 ${end} body)
    string(LENGTH "${indent}```" closing_length)
    math(EXPR after_end "${end} + ${closing_length}")
    string(SUBSTRING "${rest}" ${after_end} -1 rest)
    _gpubatch_snippet_newlines("${body}" body_lines)
    set(body_line ${line})
    math(EXPR line "${line} + ${body_lines}")
    if(NOT indent STREQUAL "")
      string(REGEX REPLACE "(^|\n)${indent}" "\\1" body "${body}")
    endif()

    # What kind of block, what it links, how it runs.
    set(context file)
    set(link "")
    set(ranks "")
    if(before MATCHES "<!--[ \t]*snippet:([^\n]*)-->[ \t]*\n[ \t]*$")
      string(STRIP "${CMAKE_MATCH_1}" annotation)
      separate_arguments(settings UNIX_COMMAND "${annotation}")
      foreach(setting IN LISTS settings)
        if(setting MATCHES "^context=(file|function)$")
          set(context ${CMAKE_MATCH_1})
        elseif(setting MATCHES "^link=(.+)$")
          set(link ${CMAKE_MATCH_1})
        elseif(setting MATCHES "^ranks=([1-9][0-9]*)$")
          set(ranks ${CMAKE_MATCH_1})
        else()
          math(EXPR annotation_line "${fence_line} - 1")
          message(FATAL_ERROR "${markdown}:${annotation_line}: unknown snippet annotation "
                              "'${setting}' (context=file, context=function, link=<target>, "
                              "ranks=<n>)")
        endif()
      endforeach()
    endif()
    set(program OFF)
    if(context STREQUAL "file" AND body MATCHES "(^|\n)[ \t]*int[ \t]+main[ \t]*\\(")
      set(program ON)
    endif()

    # Its name: the heading above it.
    string(TOLOWER "${heading}" slug)
    string(REGEX REPLACE "[^a-z0-9]+" "_" slug "${slug}")
    string(REGEX REPLACE "^_+|_+$" "" slug "${slug}")
    if(slug STREQUAL "")
      set(slug block)
    endif()
    set(base ${slug})
    set(n 1)
    while(slug IN_LIST slugs)
      math(EXPR n "${n} + 1")
      set(slug ${base}_${n})
    endwhile()
    list(APPEND slugs ${slug})
    set(${target_prefix}_${slug}_LINE ${body_line} PARENT_SCOPE)
    if(link AND NOT TARGET ${link})
      message(STATUS "${markdown_name}: the block under '${heading}' needs ${link}, which this "
                     "build lacks: its tests are left out")
      continue()
    endif()

    # A block using DLPack needs its header (tests/CMakeLists.txt looks for it).
    if(body MATCHES "#include <gpubatch/dlpack.hpp>" AND NOT TARGET dlpack::dlpack)
      message(STATUS "gpubatch: ${markdown_name}:${body_line}: DLPack header not found; block not built")
      continue()
    endif()

    # Its source files: the same text as .cpp and as .cu.
    foreach(compiler IN LISTS compilers)
      set(extension cpp)
      set(label host)
      if(compiler STREQUAL "nvcc")
        set(extension cu)
        set(label nvcc)
      endif()
      set(file "${out_dir}/${slug}.${extension}")
      set(banner "// Generated from ${markdown_name}, line ${body_line}; edit ${markdown_name}, not this file.\n")
      if(context STREQUAL "function")
        set(head "${banner}#include <gpubatch/gpubatch.hpp>\n\ntemplate <class Exec>\nvoid snippet([[maybe_unused]] Exec exec) {\n")
        _gpubatch_snippet_newlines("${head}" head_lines)
        # The line after the body's: the head, the #line before the body, the body, this #line.
        math(EXPR tail_line "${head_lines} + 1 + ${body_lines} + 1 + 1")
        string(CONCAT content "${head}#line ${body_line} \"${markdown}\"\n" "${body}"
               "#line ${tail_line} \"${file}\"\n}\n\n"
               "template void snippet(gpubatch::host_exec);\n#if GPUBATCH_CUDA_COMPILER\n"
               "template void snippet(gpubatch::cuda_exec);\n#endif\n")
      else()
        set(content "${banner}#line ${body_line} \"${markdown}\"\n${body}")
      endif()
      _gpubatch_snippet_write("${file}" "${content}")

      set(target ${target_prefix}_${slug}_${compiler})
      set(test ${prefix}.${slug}.${compiler})
      if(program)
        add_executable(${target} EXCLUDE_FROM_ALL "${file}")
      else()
        add_library(${target} OBJECT EXCLUDE_FROM_ALL "${file}")
      endif()
      target_link_libraries(${target} PRIVATE gpubatch::gpubatch ${link} gpubatch_dev_options
                                              $<TARGET_NAME_IF_EXISTS:dlpack::dlpack>)
      set_property(GLOBAL APPEND PROPERTY GPUBATCH_SNIPPET_TARGETS_${prefix} ${target})
      add_test(NAME ${test} COMMAND ${CMAKE_COMMAND} --build "${CMAKE_BINARY_DIR}" --target ${target})
      set_tests_properties(${test} PROPERTIES LABELS "${label};readme"
                           RESOURCE_LOCK gpubatch_build_tree)
      if(program)
        set_tests_properties(${test} PROPERTIES FIXTURES_SETUP ${target})
        if(ranks)
          include(GpubatchMpiTesting)
          gpubatch_add_mpi_test(${test}.run ${ranks} $<TARGET_FILE:${target}>)
          set_tests_properties(${test}.run PROPERTIES LABELS "${label};readme;mpi")
        else()
          add_test(NAME ${test}.run COMMAND ${target})
          set_tests_properties(${test}.run PROPERTIES LABELS "${label};readme")
        endif()
        set_tests_properties(${test}.run PROPERTIES FIXTURES_REQUIRED ${target})
      endif()
    endforeach()
  endwhile()
  if(NOT slugs)
    message(FATAL_ERROR "${markdown}: no ```cpp block found")
  endif()
endfunction()
