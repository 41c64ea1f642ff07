# Removes CUDA::cuda_driver from CUDA::nvrtc's link interface. Some FindCUDAToolkit versions
# (CMake 3.25 among them) make nvrtc depend on the driver library, so every target that links nvrtc
# also links the driver stub (soname libcuda.so.1). tileops opens the driver at run time with
# dlopen (src/runtime/driver.cpp) and libnvrtc itself does not need it; a link without --as-needed
# (GCC turns it off under -fsanitize) would otherwise record libcuda.so.1 as NEEDED, and the
# programs would not start on a machine without a GPU driver. Included after find_package(CUDAToolkit)
# by the build and by the installed tileops_jitConfig.cmake.
if(TARGET CUDA::nvrtc)
  get_target_property(_tileops_nvrtc_deps CUDA::nvrtc INTERFACE_LINK_LIBRARIES)
  if(_tileops_nvrtc_deps)
    list(REMOVE_ITEM _tileops_nvrtc_deps CUDA::cuda_driver)
    set_property(TARGET CUDA::nvrtc PROPERTY INTERFACE_LINK_LIBRARIES "${_tileops_nvrtc_deps}")
  endif()
  unset(_tileops_nvrtc_deps)
endif()
