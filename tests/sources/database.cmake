# The database suites (included by tests/sources/CMakeLists.txt when present).
gpufeed_add_test(sources_database_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/database_copy_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/database_sqlite_test.cc
  LIBS gpufeed_sources gpufeed_pipeline gpufeed_cache
  LABELS tsan)

# The PostgreSQL suite is ONE CTest entry: the whole binary shares one private server, which
# its global environment starts (scripts/pg-test-server) and stops, failing tests included.
# Without the server binaries every test skips.
add_executable(sources_postgres_test
  ${CMAKE_CURRENT_LIST_DIR}/database_pg_server.cc
  ${CMAKE_CURRENT_LIST_DIR}/database_postgres_test.cc)
target_link_libraries(sources_postgres_test PRIVATE gpufeed_sources gpufeed_pipeline
  GTest::gtest_main GTest::gmock)
target_include_directories(sources_postgres_test PRIVATE ${PROJECT_SOURCE_DIR}/src
  ${PROJECT_SOURCE_DIR}/tests)
target_compile_definitions(sources_postgres_test PRIVATE
  GPUFEED_PG_TEST_SERVER="${PROJECT_SOURCE_DIR}/scripts/pg-test-server")
add_dependencies(gpufeed_tsan_tests sources_postgres_test)
add_test(NAME sources_postgres_test COMMAND sources_postgres_test)
set_tests_properties(sources_postgres_test PROPERTIES TIMEOUT 300 LABELS tsan)
