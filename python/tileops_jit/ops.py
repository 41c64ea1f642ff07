"""The ops, one function each, on CUDA tensors: torch tensors, or any DLPack producer (CuPy, JAX...).

Every function runs on the caller's stream: `stream=None` means torch's current stream for torch
tensors and the legacy default stream otherwise; pass an int handle or a stream object to choose.
Outputs are allocated (with torch) when not given as `out=`; tensors other than torch's need `out=`.
The first call of a problem builds its op (config from the tuning database, kernel from the cache
or compiled); later calls of the same problem are a lookup and a launch. Run a problem once
before capturing it in a CUDA graph (the first run may compile and allocate).

Inference only: nothing here records autograd history. Under torch.compile the functions call
their torch custom ops (torch.ops.tileops.*), which allocate their results: a given `out=` (and
`residual_out=`, `q_out=` / `k_out=`, `scales=`, `lse=`) then receives a copy of the result, and
`stream=` is ignored (the compiled graph runs on torch's current stream).
"""

import operator
from typing import NamedTuple

from . import _C

# Arguments go to _C positionally: keywords cost a lookup each on every call.
try:
    import torch as _torch
except ImportError:
    _torch = None


def _not_compiling():
    return False


# torch.compiler.is_compiling once the package has registered the torch custom ops (torch >= 2.4);
# until then (and without torch) the functions always run eagerly.
_compiling = _not_compiling


def _new(like, shape, dtype=None, name="out", zero=False):
    """An output tensor on `like`'s device (torch tensors only); dtype: like's, a torch dtype or its name."""
    if _torch is None or not isinstance(like, _torch.Tensor):
        raise _C.InvalidArgument(
            f"tileops_jit: {name}= is required for tensors other than torch's (got a {type(like).__name__})")
    dtype = like.dtype if dtype is None else _torch_dtype(dtype)
    return like.new_zeros(shape, dtype=dtype) if zero else like.new_empty(shape, dtype=dtype)


def _torch_dtype(dtype):
    """A torch dtype, or its name ('bfloat16')."""
    if isinstance(dtype, str):
        named = getattr(_torch, dtype, None)
        if not isinstance(named, _torch.dtype):
            raise _C.InvalidArgument(f"tileops_jit: {dtype!r} is not a torch dtype (e.g. torch.bfloat16 or 'bfloat16')")
        return named
    return dtype


def _result_dtype(out, dtype):
    """Under torch.compile: the dtype the custom op is to return, as eager mode writes it: `dtype`
    when given, else out's (None: the op's default)."""
    if dtype is not None:
        return _torch_dtype(dtype)
    return None if out is None else out.dtype


def _into(out, result):
    """Under torch.compile: the custom op's `result` copied into the caller's `out` (returned), or
    `result` itself when no out was given. An out of another shape or dtype is refused, as eager
    mode refuses it (copy_ would broadcast or cast it)."""
    if out is None:
        return result
    if out.shape != result.shape or out.dtype != result.dtype:
        raise _C.InvalidArgument(f"tileops_jit: out= has shape {list(out.shape)} and dtype {out.dtype}; the result has "
                                 f"{list(result.shape)} and {result.dtype}")
    out.copy_(result)
    return out


# --- scalar arguments ----------------------------------------------------------------------------
# Checked in Python, so that a wrong type is an InvalidArgument naming the argument (not pybind's
# list of signatures); a value of the expected type passes at the cost of a type check.

_INT64 = 1 << 63
# The fast paths below test ints of the right type for int64's range (pybind11 refuses a larger one
# with a bare TypeError): `(a.bit_length() | b.bit_length()) < 64` holds when both fit (-2**63
# aside, which the slow path's _int takes).


def _int(value, name, op):
    """`value` as a 64-bit int (int, bool, numpy or other integers with __index__)."""
    if type(value) is int and -_INT64 <= value < _INT64:
        return value
    try:
        converted = operator.index(value)
    except TypeError:
        raise _C.InvalidArgument(f"tileops_jit.{op}: {name} must be an int, got {type(value).__name__} "
                                 f"{value!r}") from None
    if not -_INT64 <= converted < _INT64:
        raise _C.InvalidArgument(f"tileops_jit.{op}: {name} = {converted} does not fit in a 64-bit int")
    return converted


def _float(value, name, op):
    """`value` as a float (int, float, numpy scalars, one-element tensors)."""
    if type(value) is float:
        return value
    if value is not None and not isinstance(value, (str, bytes)):
        try:
            return float(value)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise _C.InvalidArgument(f"tileops_jit.{op}: {name} must be a number, got {type(value).__name__} {value!r}")


def _bool(value, name, op):
    """`value` as a bool (True, False, 0, 1, numpy.bool_)."""
    if value is True or value is False:
        return value
    if (type(value) is int and value in (0, 1)) or type(value).__name__ in ("bool_", "bool"):
        return bool(value)
    raise _C.InvalidArgument(f"tileops_jit.{op}: {name} must be a bool, got {type(value).__name__} {value!r}")


def _scale(value, op):
    """A softmax scale: None (or 0) is the op's default, 1 / sqrt(head_dim)."""
    return 0.0 if value is None else _float(value, "scale", op)


# --- row ops -------------------------------------------------------------------------------------

