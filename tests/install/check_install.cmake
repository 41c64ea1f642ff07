# Installs the build into a scratch prefix, then configures tests/install/consumer against it:
# find_package(tileops_jit 0.1) must find it, and a version it does not satisfy (1.0) must not.
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -P check_install.cmake
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE installed OUTPUT_QUIET)
if(NOT installed EQUAL 0)
  message(FATAL_ERROR "cmake --install failed")
endif()
foreach(version 0.1 1.0)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/consumer-${version}
                          -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DWANTED_VERSION=${version}
                  RESULT_VARIABLE configured OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(version STREQUAL "0.1" AND NOT configured EQUAL 0)
    message(FATAL_ERROR "find_package(tileops_jit 0.1) failed:\n${out}\n${err}")
  endif()
  if(version STREQUAL "1.0" AND configured EQUAL 0)
    message(FATAL_ERROR "find_package(tileops_jit 1.0) accepted version 0.1")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
message(STATUS "installed package found as 0.1, refused as 1.0")
