# Defines tileops::nvrtc_no_driver: NVRTC (the library CUDA::nvrtc names, its include directories
# and link dependencies) without CUDA::cuda_driver. Some FindCUDAToolkit versions (CMake 3.25
# among them) make CUDA::nvrtc depend on the driver library, so every target that links nvrtc also
# links the driver stub (soname libcuda.so.1). tileops opens the driver at run time with dlopen
# (src/runtime/driver.cpp) and libnvrtc itself does not need it; a link without --as-needed (GCC
# turns it off under -fsanitize) would otherwise record libcuda.so.1 as NEEDED, and the programs
# would not start on a machine without a GPU driver.
# CUDA::nvrtc is left as it is: a project that finds tileops_jit and links CUDA::nvrtc for its own
# use keeps the driver it may call. Included after find_package(CUDAToolkit) by the build and by
# the installed tileops_jitConfig.cmake.
if(TARGET CUDA::nvrtc AND NOT TARGET tileops::nvrtc_no_driver)
  get_target_property(_tileops_nvrtc_type CUDA::nvrtc TYPE)
  if(_tileops_nvrtc_type STREQUAL "INTERFACE_LIBRARY")
    add_library(tileops::nvrtc_no_driver INTERFACE IMPORTED)
  else()
    add_library(tileops::nvrtc_no_driver UNKNOWN IMPORTED)
    get_target_property(_tileops_nvrtc_configs CUDA::nvrtc IMPORTED_CONFIGURATIONS)
    set(_tileops_nvrtc_properties IMPORTED_LOCATION)
    if(_tileops_nvrtc_configs)
      set_property(TARGET tileops::nvrtc_no_driver PROPERTY IMPORTED_CONFIGURATIONS "${_tileops_nvrtc_configs}")
      foreach(_tileops_config ${_tileops_nvrtc_configs})
        list(APPEND _tileops_nvrtc_properties IMPORTED_LOCATION_${_tileops_config})
      endforeach()
    endif()
    foreach(_tileops_property ${_tileops_nvrtc_properties})
      get_target_property(_tileops_value CUDA::nvrtc ${_tileops_property})
      if(_tileops_value)
        set_property(TARGET tileops::nvrtc_no_driver PROPERTY ${_tileops_property} "${_tileops_value}")
      endif()
    endforeach()
  endif()
  foreach(_tileops_property INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES
                            INTERFACE_COMPILE_DEFINITIONS INTERFACE_LINK_LIBRARIES)
    get_target_property(_tileops_value CUDA::nvrtc ${_tileops_property})
    if(_tileops_value)
      if(_tileops_property STREQUAL "INTERFACE_LINK_LIBRARIES")
        list(REMOVE_ITEM _tileops_value CUDA::cuda_driver)
      endif()
      set_property(TARGET tileops::nvrtc_no_driver PROPERTY ${_tileops_property} "${_tileops_value}")
    endif()
  endforeach()
  unset(_tileops_nvrtc_type)
  unset(_tileops_nvrtc_configs)
  unset(_tileops_nvrtc_properties)
  unset(_tileops_config)
  unset(_tileops_property)
  unset(_tileops_value)
endif()