def rms_norm(x, weight, eps=1e-6, *, residual=None, out=None, residual_out=None, out_dtype=None, stream=None):
    """y = h / sqrt(mean(h^2) + eps) * weight over the last dim, h = x (+ residual).

    With `residual`, also returns h (written to `residual_out`, which may be `x` or `residual`
    itself for an in-place update): returns (y, h).
    """
    if _compiling():
        if residual is None:
            if residual_out is not None:
                raise _C.InvalidArgument("tileops_jit.rms_norm: residual and residual_out go together")
            return _into(out, _torch_ops().rms_norm(x, weight, eps, None, _result_dtype(out, out_dtype)))
        y, h = _torch_ops().rms_norm(x, weight, eps, residual, _result_dtype(out, out_dtype))
        return _into(out, y), _into(residual_out, h)
    if type(eps) is not float:
        eps = _float(eps, "eps", "rms_norm")
    if out is None:
        out = _new(x, x.shape, out_dtype)
    if residual is not None and residual_out is None:
        residual_out = _new(x, x.shape, name="residual_out")
    _C.rms_norm(x, weight, out, residual, residual_out, eps, stream)
    return out if residual is None else (out, residual_out)


def layer_norm(x, weight, bias, eps=1e-5, *, out=None, out_dtype=None, stream=None):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim."""
    if _compiling():
        return _into(out, _torch_ops().layer_norm(x, weight, bias, eps, _result_dtype(out, out_dtype)))
    if type(eps) is not float:
        eps = _float(eps, "eps", "layer_norm")
    if out is None:
        out = _new(x, x.shape, out_dtype)
    _C.layer_norm(x, weight, bias, out, eps, stream)
    return out


def softmax(x, *, out=None, out_dtype=None, stream=None):
    """Softmax over the last dim."""
    return _softmax(x, False, out, out_dtype, stream)


def log_softmax(x, *, out=None, out_dtype=None, stream=None):
    """Log-softmax over the last dim."""
    return _softmax(x, True, out, out_dtype, stream)


def _softmax(x, log, out, out_dtype, stream):
    if _compiling():
        return _into(out, _torch_ops().softmax(x, log, _result_dtype(out, out_dtype)))
    if out is None:
        out = _new(x, x.shape, out_dtype)
    _C.softmax(x, out, log, stream)
    return out


# --- elementwise ---------------------------------------------------------------------------------

_UNARY = {"gelu": _C.ElementwiseOp.gelu, "gelu_tanh": _C.ElementwiseOp.gelu_tanh, "silu": _C.ElementwiseOp.silu}
_BINARY = {"add": _C.ElementwiseOp.add, "mul": _C.ElementwiseOp.mul, "silu_mul": _C.ElementwiseOp.silu_mul}


def _elementwise(name, a, b, out, out_dtype, stream):
    if _compiling():
        return _into(out, _torch_ops().elementwise(name, a, b, _result_dtype(out, out_dtype)))
    if out is None:
        out = _new(a, a.shape, out_dtype)
    _C.elementwise(_UNARY[name] if b is None else _BINARY[name], a, b, out, stream)
    return out


def gelu(a, approximate="none", *, out=None, out_dtype=None, stream=None):
    """GELU, exact (erf) or approximate="tanh"."""
    if approximate not in ("none", "tanh"):
        raise _C.InvalidArgument(f"tileops_jit.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _elementwise("gelu" if approximate == "none" else "gelu_tanh", a, None, out, out_dtype, stream)


def silu(a, *, out=None, out_dtype=None, stream=None):
    """a * sigmoid(a)."""
    return _elementwise("silu", a, None, out, out_dtype, stream)


def silu_mul(a, b, *, out=None, out_dtype=None, stream=None):
    """silu(a) * b (the SwiGLU gate)."""
    return _elementwise("silu_mul", a, b, out, out_dtype, stream)


def silu_and_mul(x, *, out=None, out_dtype=None, stream=None):
    """silu(x[..., :d]) * x[..., d:] for x of last dim 2d (a fused gate-up projection's output)."""
    d = x.shape[-1] // 2
    if x.shape[-1] != 2 * d:
        raise _C.InvalidArgument(f"tileops_jit.silu_and_mul: the last dim ({x.shape[-1]}) must be even")
    if out is None and not _compiling():
        out = _new(x, (*x.shape[:-1], d), out_dtype)
    return silu_mul(x[..., :d], x[..., d:], out=out, out_dtype=out_dtype, stream=stream)


def add(a, b, *, out=None, out_dtype=None, stream=None):
    """a + b; b may be one row of a's last dim, added to every row."""
    return _elementwise("add", a, b, out, out_dtype, stream)


def mul(a, b, *, out=None, out_dtype=None, stream=None):
    """a * b; b may be one row of a's last dim, applied to every row."""
    return _elementwise("mul", a, b, out, out_dtype, stream)


# --- GEMM ----------------------------------------------------------------------------------------

_EPILOGUES = {None: _C.GemmEpilogue.none, "none": _C.GemmEpilogue.none, "gelu": _C.GemmEpilogue.gelu,
              "silu": _C.GemmEpilogue.silu}


def matmul(a, b, *, bias=None, c=None, alpha=1.0, beta=0.0, activation=None, out=None, out_dtype=None, stream=None):
    """out = activation(alpha * a @ b + beta * c + bias).

    a: [..., M, K] (leading dims folded into M) or [batch, M, K] with b [batch, K, N]; b row-major
    [K, N] or the transpose of a row-major [N, K] (e.g. `weight.t()`); bias: [N]; activation:
    None, "gelu" or "silu".
    """
    if activation not in _EPILOGUES:
        raise _C.InvalidArgument(f"tileops_jit.matmul: activation must be None, 'gelu' or 'silu', got {activation!r}")
    if _compiling():
        return _into(out, _torch_ops().gemm(a, b, c, bias, alpha, beta, activation or "none",
                                            _result_dtype(out, out_dtype)))
    if type(alpha) is not float:
        alpha = _float(alpha, "alpha", "matmul")
    if type(beta) is not float:
        beta = _float(beta, "beta", "matmul")
    if out is None:
        out = _new(a, (*a.shape[:-1], b.shape[-1]), out_dtype)
    _C.gemm(a, b, out, c, bias, alpha, beta, _EPILOGUES[activation], stream)
    return out


def linear(x, weight, bias=None, *, activation=None, out=None, out_dtype=None, stream=None):
    """activation(x @ weight.T + bias), as torch.nn.functional.linear; weight: [N, K]. (matmul
    takes c, alpha and beta besides.)"""
    return matmul(x, weight.t() if hasattr(weight, "t") else weight.T, bias=bias, activation=activation, out=out,
                  out_dtype=out_dtype, stream=stream)


# --- attention -----------------------------------------------------------------------------------

_LAYOUTS = {"bshd": _C.AttentionLayout.bshd, "bhsd": _C.AttentionLayout.bhsd}


def flash_attention(q, k, v, *, causal=False, scale=None, window_left=-1, layout="bshd", return_lse=False,
                    cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, out=None, lse=None,
                    stream=None):
    """softmax(scale q k^T) v (prefill). q, k, v: [batch, seqlen, heads, head_dim] ("bshd") or
    [batch, heads, seqlen, head_dim] ("bhsd"); varlen: [total, heads, head_dim] with cu_seqlens_q/k
    ([batch + 1] int32) and max_seqlen_q/k. Head dims: multiples of 16 up to 256; v (and out) may
    have its own (DeepSeek's prefill: q, k 192, v 128). Returns out, or (out, lse) with return_lse
    (lse: fp32 [batch, heads, seqlen_q], varlen [heads, total_q])."""
    if layout not in _LAYOUTS:
        raise _C.InvalidArgument(f"tileops_jit.flash_attention: layout must be 'bshd' or 'bhsd', got {layout!r}")
    if _compiling():
        o, l = _torch_ops().flash_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                                            scale or 0.0, window_left, layout, return_lse)
        return (_into(out, o), _into(lse, l)) if return_lse else _into(out, o)
    if not (type(causal) is bool and type(window_left) is int and type(max_seqlen_q) is int
            and type(max_seqlen_k) is int and (window_left.bit_length() | max_seqlen_q.bit_length() | max_seqlen_k.bit_length()) < 64
            and (scale is None or type(scale) is float)):
        op = "flash_attention"
        causal, window_left = _bool(causal, "causal", op), _int(window_left, "window_left", op)
        max_seqlen_q, max_seqlen_k = _int(max_seqlen_q, "max_seqlen_q", op), _int(max_seqlen_k, "max_seqlen_k", op)
        scale = _scale(scale, op)
    scale = scale or 0.0
    if out is None:
        out = _new(q, _flash_out_shape(q, v))
    if return_lse and lse is None:
        lse = _new(q, _flash_lse_shape(q, layout, cu_seqlens_q), "float32", "lse")
    _C.flash_attention(q, k, v, out, lse if return_lse else None, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                       max_seqlen_k, causal, scale, window_left, _LAYOUTS[layout], stream)
    return (out, lse) if return_lse else out


