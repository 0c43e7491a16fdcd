# The HDF5 suites (included by tests/sources/CMakeLists.txt when present).
gpufeed_add_test(sources_hdf5_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/hdf5_source_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/hdf5_counters_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/hdf5_errors_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/hdf5_inspect_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/hdf5_chunk_cache_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/hdf5_hostile_test.cc
  LIBS gpufeed_sources
  LABELS tsan)
target_compile_definitions(sources_hdf5_test PRIVATE
  GPUFEED_HOSTILE_HDF5_SCRIPT="${CMAKE_CURRENT_LIST_DIR}/make_hostile_hdf5.py")

# The source under the real Loader (pipeline), end to end.
if(TARGET gpufeed_pipeline)
  gpufeed_add_test(sources_hdf5_loader_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/hdf5_loader_test.cc
    LIBS gpufeed_pipeline
    LABELS tsan)
endif()
