# gpufeed_family_registration(TARGET SOURCE LIBS...): SOURCE registers TARGET's part at static
# initialization (a family with OpenPath, remote data with DefaultFileSystem). It is compiled
# into every program that links TARGET, since an archive member nothing refers to would be
# left out of the link. LIBS: what SOURCE's headers need.
function(gpufeed_family_registration target source)
  add_library(${target}_family OBJECT ${source})
  target_include_directories(${target}_family PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${target}_family PRIVATE ${ARGN})
  target_sources(${target} INTERFACE $<TARGET_OBJECTS:${target}_family>)
endfunction()
