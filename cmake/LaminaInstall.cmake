# Installing Lamina (cmake --install build --prefix PREFIX) and packaging it (cpack -G DEB):
# headers, liblamina.so and liblamina.a, the lamina tool, the schema, LaminaConfig.cmake with
# Lamina::lamina (and the static component's Lamina::lamina_static), and lamina.pc.
# Every installed path is relative to the prefix, so an installed tree can be moved.
include(CMakePackageConfigHelpers)
set(LAMINA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Lamina)

install(DIRECTORY include/lamina DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${LAMINA_PROTO_OUT}/lamina.pb.h ${LAMINA_PROTO_OUT}/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lamina)
install(FILES proto/lamina.proto DESTINATION ${CMAKE_INSTALL_DATADIR}/lamina)
install(TARGETS lamina EXPORT LaminaTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS lamina_static EXPORT LaminaStaticTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS lamina_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# liblamina.so finds the CUDA libraries it was linked with (outside the system's folders).
set_target_properties(lamina PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(EXPORT LaminaTargets NAMESPACE Lamina:: DESTINATION ${LAMINA_CMAKE_DIR})
install(EXPORT LaminaStaticTargets NAMESPACE Lamina:: DESTINATION ${LAMINA_CMAKE_DIR})

configure_package_config_file(cmake/LaminaConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/LaminaConfig.cmake
                              INSTALL_DESTINATION ${LAMINA_CMAKE_DIR})
# Plugins need the exact version (the tool checks); programs are source-compatible within
# a minor version.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/LaminaConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/LaminaConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/LaminaConfigVersion.cmake
        DESTINATION ${LAMINA_CMAKE_DIR})

# lamina.pc: its prefix is found from its own folder (pkg-config's ${pcfiledir}).
file(RELATIVE_PATH LAMINA_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
set(LAMINA_PC_LIBS ${BLAS_LIBRARIES} ${LMDB_LIBRARY} -lleveldb ${HDF5_C_LIBRARIES}
                   ${JPEG_LIBRARIES} ${PNG_LIBRARIES} ${ZLIB_LIBRARIES} -pthread
                   ${CMAKE_DL_LIBS})
if(LAMINA_HAVE_CUDA)
  list(APPEND LAMINA_PC_LIBS -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublas -lcublasLt)
  if(LAMINA_HAVE_CUDNN)
    list(APPEND LAMINA_PC_LIBS ${CUDNN_LIBRARY})
  endif()
endif()
if(LAMINA_HAVE_MPI)
  list(APPEND LAMINA_PC_LIBS ${MPI_C_LIBRARIES})
endif()
if(LAMINA_HAVE_NCCL)
  list(APPEND LAMINA_PC_LIBS ${NCCL_LIBRARY})
endif()
list(TRANSFORM LAMINA_PC_LIBS REPLACE "^dl$" "-ldl")
list(JOIN LAMINA_PC_LIBS " " LAMINA_PC_PRIVATE_LIBS)
list(TRANSFORM LAMINA_DEFINITIONS PREPEND "-D" OUTPUT_VARIABLE LAMINA_PC_DEFINITIONS)
list(JOIN LAMINA_PC_DEFINITIONS " " LAMINA_PC_DEFINITIONS)
configure_file(cmake/lamina.pc.in ${CMAKE_CURRENT_BINARY_DIR}/lamina.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/lamina.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# cpack -G DEB (in the build folder): lamina_VERSION_ARCH.deb, installing under /usr. Its
# dependencies are Debian's packages of the libraries it links and of the headers its own
# headers include; a CUDA build also needs NVIDIA's CUDA toolkit in /usr/local/cuda.
set(CPACK_PACKAGE_NAME lamina)
set(CPACK_PACKAGE_VENDOR "Lamina")
set(CPACK_PACKAGE_CONTACT "Lamina developers <lamina@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Neural networks from Caffe prototxt on the CPU and GPU: library, headers and tool")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libprotobuf-dev, libgoogle-glog-dev, libopenblas0 | libopenblas0-pthread, liblmdb0, \
libleveldb1d, libhdf5-103-1, libjpeg62-turbo, libpng16-16, zlib1g, libcairo2, libgvc6")
if(LAMINA_HAVE_MPI)
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libopenmpi3")
endif()
if(LAMINA_HAVE_ONNX)  # the tool's export_onnx (cmake/LaminaOnnx.cmake)
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libonnx1")
endif()
include(CPack)
