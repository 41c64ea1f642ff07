"""tileops_jit: JIT-compiled, autotuned GPU kernels for inference, called on CUDA tensors.

    import torch, tileops_jit as tj
    x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    y = tj.rms_norm(x, w)                       # torch's current stream
    print(tj.explain(tj.rms_norm, x, w))        # which config, and where it came from

Tensors: torch.Tensor, or any object with __dlpack__ (CuPy, JAX...: pass out= and stream=).
Inference only: no autograd. Errors: InvalidArgument (a ValueError) for bad arguments; the others
(Unsupported, DriverError, CompileError, CacheMiss, FileError) are RuntimeErrors. With torch >= 2.4
installed the ops are also torch custom ops (torch.ops.tileops.*), so torch.compile(fullgraph=True)
keeps them in its graph. The ops built (one per problem) are kept up to TILEOPS_PY_OP_CACHE_SIZE
(default 1024), the least recently used evicted first.
"""

from . import _C
from ._C import CacheMiss, CompileError, DriverError, Error, FileError, InvalidArgument, Unsupported
from . import ops as _ops
from .ops import (RopeScaling, add, decode_attention, embedding, flash_attention, gelu, gemm_fp8, gemm_grouped,
                  layer_norm, linear, llama3_rope_scaling, log_softmax, matmul, mla_decode, moe_permute, moe_topk,
                  moe_unpermute, mul, quantize, rms_norm, rope, sample, silu, silu_and_mul, silu_mul, softmax)

__version__ = _C.version()

def _torch_has_custom_ops(torch):
    """Whether torch has the custom-op API the package uses (torch.library.custom_op,
    torch.compiler.is_compiling: torch >= 2.4). With an older torch the functions still take torch
    tensors, eagerly, but are no torch custom ops (torch.compile breaks its graph around them)."""
    library, compiler = getattr(torch, "library", None), getattr(torch, "compiler", None)
    return callable(getattr(library, "custom_op", None)) and callable(getattr(compiler, "is_compiling", None))


if _ops._torch is not None and _torch_has_custom_ops(_ops._torch):
    from . import torch_library as _torch_library

    _ops._torch_library = _torch_library
    _ops._compiling = _ops._torch.compiler.is_compiling  # the functions then go through the custom ops


def _set_op_cache_size_from_environment():
    """TILEOPS_PY_OP_CACHE_SIZE: how many ops (one per problem) the process keeps built, at least 1."""
    import os

    text = os.environ.get("TILEOPS_PY_OP_CACHE_SIZE", "").strip()
    if not text:
        return
    try:
        size = int(text, 10)
    except ValueError:
        size = 0
    if not 1 <= size < 1 << 63:
        raise InvalidArgument(f"tileops_jit: TILEOPS_PY_OP_CACHE_SIZE must be a whole number of ops, at least 1 "
                              f"(default {_C.op_cache_info()['default_capacity']}), got {text!r}")
    _C.set_op_cache_capacity(size)


_set_op_cache_size_from_environment()


def explain(op, *args, **kwargs):
    """Which config `op` (one of this package's functions) would run with on these arguments, where
    it came from (a tuning database, the nearest tuned shape, or the heuristic) and why. Runs nothing."""
    _C.take_explanation()
    _with_mode(_C.Mode.explain, op, args, kwargs)
    return _C.take_explanation()


def prepare(op, *args, **kwargs):
    """Compiles or loads every kernel `op` may launch on these arguments (so that the first call
    compiles nothing, e.g. before CUDA graph capture). Runs nothing."""
    _with_mode(_C.Mode.prepare, op, args, kwargs)


def _with_mode(mode, op, args, kwargs):
    _C.set_mode(mode)
    try:
        op(*args, **kwargs)
    finally:
        _C.set_mode(_C.Mode.run)


def device_info(device=0):
    """The GPU's name, arch (the NVRTC target), SM count and memory."""
    return _C.device_info(device)


def stats(device=0):
    """Kernels compiled, loaded from the disk cache and found in memory by this process on `device`."""
    return _C.stats(device)


__all__ = ["add", "decode_attention", "device_info", "embedding", "explain", "flash_attention", "gelu", "gemm_fp8",
           "gemm_grouped", "layer_norm", "linear", "llama3_rope_scaling", "log_softmax", "matmul", "mla_decode", "moe_permute",
           "moe_topk", "moe_unpermute", "mul", "prepare",
           "quantize", "rms_norm", "rope", "sample", "silu", "silu_and_mul", "silu_mul", "softmax", "stats",
           "RopeScaling", "Error", "InvalidArgument", "Unsupported", "DriverError", "CompileError", "CacheMiss",
           "FileError"]
