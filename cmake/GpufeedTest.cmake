# gpufeed_add_test(NAME SOURCES a.cc b.cc LIBS x y [LABELS label])
# One GoogleTest executable per call, registered with CTest test by test. Labels let the
# sanitizer runs pick suites: "tsan" marks the suites ThreadSanitizer runs. One label per
# suite: a list would be split into separate properties on its way to CTest.
add_custom_target(gpufeed_tsan_tests)

function(gpufeed_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  # Every suite links the optional parts this tree has (HDF5, the databases, remote), as the
  # product does: a test that opens a path through OpenPath reaches every family.
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} gpufeed_optional_parts GTest::gtest_main
                                        GTest::gmock)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  # The test programs' own code is compiled without optimization in every tree (the code under
  # test keeps the tree's flags): gtest and gmock's templates cost 40-50 % less to compile at
  # -O0, which saves CI about five minutes over its three trees, and test code is not where
  # the tests spend their time.
  target_compile_options(${name} PRIVATE -O0)
  # Where test files written by h5py are kept for every later test process of this tree
  # (tests/sources/hdf5/test_files.h: SharedFixtureDir).
  target_compile_definitions(${name} PRIVATE
    GPUFEED_TEST_FIXTURE_ROOT="${PROJECT_BINARY_DIR}/test-fixtures")
  if("tsan" IN_LIST ARG_LABELS)
    add_dependencies(gpufeed_tsan_tests ${name})
  endif()
  # An empty LABELS value would be dropped and shift TIMEOUT into its place.
  set(properties TIMEOUT 300)
  if(ARG_LABELS)
    list(APPEND properties LABELS "${ARG_LABELS}")
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES ${properties})
endfunction()
