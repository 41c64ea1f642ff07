# Test script: fails when PROGRAM records the CUDA driver library (libcuda.so*) as NEEDED.
#   cmake -DREADELF=/usr/bin/readelf -DPROGRAM=path/to/program -P check_no_libcuda.cmake
# The driver is opened with dlopen (src/runtime/driver.cpp), so that the programs start, and the CPU
# tests run, on machines without a GPU driver; a linked libcuda breaks that only where there is none.
execute_process(COMMAND "${READELF}" -d "${PROGRAM}" OUTPUT_VARIABLE dynamic RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${PROGRAM} failed (${status})")
endif()
if(dynamic MATCHES "\\(NEEDED\\)[^\n]*\\[(libcuda\\.so[^]]*)\\]")
  message(FATAL_ERROR "${PROGRAM} needs ${CMAKE_MATCH_1}: no target may link the CUDA driver (see "
                      "cmake/nvrtc_without_driver.cmake); a direct cu* call must go through driver()")
endif()
message(STATUS "${PROGRAM}: no libcuda among NEEDED")