def _flash_out_shape(q, v):
    """q's shape with v's head dim."""
    return tuple(q.shape[:-1]) + (v.shape[-1],)


def _flash_lse_shape(q, layout, cu_seqlens_q):
    if cu_seqlens_q is not None:
        return (q.shape[1], q.shape[0])
    return (q.shape[0], q.shape[2], q.shape[1]) if layout == "bshd" else (q.shape[0], q.shape[1], q.shape[2])


def decode_attention(q, k_cache, v_cache, lengths, *, page_table=None, max_kv_len=0, scale=None, softcap=0.0,
                     window_left=-1, k_scale=1.0, v_scale=1.0, return_lse=False, out=None, lse=None, stream=None):
    """Attention of 1-8 new query tokens per sequence over a KV cache.

    q: [batch, q_len, heads, head_dim] or [batch, heads, head_dim]; k_cache, v_cache: [batch,
    max_kv_len, kv_heads, head_dim], or paged [num_pages, page_size, kv_heads, head_dim] with
    page_table [batch, max_pages] int32; lengths: [batch] int32 (tokens in each sequence, the new
    ones included). An float8_e4m3fn cache is read as k_scale x code and v_scale x code.
    """
    if _compiling():
        o, l = _torch_ops().decode_attention(q, k_cache, v_cache, lengths, page_table, max_kv_len, scale or 0.0,
                                             softcap, window_left, k_scale, v_scale, return_lse)
        return (_into(out, o), _into(lse, l)) if return_lse else _into(out, o)
    if not (type(max_kv_len) is int and type(window_left) is int and (max_kv_len.bit_length() | window_left.bit_length()) < 64
            and type(softcap) is float and type(k_scale) is float and type(v_scale) is float
            and (scale is None or type(scale) is float)):
        op = "decode_attention"
        max_kv_len, window_left = _int(max_kv_len, "max_kv_len", op), _int(window_left, "window_left", op)
        scale, softcap = _scale(scale, op), _float(softcap, "softcap", op)
        k_scale, v_scale = _float(k_scale, "k_scale", op), _float(v_scale, "v_scale", op)
    scale = scale or 0.0
    if out is None:
        out = _new(q, q.shape)
    if return_lse and lse is None:
        lse = _new(q, q.shape[:-1], "float32", "lse")
    _C.decode_attention(q, k_cache, v_cache, lengths, out, lse if return_lse else None, page_table, max_kv_len,
                        scale, softcap, window_left, k_scale, v_scale, stream)
    return (out, lse) if return_lse else out


