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
# The generated version header is installed with the others.
file(STRINGS ${WORK_DIR}/prefix/include/tileops/version.hpp version_line REGEX "define TILEOPS_VERSION_STRING")
if(NOT version_line MATCHES "\"[0-9]+\\.[0-9]+\\.[0-9]+\"")
  message(FATAL_ERROR "tileops/version.hpp is not installed or names no version: '${version_line}'")
endif()
# The installed CLI uses the installed database, found beside itself (not the source tree's).
if(EXISTS ${WORK_DIR}/prefix/bin/tileops-tune)
  execute_process(COMMAND ${WORK_DIR}/prefix/bin/tileops-tune explain --arch sm_90a --op rmsnorm --shape 1024x65536
                          --dtype bf16 RESULT_VARIABLE explained OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT explained EQUAL 0 OR NOT out MATCHES "from shipped database ${WORK_DIR}/prefix/share/tileops_jit/tuning_db/")
    message(FATAL_ERROR "the installed tileops-tune does not use the installed tuning database:\n${out}\n${err}")
  endif()
endif()
file(REMOVE_RECURSE ${WORK_DIR})
message(STATUS "installed package found as 0.1, refused as 1.0; the installed CLI uses its database")
