# Run at build time (cmake -P): writes OUT, a C++ file defining the git commit and dirty flag of
# SRC, rewriting it only when they changed (so a build that changes nothing relinks nothing).
#   cmake -DSRC=<source dir> -DOUT=<file> -P GitInfo.cmake
set(sha "unknown")
set(dirty -1)
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SRC}" rev-parse HEAD
    OUTPUT_VARIABLE _sha RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_rc EQUAL 0)
    set(sha "${_sha}")
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SRC}" status --porcelain --untracked-files=no
      OUTPUT_VARIABLE _st RESULT_VARIABLE _rc2 ERROR_QUIET)
    if(_rc2 EQUAL 0)
      if(_st STREQUAL "")
        set(dirty 0)
      else()
        set(dirty 1)
      endif()
    endif()
  endif()
endif()
set(text "// Generated at build time by cmake/GitInfo.cmake: do not edit.
namespace fp8moe::build {
const char* git_sha() { return \"${sha}\"; }
int git_dirty() { return ${dirty}; }
}  // namespace fp8moe::build
")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL text)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${text}")