def mla_decode(q, kv_cache, lengths, *, page_table=None, max_kv_len=0, scale=None, return_lse=False, out=None,
               lse=None, stream=None):
    """DeepSeek's multi-head latent attention, decode. q: [batch, q_len, heads, 576] or [batch,
    heads, 576]; kv_cache: [batch, max_kv_len, 576] or paged [num_pages, page_size, 576] with
    page_table; lengths: [batch] int32. out: [..., 512]."""
    if _compiling():
        o, l = _torch_ops().mla_decode(q, kv_cache, lengths, page_table, max_kv_len, scale or 0.0, return_lse)
        return (_into(out, o), _into(lse, l)) if return_lse else _into(out, o)
    if not (type(max_kv_len) is int and max_kv_len.bit_length() < 64 and (scale is None or type(scale) is float)):
        max_kv_len, scale = _int(max_kv_len, "max_kv_len", "mla_decode"), _scale(scale, "mla_decode")
    scale = scale or 0.0
    if out is None:
        out = _new(q, (*q.shape[:-1], 512))
    if return_lse and lse is None:
        lse = _new(q, q.shape[:-1], "float32", "lse")
    _C.mla_decode(q, kv_cache, lengths, out, lse if return_lse else None, page_table, max_kv_len, scale, stream)
    return (out, lse) if return_lse else out


# --- embedding, rope, sampling -------------------------------------------------------------------

def embedding(ids, table, *, positions=None, position_table=None, out=None, out_dtype=None, stream=None):
    """table[ids] (+ position_table[positions]); ids and positions int32 of any shape; out: [*ids.shape, hidden].
    An id or position outside its table reads nothing and contributes zeros."""
    if _compiling():
        return _into(out, _torch_ops().embedding(ids, table, positions, position_table, _result_dtype(out, out_dtype)))
    if out is None:
        out = _new(table, (*ids.shape, table.shape[1]), out_dtype)
    _C.embedding(ids, table, out, positions, position_table, stream)
    return out


_ROPE_STYLES = {"neox": _C.RopeStyle.neox, "gptj": _C.RopeStyle.gptj, "none": _C.RopeStyle.none}
_SCALING_TYPES = {"none": _C.RopeScalingType.none, "linear": _C.RopeScalingType.linear,
                  "llama3": _C.RopeScalingType.llama3}


class RopeScaling(NamedTuple):
    """How rope frequencies are stretched: type "none", "linear" (divided by factor) or "llama3"
    (Llama 3.1: wavelengths past original_max_positions / low_freq_factor divided by factor, those
    below original_max_positions / high_freq_factor kept, those between blended). A plain tuple,
    so torch.compile traces it."""
    type: str = "none"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: float = 8192.0


def llama3_rope_scaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_positions=8192.0):
    """Llama 3.1's rope scaling (config.json's rope_scaling: factor 8, low 1, high 4, original 8192)."""
    return RopeScaling("llama3", factor, low_freq_factor, high_freq_factor, original_max_positions)


