# ONNX export (docs/onnx.md): the library lamina_onnx (src/onnx/), built on Debian's
# libonnx-dev (the schema, the checker and shape inference), and `lamina export_onnx`.
# LAMINA_ONNX: AUTO (on where libonnx is found), ON (an error without it) or OFF.
# Included by CMakeLists.txt once the tool's target exists.
set(LAMINA_ONNX AUTO CACHE STRING "ONNX export (lamina export_onnx; libonnx-dev): AUTO, ON or OFF")
set_property(CACHE LAMINA_ONNX PROPERTY STRINGS AUTO ON OFF)
set(LAMINA_HAVE_ONNX OFF)
if(NOT LAMINA_ONNX STREQUAL "OFF")
  find_package(ONNX CONFIG QUIET)
  if(TARGET onnx AND TARGET onnx_proto)
    set(LAMINA_HAVE_ONNX ON)
  elseif(LAMINA_ONNX STREQUAL "ON")
    message(FATAL_ERROR "LAMINA_ONNX=ON but ONNX was not found; install Debian's libonnx-dev "
                        "(apt-get install libonnx-dev) or configure with -DLAMINA_ONNX=OFF")
  endif()
endif()
message(STATUS "Lamina: ONNX export ${LAMINA_HAVE_ONNX} (lamina export_onnx)")

if(LAMINA_HAVE_ONNX)
  file(GLOB LAMINA_ONNX_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/onnx/*.cpp)
  # Static and position-independent: the tool carries it, and needs only libonnx's own
  # shared libraries beside liblamina.so.
  add_library(lamina_onnx STATIC ${LAMINA_ONNX_SOURCES})
  set_target_properties(lamina_onnx PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_options(lamina_onnx PRIVATE -Wall -Wextra)
  target_include_directories(lamina_onnx PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(lamina_onnx PUBLIC lamina PRIVATE onnx onnx_proto)
  target_link_libraries(lamina_tool PRIVATE lamina_onnx)
  target_compile_definitions(lamina_tool PRIVATE LAMINA_WITH_ONNX)
endif()
# `lamina export_onnx`; without ONNX it says how to get it.
target_sources(lamina_tool PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/tools/export_onnx.cpp)

# A Python 3 that imports onnx and numpy (Debian's python3-onnx, python3-numpy), for the
# tests' NumPy evaluator of exported graphs (tests/onnx/); empty when there is none.
set(LAMINA_ONNX_PYTHON "")
if(LAMINA_HAVE_ONNX)
  find_program(LAMINA_PYTHON3_IN_PATH python3)
  foreach(candidate /usr/bin/python3 ${LAMINA_PYTHON3_IN_PATH})
    if(NOT LAMINA_ONNX_PYTHON AND EXISTS ${candidate})
      execute_process(COMMAND ${candidate} -c "import onnx, numpy"
                      RESULT_VARIABLE status OUTPUT_QUIET ERROR_QUIET)
      if(status EQUAL 0)
        set(LAMINA_ONNX_PYTHON ${candidate})
      endif()
    endif()
  endforeach()
  message(STATUS "Lamina: Python with onnx and numpy for the ONNX tests: "
                 "${LAMINA_ONNX_PYTHON}")
endif()

# The ONNX tests (tests/CMakeLists.txt calls this): test_onnx_export links lamina_onnx and
# runs the NumPy evaluator with the Python found above; onnx_ort_prepare writes the models and
# Lamina's outputs that tests/onnx/compare_ort.py checks in ONNX Runtime (docs/onnx.md).
function(lamina_onnx_tests)
  if(NOT LAMINA_HAVE_ONNX)
    return()
  endif()
  target_link_libraries(test_onnx_export PRIVATE lamina_onnx)
  target_compile_definitions(test_onnx_export PRIVATE LAMINA_WITH_ONNX
                             LAMINA_ONNX_PYTHON="${LAMINA_ONNX_PYTHON}")
  add_executable(onnx_ort_prepare ${PROJECT_SOURCE_DIR}/tests/onnx/prepare_ort_check.cpp)
  target_link_libraries(onnx_ort_prepare PRIVATE lamina_onnx)
  target_include_directories(onnx_ort_prepare PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(onnx_ort_prepare PRIVATE LAMINA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endfunction()
