# Sanitizer and fuzzer builds (docs/design.md §11.1). Each goes in its own build directory:
#   -DSTRATA_SANITIZE=address,undefined   ASan + UBSan (scripts/test.sh: build-asan)
#   -DSTRATA_SANITIZE=thread              TSan (build-tsan)
#   -DSTRATA_FUZZ=ON                      libFuzzer targets in fuzz/ (clang only); with ASan+UBSan
#                                         the same build runs the suite and the fuzzers
#
# Note [Sanitizer flags]
# - A finding must fail the test that hit it: UBSan's default is to print and carry on, so
#   -fno-sanitize-recover=all makes every check abort (ASan and TSan already stop or, for TSan,
#   exit non-zero through halt_on_error in scripts/test_sanitized.sh).
# - -O1 with line tables and frame pointers: reports point at source lines, and the build is
#   cheap enough for CI on 2 cores (full debug info roughly doubles compile and link time).
# - STRATA_FUZZ compiles every object with -fsanitize=fuzzer-no-link (coverage counters, no
#   main), so the library the fuzz targets link is the one the suite tests; only the fuzz
#   executables link libFuzzer's main (-fsanitize=fuzzer).
set(STRATA_SANITIZE "" CACHE STRING
    "sanitizers for the whole build: empty, address,undefined, or thread")
option(STRATA_FUZZ "Build the libFuzzer targets in fuzz/ (needs clang)" OFF)

if(STRATA_SANITIZE STREQUAL "thread" AND STRATA_FUZZ)
  message(FATAL_ERROR "STRATA_FUZZ needs ASan (STRATA_SANITIZE=address,undefined), not TSan")
endif()
if(STRATA_FUZZ AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "STRATA_FUZZ=ON needs clang (libFuzzer): configure with "
                      "-DCMAKE_CXX_COMPILER=clang++")
endif()

if(STRATA_SANITIZE)
  if(NOT STRATA_SANITIZE MATCHES "^(address,undefined|undefined,address|address|undefined|thread)$")
    message(FATAL_ERROR "STRATA_SANITIZE=${STRATA_SANITIZE}: use address,undefined or thread")
  endif()
  set(strata_san_flags -fsanitize=${STRATA_SANITIZE} -fno-omit-frame-pointer)
  if(STRATA_SANITIZE MATCHES "undefined")
    list(APPEND strata_san_flags -fno-sanitize-recover=all)
  endif()
  if(STRATA_FUZZ)
    list(APPEND strata_san_flags -fsanitize=fuzzer-no-link)
  endif()
  # C++ only: a sanitizer build is configured with STRATA_CUDA=OFF; nvcc would not take them.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${strata_san_flags}>")
  add_link_options(-fsanitize=${STRATA_SANITIZE})
  # Note [Sanitizer flags]: replaces the build type's -O3/-O2 (set before any target).
  set(CMAKE_CXX_FLAGS_RELEASE "-O1 -g1 -DNDEBUG")
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(CMAKE_CXX_FLAGS_RELEASE "-O1 -gline-tables-only -DNDEBUG")
  endif()
  message(STATUS "Sanitizers: ${STRATA_SANITIZE}; fuzz targets: ${STRATA_FUZZ}")
elseif(STRATA_FUZZ)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>")
endif()
