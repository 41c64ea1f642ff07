# The example's model pipeline without a GPU: transformer_check lists the weights a config needs,
# make_random_weights.py writes them, and transformer_check finds every one in the file.
#   cmake -DCHECK=... -DPYTHON=... -DSCRIPT=... -DCONFIG=... -DWORK_DIR=... -P check_random_weights.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(COMMAND ${CHECK} --config ${CONFIG} --list-weights OUTPUT_FILE ${WORK_DIR}/weights.jsonl
                RESULT_VARIABLE listed)
if(NOT listed EQUAL 0)
  message(FATAL_ERROR "transformer_check --list-weights failed")
endif()
foreach(dtype bf16 fp16 fp32)
  execute_process(COMMAND ${PYTHON} ${SCRIPT} --weights ${WORK_DIR}/weights.jsonl --out ${WORK_DIR}/${dtype}.safetensors
                          --dtype ${dtype} RESULT_VARIABLE written OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT written EQUAL 0)
    message(FATAL_ERROR "make_random_weights.py --dtype ${dtype} failed:\n${out}\n${err}")
  endif()
  execute_process(COMMAND ${CHECK} --config ${CONFIG} --weights ${WORK_DIR}/${dtype}.safetensors
                  RESULT_VARIABLE checked OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT checked EQUAL 0 OR NOT out MATCHES "all 21 weights present")
    message(FATAL_ERROR "transformer_check refused the ${dtype} weights:\n${out}\n${err}")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