def rope(q, k, positions, *, theta=10000.0, style="neox", rotary_dim=0, scaling=None, v=None, slots=None,
         k_cache=None, v_cache=None, k_scale=1.0, v_scale=1.0, q_out=None, k_out=None, inplace=False, stream=None):
    """Rotary position embedding of q [tokens, heads, head_dim] and k [tokens, kv_heads, head_dim]
    at int32 `positions`; style "neox" (rotate_half), "gptj" (interleaved) or "none"; scaling: a
    RopeScaling (linear, llama3). With v, slots (int32 [tokens]) and k_cache, v_cache ([num_pages,
    page_size, kv_heads, head_dim]) the rotated k and v are also written to the cache at each
    token's slot (negative: skipped). Returns (q_out, k_out); inplace=True rotates q and k themselves.
    scaling: a RopeScaling (or a tuple of its fields), e.g. llama3_rope_scaling()."""
    if style not in _ROPE_STYLES:
        raise _C.InvalidArgument(f"tileops_jit.rope: style must be 'neox', 'gptj' or 'none', got {style!r}")
    scaling = RopeScaling() if scaling is None else RopeScaling(*scaling)
    if scaling.type not in _SCALING_TYPES:
        raise _C.InvalidArgument(
            f"tileops_jit.rope: scaling type must be 'none', 'linear' or 'llama3', got {scaling.type!r}")
    if _compiling():
        q_o, k_o = _torch_ops().rope(q, k, positions, v, slots, k_cache, v_cache, theta, style, rotary_dim,
                                     scaling.type, [float(x) for x in scaling[1:]], k_scale, v_scale, inplace)
        return (q_o, k_o) if inplace else (_into(q_out, q_o), _into(k_out, k_o))
    factors = scaling[1:]
    if not (type(theta) is float and type(rotary_dim) is int and rotary_dim.bit_length() < 64
            and type(k_scale) is float and type(v_scale) is float
            and type(factors[0]) is float and type(factors[1]) is float and type(factors[2]) is float
            and type(factors[3]) is float):
        op = "rope"
        theta, rotary_dim = _float(theta, "theta", op), _int(rotary_dim, "rotary_dim", op)
        k_scale, v_scale = _float(k_scale, "k_scale", op), _float(v_scale, "v_scale", op)
        factors = [_float(x, "scaling." + field, op) for x, field in zip(factors, RopeScaling._fields[1:])]
    if inplace:
        q_out, k_out = q, k
    if q_out is None:
        q_out = _new(q, q.shape, name="q_out")
    if k_out is None:
        k_out = _new(k, k.shape, name="k_out")
    _C.rope(q, k, positions, q_out, k_out, v, slots, k_cache, v_cache, theta, _ROPE_STYLES[style], rotary_dim,
            _C.RopeScaling(_SCALING_TYPES[scaling.type], *factors), k_scale, v_scale, stream)
    return q_out, k_out


# The sampling parameters in _C.sample's order, with the value that leaves a row as it is (the
# meanings: include/tileops/sampling.hpp) and its dtype.
_SAMPLING_PARAMETERS = (("temperature", 1.0, "float32"), ("top_k", 0, "int32"), ("top_p", 1.0, "float32"),
                        ("min_p", 0.0, "float32"), ("offsets", 0, "int32"))


def sample(logits, *, temperature=None, top_k=None, top_p=None, min_p=None, offsets=None, seed=0, out=None,
           stream=None):
    """The next token of each row of logits [batch, vocab]: greedy (argmax) when no parameter is
    given, else drawn with per-row temperature, top_k, top_p, min_p (fp32 / int32 / fp32 / fp32
    device tensors of [batch]) from `seed` (an int in [0, 2^64)) and the per-row int32 `offsets`
    (advance them every step). Each parameter is optional: one left out takes its neutral value
    (temperature 1, top_k 0: no top-k, top_p 1, min_p 0, offsets 0), made on the logits' device
    with torch (with tensors other than torch's, give all five or none). Returns int32 [batch]."""
    if _compiling():
        return _into(out, _torch_ops().sample(logits, temperature, top_k, top_p, min_p, offsets, seed))
    if type(seed) is not int or not 0 <= seed < _UINT64:
        seed = _seed(seed)
    parameters = (temperature, top_k, top_p, min_p, offsets)
    if temperature is None or top_k is None or top_p is None or min_p is None or offsets is None:
        if not (temperature is None and top_k is None and top_p is None and min_p is None and offsets is None):
            parameters = _neutral_fill(logits, parameters)  # some given: the others neutral
    if out is None:
        out = _new(logits, logits.shape[:-1], "int32")
    _C.sample(logits, out, *parameters, seed, stream)
    return out


_UINT64 = 1 << 64


def _seed(value):
    try:
        seed = operator.index(value)
    except TypeError:
        seed = None
    if seed is None or not 0 <= seed < _UINT64:
        raise _C.InvalidArgument(f"tileops_jit.sample: seed must be an int in [0, 2^64), got {type(value).__name__} "
                                 f"{value!r}")
    return seed


def _neutral_fill(logits, parameters):
    """The sampling parameters with each one missing made on logits' device, of its neutral value."""
    missing = [name for p, (name, _, _) in zip(parameters, _SAMPLING_PARAMETERS) if p is None]
    if _torch is None or not isinstance(logits, _torch.Tensor):
        raise _C.InvalidArgument(
            f"tileops_jit.sample: {', '.join(missing)} not given: with tensors other than torch's (a "
            f"{type(logits).__name__} here) the package cannot make them; give temperature, top_k, top_p, min_p and "
            f"offsets together (neutral values: 1, 0, 1, 0, 0) or none of them (greedy)")
    rows = logits.shape[:-1]
    return tuple(p if p is not None else logits.new_full(rows, value, dtype=getattr(_torch, dtype))
                 for p, (_, value, dtype) in zip(parameters, _SAMPLING_PARAMETERS))


# --- quantize ------------------------------------------------------------------------------------

_QUANTIZE_SCALINGS = ("per_token", "block_1x128", "per_tensor")


