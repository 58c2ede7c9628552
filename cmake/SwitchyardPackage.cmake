# SPDX-License-Identifier: Apache-2.0
# The library as others use it: one libswitchyard (shared and static) made of
# the internal layers' objects, the public headers, switchyard-worker, a CMake
# package (find_package(Switchyard) -> Switchyard::switchyard) and
# switchyard.pc. Inside this tree the layers stay separate archives (tests
# link the internal ones); outside, a consumer sees one library.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_switchyard_layers
  switchyard_messages
  switchyard_backend_cpu
  switchyard_backend_reference
  switchyard_backends
  switchyard_actors
  switchyard)
set(_switchyard_objects "")
foreach(layer IN LISTS _switchyard_layers)
  list(APPEND _switchyard_objects "$<TARGET_OBJECTS:${layer}>")
endforeach()

# What the objects need at link time; private to the shared library, link-only
# usage requirements of the static one.
# No CUDA library: the CUDA backend is a module loaded at run time
# (libswitchyard-backend-cuda.so, installed next to the library).
set(_switchyard_link_deps CAF::core CAF::io CAF::openssl OpenSSL::SSL BLAS::BLAS hwy::hwy Threads::Threads
  ${CMAKE_DL_LIBS})

# 0.x: every minor release may break the ABI.
set(SWITCHYARD_SOVERSION "${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}")

foreach(kind shared static)
  string(TOUPPER "${kind}" _kind_upper)
  set(target switchyard_${kind})
  add_library(${target} ${_kind_upper} ${_switchyard_objects})
  # Both are libswitchyard; lib/ keeps them apart from the internal archive.
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME switchyard
    EXPORT_NAME switchyard_${kind}
    LINKER_LANGUAGE CXX
    LIBRARY_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/lib"
    ARCHIVE_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/lib")
  target_include_directories(${target} INTERFACE
    "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include;${PROJECT_SOURCE_DIR}/messages/include>"
    "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
  target_compile_features(${target} INTERFACE cxx_std_20)
  target_link_libraries(${target} PRIVATE ${_switchyard_link_deps})
  foreach(layer IN LISTS _switchyard_layers)
    add_dependencies(${target} ${layer})
  endforeach()
endforeach()
set_target_properties(switchyard_shared PROPERTIES
  VERSION "${PROJECT_VERSION}"
  SOVERSION "${SWITCHYARD_SOVERSION}"
  # Keeps non-system link directories in the installed RUNPATH.
  INSTALL_RPATH_USE_LINK_PATH ON)
if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
  target_link_options(switchyard_shared PRIVATE "-Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/libswitchyard.map")
  set_property(TARGET switchyard_shared APPEND PROPERTY LINK_DEPENDS "${PROJECT_SOURCE_DIR}/cmake/libswitchyard.map")
endif()
set_target_properties(switchyard-worker PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

# What a parent project links when it adds this tree with add_subdirectory or
# FetchContent (the shared library: its private dependencies stay inside).
add_library(Switchyard::switchyard ALIAS switchyard_shared)
add_library(Switchyard::switchyard_shared ALIAS switchyard_shared)
add_library(Switchyard::switchyard_static ALIAS switchyard_static)

if(NOT SWITCHYARD_INSTALL)
  return()
endif()

set(SWITCHYARD_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/Switchyard")
install(TARGETS switchyard_shared switchyard_static EXPORT SwitchyardTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(TARGETS switchyard-worker RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
# Backend modules go next to the library, where the loader looks (the
# directory of libswitchyard.so, then the install libdir). Packagers may
# ship them apart: nothing links them.
if(TARGET switchyard_backend_cuda)
  install(TARGETS switchyard_backend_cuda LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}")
endif()
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/switchyard" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  FILES_MATCHING PATTERN "*.hpp")
# The value types the public headers use (Shape, DType, Scalar, TensorData,
# Error...) live with the message types; only those headers are installed.
include("${PROJECT_SOURCE_DIR}/cmake/SwitchyardPublicHeaders.cmake")
install(FILES ${SWITCHYARD_PUBLIC_MESSAGE_HEADERS}
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/switchyard/messages")
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/switchyard")

install(EXPORT SwitchyardTargets NAMESPACE Switchyard:: DESTINATION "${SWITCHYARD_CMAKE_DIR}")
if(TARGET switchyard_onnx_shared)
  install(EXPORT SwitchyardOnnxTargets NAMESPACE Switchyard:: DESTINATION "${SWITCHYARD_CMAKE_DIR}")
endif()
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/SwitchyardConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/SwitchyardConfig.cmake" INSTALL_DESTINATION "${SWITCHYARD_CMAKE_DIR}"
  PATH_VARS CMAKE_INSTALL_BINDIR)
# 0.x: only the same minor version is compatible.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/SwitchyardConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/SwitchyardConfig.cmake" "${PROJECT_BINARY_DIR}/SwitchyardConfigVersion.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake" DESTINATION "${SWITCHYARD_CMAKE_DIR}")

# pkg-config: the shared library by default; `--static` adds what the
# static archive needs.
set(SWITCHYARD_PC_LIBS_PRIVATE "-lcaf_io -lcaf_openssl -lcaf_core -lssl -lcrypto -lopenblas -lhwy -lpthread -ldl")
# Relative to the .pc file, so the tree stays usable wherever --prefix puts it.
file(RELATIVE_PATH SWITCHYARD_PC_PREFIX_FROM_PCDIR "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file("${PROJECT_SOURCE_DIR}/cmake/switchyard.pc.in" "${PROJECT_BINARY_DIR}/switchyard.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/switchyard.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
if(SWITCHYARD_ONNX)
  configure_file("${PROJECT_SOURCE_DIR}/cmake/switchyard-onnx.pc.in" "${PROJECT_BINARY_DIR}/switchyard-onnx.pc" @ONLY)
  install(FILES "${PROJECT_BINARY_DIR}/switchyard-onnx.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endif()
