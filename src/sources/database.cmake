# The database sources (included by src/sources/CMakeLists.txt when present): SQLite and
# PostgreSQL's libpq.
find_package(SQLite3 REQUIRED)
find_package(PostgreSQL REQUIRED)
target_sources(gpufeed_sources PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/database_table.cc
  ${CMAKE_CURRENT_LIST_DIR}/database_uri.cc
  ${CMAKE_CURRENT_LIST_DIR}/sqlite_source.cc
  ${CMAKE_CURRENT_LIST_DIR}/postgres_connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/postgres_copy.cc
  ${CMAKE_CURRENT_LIST_DIR}/postgres_source.cc
)
target_link_libraries(gpufeed_sources PUBLIC SQLite::SQLite3 PostgreSQL::PostgreSQL)
