# transformer_run refuses bad arguments and model files by name, with exit status 2 and before it
# needs a GPU (so this runs on a machine without one).
#   cmake -DRUN=... -DDATA=... -DWORK_DIR=... -P check_transformer_run_refusals.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(llama ${DATA}/small_llama_config.json)
set(gpt2 ${DATA}/small_gpt2_config.json)
file(WRITE ${WORK_DIR}/truncated.safetensors "AAAAAAAAno header")
file(WRITE ${WORK_DIR}/bad_prompts.json "[[1, 2], [3, 1999]]")
file(WRITE ${WORK_DIR}/not_json.json "[[1, 2")

# refuse(<what the message must say> <arguments...>)
function(refuse expected)
  execute_process(COMMAND ${RUN} ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 2 OR NOT err MATCHES "${expected}")
    message(FATAL_ERROR "transformer_run ${ARGN}\nexpected exit status 2 and a message matching '${expected}', got "
                        "${status}:\n${out}${err}")
  endif()
endfunction()

refuse("--config is required" --random-weights 1 --prompt-lengths 4)
refuse("unknown option '--bogus'" --config ${llama} --bogus 1)
refuse("--prompt-lengths must be an integer" --config ${llama} --random-weights 1 --prompt-lengths 5,x)
refuse("--steps must be an integer" --config ${llama} --random-weights 1 --prompt-lengths 5 --steps -1)
refuse("--top-p must be a finite number" --config ${llama} --random-weights 1 --prompt-lengths 5 --top-p nan)
refuse("--dtype must be bf16 or fp16" --config ${llama} --random-weights 1 --prompt-lengths 5 --dtype fp32)
refuse("exactly one of --weights and --random-weights" --config ${llama} --prompt-lengths 5)
refuse("exactly one of --prompts and --prompt-lengths" --config ${llama} --random-weights 1)
refuse("num_attention_heads \\(32\\) must be a multiple of num_key_value_heads \\(7\\)"
       --config ${DATA}/bad_kv_heads_config.json --random-weights 1 --prompt-lengths 5)
refuse("model config" --config ${WORK_DIR} --random-weights 1 --prompt-lengths 5)
refuse("header length .* does not fit" --config ${llama} --weights ${WORK_DIR}/truncated.safetensors --prompt-lengths 5)
refuse("prompt 1 holds 1999" --config ${llama} --random-weights 1 --prompts ${WORK_DIR}/bad_prompts.json)
refuse("not valid JSON" --config ${llama} --random-weights 1 --prompts ${WORK_DIR}/not_json.json)
refuse("head_dim must be a multiple of 16 from 16 to 256, got 18" --config ${DATA}/odd_head_dim_config.json --random-weights 1
       --prompt-lengths 5)
refuse("passes GPT-2's 512 learned positions" --config ${gpt2} --random-weights 1 --prompt-lengths 500 --steps 20)
refuse("pass --max-context 64" --config ${llama} --random-weights 1 --prompt-lengths 60 --steps 8 --max-context 64)
refuse("page size must be >= 1|--page-size must be" --config ${llama} --random-weights 1 --prompt-lengths 5 --page-size 0)
refuse("--temperature must be >= 0" --config ${llama} --random-weights 1 --prompt-lengths 5 --temperature -1)
refuse("--top-p must be in \\(0, 1\\]" --config ${llama} --random-weights 1 --prompt-lengths 5 --top-p 0)
refuse("--min-p must be in \\[0, 1\\]" --config ${llama} --random-weights 1 --prompt-lengths 5 --min-p 1.5)
refuse("--weights is given twice" --config ${llama} --weights a --weights b --prompt-lengths 5)
refuse("--report ${WORK_DIR}/missing/r.json: the directory .* is missing" --config ${llama} --random-weights 1
       --prompt-lengths 5 --report ${WORK_DIR}/missing/r.json)
refuse("--dump ${WORK_DIR}: a directory" --config ${llama} --random-weights 1 --prompt-lengths 5 --dump ${WORK_DIR})
refuse("equal_llama3_freq_factors_config.json: .*high_freq_factor" --config ${DATA}/equal_llama3_freq_factors_config.json
       --random-weights 1 --prompt-lengths 5)

# --help: the usage on stdout, exit status 0.
execute_process(COMMAND ${RUN} --help RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0 OR NOT out MATCHES "^usage: transformer_run")
  message(FATAL_ERROR "transformer_run --help: expected the usage and exit status 0, got ${status}:\n${out}${err}")
endif()
# A sharded checkpoint is accepted; without a driver (this machine, maybe) the exit status is 1.
execute_process(COMMAND ${RUN} --config ${DATA}/sharded_tiny_llama/config.json --weights ${DATA}/sharded_tiny_llama
                        --prompt-lengths 4 --steps 2 RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0 AND NOT (status EQUAL 1 AND err MATCHES "driver|device|GPU"))
  message(FATAL_ERROR "transformer_run on a sharded checkpoint: expected 0 (a GPU) or 1 (none), got ${status}:\n${out}${err}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