def quantize(x, scaling="per_token", *, scale=None, out=None, scales=None, stream=None):
    """x [..., cols] bf16 / fp16 as fp8 e4m3 codes and fp32 scales: returns (q, scales), q of x's
    shape (float8_e4m3fn), with x ~= q.float() * scale. scale = amax / 448 over its group (at
    least 2^-126, so an all-zero group gives zero codes); codes are rounded to nearest, saturated to
    +-448. scaling: "per_token" (scales of x.shape[:-1], one a row), "block_1x128" (scales
    [ceil(cols / 128), rows], block-major: the scale of x[r, c] is scales[c // 128, r]) or
    "per_tensor" (scales [1]). `scale`, a one-element fp32 tensor, makes per_tensor use that static
    scale (returned as the scales) instead of computing it."""
    if scaling not in _QUANTIZE_SCALINGS:
        raise _C.InvalidArgument(f"tileops_jit.quantize: scaling must be 'per_token', 'block_1x128' or "
                                 f"'per_tensor', got {scaling!r}")
    if _compiling():
        if scale is not None and scales is not None:
            raise _C.InvalidArgument("tileops_jit.quantize: give scales (the scales to compute) or scale (a static "
                                     "per-tensor scale), one of them")
        q, computed = _torch_ops().quantize(x, scaling, scale)
        return _into(out, q), (scale if scale is not None else _into(scales, computed))
    if out is None:
        out = _new(x, x.shape, "float8_e4m3fn")
    if scale is None and scales is None:
        if scaling == "per_token":
            scales = _new(x, x.shape[:-1], "float32", "scales")
        elif scaling == "block_1x128":
            rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
            scales = _new(x, ((x.shape[-1] + 127) // 128, rows), "float32", "scales")
        else:
            scales = _new(x, (1,), "float32", "scales")
    _C.quantize(x, out, scales, scale, scaling, stream)
    return out, (scale if scale is not None else scales)


# --- FP8 GEMM ------------------------------------------------------------------------------------

_FP8_SCALINGS = ("tensor", "row", "block")


def gemm_fp8(a, b, scales_a, scales_b, scaling="tensor", *, bias=None, c=None, alpha=1.0, beta=0.0, activation=None,
             out=None, out_dtype=None, stream=None):
    """out = activation(alpha * (a x scales_a) @ (b x scales_b).T + beta * c + bias), from float8_e4m3fn
    codes (value = code x scale), accumulated in fp32; sm_90 (H100, H200) only.

    a: [..., M, K] (leading dims folded into M) or [batch, M, K] with b [batch, N, K]; b: [N, K]
    (a linear layer's weight layout); K a multiple of 16, a and b starting on 16 bytes. fp32 scales
    by `scaling`: "tensor" (one element each), "row" (M elements for a, e.g. tj.quantize's
    per_token scales; N for b) or "block" (DeepSeek-V3's: scales_a [ceil(K / 128), M], one per row
    and 128 elements of K, as tj.quantize's block_1x128 scales, or that tensor's transpose
    [M, ceil(K / 128)]; scales_b [ceil(N / 128), ceil(K / 128)], one per 128 x 128 block of b).
    Batched calls take "tensor" scales. out_dtype: bfloat16 (the default), float16 or float32; c
    ([..., M, N]) and bias ([N]) are of it. activation: None, "gelu" or "silu".
    """
    if scaling not in _FP8_SCALINGS:
        raise _C.InvalidArgument(f"tileops_jit.gemm_fp8: scaling must be 'tensor', 'row' or 'block', got {scaling!r}")
    if activation not in _EPILOGUES:
        raise _C.InvalidArgument(f"tileops_jit.gemm_fp8: activation must be None, 'gelu' or 'silu', got {activation!r}")
    if _compiling():
        return _into(out, _torch_ops().gemm_fp8(a, b, scales_a, scales_b, scaling, c, bias, alpha, beta,
                                                activation or "none", _result_dtype(out, out_dtype)))
    if type(alpha) is not float:
        alpha = _float(alpha, "alpha", "gemm_fp8")
    if type(beta) is not float:
        beta = _float(beta, "beta", "gemm_fp8")
    if out is None:
        out = _new(a, (*a.shape[:-1], b.shape[-2]), out_dtype or "bfloat16")
    _C.gemm_fp8(a, b, scales_a, scales_b, out, c, bias, scaling, alpha, beta, _EPILOGUES[activation], stream)
    return out


def gemm_grouped(a, b, offsets=None, counts=None, *, scales_a=None, scales_b=None, scaling="tensor", alpha=1.0,
                 activation=None, out=None, out_dtype=None, stream=None):
    """One GEMM per group (a mixture-of-experts layer's experts) in one launch: out[rows of g] =
    activation(alpha * a[rows of g] @ b[g]), fp16/bf16 in (or FP8, below), fp32 accumulation.

    b: [G, K, N] as torch._grouped_mm takes it, either contiguous along N or along K (expert
    weights [G, N, K] passed as w.transpose(1, 2)). Give exactly one of:
      offsets: int32 [G + 1] on the device: a [rows, K] holds the groups one after another, group
        g is rows offsets[g]:offsets[g + 1] (tokens sorted by expert; rows past offsets[G] are
        left alone in a given out, zeros in an allocated one);
      counts: int32 [G] on the device: a [G, capacity, K], group g is its first counts[g] rows
        (out's other rows: likewise; a decode step under a CUDA graph).
    The row counts are read by the kernel, never by the host: no sync, graph-safe. K and a's and
    b's row strides must be multiples of 8 elements. out_dtype: a's (default), float32 or the
    other 16-bit type. activation: None, "gelu" or "silu".

    FP8 (sm_90): a and b of float8_e4m3fn codes with fp32 scales_a and scales_b (value = code x
    scale), b contiguous along K (e4m3 weights [G, N, K] as w.transpose(1, 2)), K a multiple of 16;
    out bfloat16 unless out_dtype=. scaling "tensor": scales_a [1], scales_b [G]; "row": scales_a
    [rows] (tj.quantize's per_token scales of a), scales_b [G, N]; "block" (DeepSeek-V3's):
    scales_a [ceil(K / 128), rows] (tj.quantize's block_1x128 scales of a), scales_b [G, ceil(N /
    128), ceil(K / 128)]. With counts, rows is G x capacity.
    """
    if (offsets is None) == (counts is None):
        raise _C.InvalidArgument("tileops_jit.gemm_grouped: give exactly one of offsets= (contiguous groups) and "
                                 "counts= (masked groups)")
    if activation not in _EPILOGUES:
        raise _C.InvalidArgument(
            f"tileops_jit.gemm_grouped: activation must be None, 'gelu' or 'silu', got {activation!r}")
    masked = counts is not None
    rows = counts if masked else offsets
    fp8 = scales_a is not None or scales_b is not None
    if fp8 and (scales_a is None or scales_b is None):
        raise _C.InvalidArgument("tileops_jit.gemm_grouped: FP8 takes both scales_a= and scales_b=")
    if fp8 and scaling not in _FP8_SCALINGS:
        raise _C.InvalidArgument(f"tileops_jit.gemm_grouped: scaling must be 'tensor', 'row' or 'block', got {scaling!r}")
    if _compiling():
        ops = _torch_ops()
        if out is not None:  # into out in place: its rows outside the groups stay as they are
            if fp8:
                ops.gemm_fp8_grouped_out(a, b, scales_a, scales_b, rows, masked, scaling, alpha, activation or "none",
                                         out)
            else:
                ops.gemm_grouped_out(a, b, rows, masked, alpha, activation or "none", out)
            return out
        if fp8:
            return ops.gemm_fp8_grouped(a, b, scales_a, scales_b, rows, masked, scaling, alpha, activation or "none",
                                        out_dtype)
        return ops.gemm_grouped(a, b, rows, masked, alpha, activation or "none", out_dtype)
    if type(alpha) is not float:
        alpha = _float(alpha, "alpha", "gemm_grouped")
    if out is None:  # zeros: rows outside every group are not written
        out = _new(a, (*a.shape[:-1], b.shape[-1]), out_dtype or ("bfloat16" if fp8 else None), zero=True)
    if fp8:
        _C.gemm_fp8_grouped(a, b, scales_a, scales_b, rows, out, masked, scaling, alpha, _EPILOGUES[activation], stream)
    else:
        _C.gemm_grouped(a, b, rows, out, masked, alpha, _EPILOGUES[activation], stream)
    return out


# --- MoE routing ---------------------------------------------------------------------------------

_MOE_SCORINGS = ("softmax", "sigmoid")


def moe_topk(logits, k, scoring="softmax", *, renormalize=False, routed_scaling_factor=1.0, n_group=1, topk_group=1,
             correction_bias=None, out=None, stream=None):
    """The router's top-k of logits [..., experts] (fp32 / fp16 / bf16, at most 512 experts, k at
    most 32): returns (topk_weights float32 [..., k], topk_ids int32 [..., k]), the ids in
    descending order of score, equal scores in ascending expert index. Scores: "softmax" over the
    experts or "sigmoid" each; renormalize divides the k weights by their sum; every weight is
    multiplied by routed_scaling_factor. DeepSeek-V3's grouped choice: n_group groups scored by
    the sum of their two best scores, the topk_group best kept; correction_bias (float32
    [experts], sigmoid only) is added to the scores for choosing, not to the weights.
    out: a (topk_weights, topk_ids) pair to write into."""
    if scoring not in _MOE_SCORINGS:
        raise _C.InvalidArgument(f"tileops_jit.moe_topk: scoring must be 'softmax' or 'sigmoid', got {scoring!r}")
    if _compiling():
        weights, ids = _torch_ops().moe_topk(logits, k, scoring, renormalize, routed_scaling_factor, n_group,
                                             topk_group, correction_bias)
        if out is None:
            return weights, ids
        out[0].copy_(weights)
        out[1].copy_(ids)
        return out[0], out[1]
    if not (type(k) is int and type(n_group) is int and type(topk_group) is int
            and (k.bit_length() | n_group.bit_length() | topk_group.bit_length()) < 64 and type(renormalize) is bool
            and type(routed_scaling_factor) is float):
        op = "moe_topk"
        k, n_group, topk_group = _int(k, "k", op), _int(n_group, "n_group", op), _int(topk_group, "topk_group", op)
        renormalize = _bool(renormalize, "renormalize", op)
        routed_scaling_factor = _float(routed_scaling_factor, "routed_scaling_factor", op)
    weights, ids = out if out is not None else (_new(logits, (*logits.shape[:-1], k), "float32", "out"),
                                                 _new(logits, (*logits.shape[:-1], k), "int32", "out"))
    _C.moe_topk(logits, weights, ids, correction_bias, k, scoring, renormalize, routed_scaling_factor, n_group,
                topk_group, stream)
    return weights, ids


def moe_permute(x, topk_ids, num_experts, *, capacity=None, x_scales=None, out=None, stream=None):
    """x [..., hidden] (bf16 / fp16 / float8_e4m3fn; leading dims are the tokens) gathered in expert
    order by topk_ids int32 [..., k], on the device (no sync, graph-safe); within an expert, entries in the order of
    topk_ids read flat. Returns:
      capacity None: (x_perm [tokens x k, hidden], expert_offsets int32 [num_experts + 1],
        row_map int32 [tokens, k]): expert e's rows are x_perm[offsets[e]:offsets[e + 1]];
      capacity N: (x_masked [num_experts, N, hidden], expert_counts int32 [num_experts], row_map):
        expert e's rows are x_masked[e, :counts[e]]; entries past an expert's capacity are dropped.
    row_map (topk_ids' shape): row_map[t, j] is the permuted row of x_perm (or of x_masked viewed as rows) that token t's j-th
    choice went to, -1 when dropped; ids outside [0, num_experts) are dropped.
    x_scales (float8 x only, float32): x's scales, [tokens] (one a token) or [blocks, tokens] (one
    per 128 elements, as quantize writes them); then a fourth result, perm_scales [rows] or
    [blocks, rows] (rows: tokens x k, or num_experts x capacity), the scales of the permuted rows
    as gemm_grouped reads them (its FP8 form: scales_a=, scales_b=, scaling=). out: the triple (or,
    with x_scales, the four) to write into."""
    masked = capacity is not None
    if masked:
        capacity = _int(capacity, "capacity", "moe_permute")
        if capacity < 1:
            raise _C.InvalidArgument(f"tileops_jit.moe_permute: capacity must be at least 1 (or None: the contiguous "
                                     f"layout), got {capacity}")
    if _compiling():
        if x_scales is not None:
            result = _torch_ops().moe_permute_scaled(x, topk_ids, x_scales, num_experts, capacity or 0)
        else:
            result = _torch_ops().moe_permute(x, topk_ids, num_experts, capacity or 0)
        if out is None:
            return result
        if len(out) != len(result):
            raise _C.InvalidArgument(f"tileops_jit.moe_permute: out must hold {len(result)} tensors, got {len(out)}")
        for given, computed in zip(out, result):
            _into(given, computed)
        return out
    if type(num_experts) is not int:
        num_experts = _int(num_experts, "num_experts", "moe_permute")
    if out is None:
        entries = topk_ids.numel()  # tokens x k, the tokens folded from x's leading dims
        rows = num_experts * capacity if masked else entries
        out = (_new(x, (num_experts, capacity, x.shape[-1]) if masked else (entries, x.shape[-1])),
               _new(x, (num_experts,) if masked else (num_experts + 1,), "int32"),
               _new(x, topk_ids.shape, "int32"))
        if x_scales is not None:
            out += (_new(x, (*x_scales.shape[:-1], rows), "float32"),)
    if len(out) != (3 if x_scales is None else 4):
        raise _C.InvalidArgument(f"tileops_jit.moe_permute: out must hold {3 if x_scales is None else 4} tensors "
                                 f"(x_perm or x_masked, expert_info, row_map{'' if x_scales is None else ', perm_scales'}), "
                                 f"got {len(out)}")
    if _torch is not None and isinstance(topk_ids, _torch.Tensor) and topk_ids.numel() == 0:
        out[1].zero_()  # no token: every expert empty, as the grouped GEMM then reads it
        return out
    _C.moe_permute(x, topk_ids, out[0], out[1], out[2], x_scales, out[3] if x_scales is not None else None,
                   num_experts, capacity or 0, stream)
    return out


def moe_unpermute(y, row_map, topk_weights, *, accumulate=False, out=None, stream=None):
    """out[t] = sum_j topk_weights[t, j] * y[row_map[t, j]] (bf16 / fp16, fp32 accumulation): y the
    experts' outputs, [tokens x k, hidden] or the masked [experts, capacity, hidden] (its rows
    folded), row_map and topk_weights [..., k] (int32, float32) as moe_permute and moe_topk give
    them, out [..., hidden]; rows -1 (or out of y) are skipped. accumulate: out += the sum (out= required)."""
    if accumulate and out is None:
        raise _C.InvalidArgument("tileops_jit.moe_unpermute: accumulate adds into out=, which is missing")
    if _compiling():
        if accumulate:
            _torch_ops().moe_unpermute_accumulate(y, row_map, topk_weights, out)
            return out
        return _into(out, _torch_ops().moe_unpermute(y, row_map, topk_weights))
    if type(accumulate) is not bool:
        accumulate = _bool(accumulate, "accumulate", "moe_unpermute")
    if out is None:
        out = _new(y, (*row_map.shape[:-1], y.shape[-1]))
    _C.moe_unpermute(y, row_map, topk_weights, out, accumulate, stream)
    return out


_torch_library = None  # the torch custom ops' module, set by the package when torch is there


def _torch_ops():
    return _torch_library
