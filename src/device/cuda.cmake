# The CUDA backend: found at run time with dlopen, so nothing here needs a CUDA toolkit.
target_sources(gpufeed_device PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_driver.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_context.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_stream.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_device.cc
  ${CMAKE_CURRENT_LIST_DIR}/kernels/gather_ptx.cc
)
