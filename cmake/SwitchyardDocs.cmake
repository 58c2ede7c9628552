# SPDX-License-Identifier: Apache-2.0
# The API reference (Doxygen, Debian's `doxygen`): target `docs` writes HTML to
# <build>/docs/api/html from the public headers only, every file under
# include/switchyard/ and the message headers they use. Any Doxygen warning
# fails it; with tests on, ctest runs it as test `docs` (label docs). Without
# doxygen there is neither, and configure says so.
find_package(Doxygen QUIET)
if(NOT DOXYGEN_FOUND)
  message(STATUS "doxygen not found: no `docs` target and no docs test (Debian: apt-get install doxygen)")
  return()
endif()

include("${PROJECT_SOURCE_DIR}/cmake/SwitchyardPublicHeaders.cmake")
set(SWITCHYARD_DOCS_OUTPUT "${PROJECT_BINARY_DIR}/docs/api")
# Doxyfile lists are space-separated; each path quoted in case it holds spaces.
set(SWITCHYARD_DOCS_INPUT "\"${PROJECT_SOURCE_DIR}/docs/api-mainpage.md\" \"${PROJECT_SOURCE_DIR}/include/switchyard\"")
# The ONNX loader's header installs beside the others (switchyard/onnx.hpp).
if(EXISTS "${PROJECT_SOURCE_DIR}/models/onnx/include/switchyard/onnx.hpp")
  string(APPEND SWITCHYARD_DOCS_INPUT " \"${PROJECT_SOURCE_DIR}/models/onnx/include/switchyard/onnx.hpp\"")
endif()
foreach(header IN LISTS SWITCHYARD_PUBLIC_MESSAGE_HEADERS)
  string(APPEND SWITCHYARD_DOCS_INPUT " \"${header}\"")
endforeach()
configure_file("${PROJECT_SOURCE_DIR}/docs/Doxyfile.in" "${PROJECT_BINARY_DIR}/docs/Doxyfile" @ONLY)

add_custom_target(docs
  COMMAND "${DOXYGEN_EXECUTABLE}" "${PROJECT_BINARY_DIR}/docs/Doxyfile"
  WORKING_DIRECTORY "${PROJECT_BINARY_DIR}/docs"
  COMMENT "API reference (Doxygen) -> ${SWITCHYARD_DOCS_OUTPUT}/html"
  VERBATIM)
if(SWITCHYARD_TESTS)
  add_test(NAME docs COMMAND "${DOXYGEN_EXECUTABLE}" "${PROJECT_BINARY_DIR}/docs/Doxyfile"
    WORKING_DIRECTORY "${PROJECT_BINARY_DIR}/docs")
  set_tests_properties(docs PROPERTIES LABELS docs TIMEOUT 300)
endif()
