# The HDF5 source (included by src/sources/CMakeLists.txt when present).
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(ZLIB REQUIRED)
target_sources(gpufeed_sources PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_library.cc
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_superblock.cc
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_structure.cc
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_chunk_index.cc
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_filters.cc
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_dataset.cc
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_geometry.cc
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_chunk_cache.cc
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_dataset_reader.cc
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_source.cc
  ${CMAKE_CURRENT_LIST_DIR}/hdf5_inspect.cc
)
target_include_directories(gpufeed_sources PUBLIC ${HDF5_C_INCLUDE_DIRS})
target_compile_definitions(gpufeed_sources PUBLIC ${HDF5_C_DEFINITIONS})
target_link_libraries(gpufeed_sources PUBLIC ${HDF5_C_LIBRARIES} ZLIB::ZLIB)
