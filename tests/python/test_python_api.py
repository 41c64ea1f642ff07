"""The Python module without a GPU: import, argument checks and the errors they raise. Tensors are
DLPack fakes (dlpack_fakes.py): the checks run before any device work, so they need no GPU."""

import os
import subprocess
import sys
import tempfile
import textwrap
import types
import unittest

import tileops_jit as tj
from dlpack_fakes import FakeTensor


def has_gpu():
    try:
        tj.device_info(0)
        return True
    except tj.Error:
        return False


class Released(unittest.TestCase):
    """Every test checks that each DLPack capsule taken was released exactly once."""

    def setUp(self):
        self.taken, self.released = FakeTensor.taken, FakeTensor.released

    def tearDown(self):
        self.assertEqual(FakeTensor.taken - self.taken, FakeTensor.released - self.released)

    def assertRefused(self, pattern, call, *args, **kwargs):
        with self.assertRaisesRegex(tj.InvalidArgument, pattern):
            call(*args, **kwargs)


class ModuleTest(unittest.TestCase):
    def test_version_and_ops(self):
        self.assertRegex(tj.__version__, r"^\d+\.\d+\.\d+$")
        for name in ["rms_norm", "layer_norm", "softmax", "log_softmax", "gelu", "silu", "silu_and_mul", "add",
                     "mul", "matmul", "linear", "flash_attention", "decode_attention", "mla_decode", "embedding",
                     "rope", "sample", "quantize", "gemm_fp8", "gemm_grouped", "moe_topk", "moe_permute", "moe_unpermute",
                     "explain", "prepare"]:
            self.assertTrue(callable(getattr(tj, name)), name)

    def test_error_classes(self):
        self.assertTrue(issubclass(tj.InvalidArgument, ValueError))
        self.assertTrue(issubclass(tj.InvalidArgument, tj.Error))
        for error in [tj.Error, tj.Unsupported, tj.DriverError, tj.CompileError, tj.CacheMiss, tj.FileError]:
            self.assertTrue(issubclass(error, RuntimeError), error)


class TensorArgumentTest(Released):
    def test_cpu_tensor_refused_by_name(self):
        x = FakeTensor((4, 64), device="cpu")
        self.assertRefused(r"argument 'x' is on cpu memory; tileops_jit runs on CUDA tensors", tj.rms_norm, x,
                           FakeTensor((64,)), out=FakeTensor((4, 64)))

    def test_unsupported_dtype_named(self):
        self.assertRefused(r"argument 'x' has DLPack dtype \(code 0, 64 bits", tj.softmax, FakeTensor((4, 8), "int64"),
                           out=FakeTensor((4, 8)))

    def test_not_a_tensor(self):
        self.assertRefused(r"argument 'x' is a int, not a tensor", tj.softmax, 3, out=FakeTensor((4, 8)))
        self.assertRefused(r"argument 'weight' is required \(got None\)", tj.rms_norm, FakeTensor((4, 8)), None,
                           out=FakeTensor((4, 8)))

    def test_out_required_for_other_than_torch(self):
        self.assertRefused(r"out= is required for tensors other than torch's", tj.softmax, FakeTensor((4, 8)))

    def test_devices_must_agree(self):
        self.assertRefused(r"argument 'out' is on CUDA device 1, the call's other tensors on device 0", tj.softmax,
                           FakeTensor((4, 8)), out=FakeTensor((4, 8), device_id=1))

    def test_bad_stream(self):
        self.assertRefused(r"stream must be None, an int handle", tj.softmax, FakeTensor((4, 8)),
                           out=FakeTensor((4, 8)), stream="fast")

    def test_stream_of_another_device(self):
        other = types.SimpleNamespace(cuda_stream=0, device_index=1)  # what a torch.cuda.Stream says
        self.assertRefused(r"stream is on cuda:1, the tensors on cuda:0", tj.softmax, FakeTensor((4, 8)),
                           out=FakeTensor((4, 8)), stream=other)

    def test_rows_need_a_contiguous_last_dim(self):
        x = FakeTensor((8, 4), strides=(1, 8))
        self.assertRefused(r"argument 'x' must be contiguous in its last dim", tj.softmax, x, out=FakeTensor((8, 4)))

    def test_leading_dims_must_collapse(self):
        x = FakeTensor((2, 3, 8), strides=(100, 8, 1))  # batches 100 apart, rows 8: no single row stride
        self.assertRefused(r"argument 'x' \(strides 100, 8, 1\) cannot be viewed as rows of one stride", tj.softmax, x,
                           out=FakeTensor((2, 3, 8)))


class OpArgumentTest(Released):
    """Shape and dtype mismatches reach the op's own checks, which name the argument."""

    def test_rms_norm_weight_length(self):
        self.assertRefused(r"argument 'weight' must be a contiguous vector of 64 elements", tj.rms_norm,
                           FakeTensor((4, 64)), FakeTensor((32,)), out=FakeTensor((4, 64)))

    def test_rms_norm_out_shape(self):
        self.assertRefused(r"rms_norm: out has shape \[5, 64\] where x has \[4, 64\] \(the last dim aside\)",
                           tj.rms_norm, FakeTensor((4, 64)), FakeTensor((64,)), out=FakeTensor((5, 64)))

    def test_same_rows_in_another_shape_refused(self):
        # 2 x 3 rows are 3 x 2 rows too; the shapes still differ.
        x = FakeTensor((2, 3, 8))
        self.assertRefused(r"add: b has shape \[3, 2, 8\] where a has \[2, 3, 8\]", tj.add, x, FakeTensor((3, 2, 8)),
                           out=FakeTensor((2, 3, 8)))
        self.assertRefused(r"softmax: out has shape \[3, 2, 8\] where x has \[2, 3, 8\]", tj.softmax, x,
                           out=FakeTensor((3, 2, 8)))
        self.assertRefused(r"rms_norm: residual has shape \[6, 8\] where x has \[2, 3, 8\]", tj.rms_norm, x,
                           FakeTensor((8,)), residual=FakeTensor((6, 8)), out=FakeTensor((2, 3, 8)),
                           residual_out=FakeTensor((6, 8)))

    def test_rank_zero_tensor(self):
        self.assertRefused(r"argument 'x' has 0 dims, too few for this op", tj.softmax, FakeTensor(()),
                           out=FakeTensor(()))

    def test_rms_norm_residual_pairs(self):
        self.assertRefused(r"residual and residual_out go together", tj._C.rms_norm, FakeTensor((4, 64)),
                           FakeTensor((64,)), FakeTensor((4, 64)), FakeTensor((4, 64)), None)

    def test_layer_norm_bias_dtype(self):
        self.assertRefused(r"argument 'bias' has dtype fp32, expected bf16", tj.layer_norm, FakeTensor((4, 64)),
                           FakeTensor((64,)), FakeTensor((64,), "float32"), out=FakeTensor((4, 64)))

    def test_elementwise_arity(self):
        self.assertRefused(r"silu: takes no b", tj._C.elementwise, tj._C.ElementwiseOp.silu, FakeTensor((4, 8)),
                           FakeTensor((4, 8)), FakeTensor((4, 8)))
        self.assertRefused(r"gelu: approximate must be 'none' or 'tanh'", tj.gelu, FakeTensor((4, 8)), "fast")

    def test_silu_and_mul_needs_an_even_dim(self):
        self.assertRefused(r"the last dim \(7\) must be even", tj.silu_and_mul, FakeTensor((4, 7)))

    def test_matmul_shapes(self):
        a, out = FakeTensor((16, 64)), FakeTensor((16, 32))
        self.assertRefused(r"a's last dim \(64\) must equal b's K \(48\)", tj.matmul, a, FakeTensor((48, 32)), out=out)
        b = FakeTensor((64, 32), strides=(64, 2))
        self.assertRefused(r"b \(strides 64, 2\) must be contiguous in one of its last two dims", tj.matmul, a, b,
                           out=out)
        self.assertRefused(r"activation must be None, 'gelu' or 'silu'", tj.matmul, a, FakeTensor((64, 32)), out=out,
                           activation="relu")

    def test_batched_matmul_c_layout(self):
        a, b, out = FakeTensor((2, 64, 32)), FakeTensor((2, 32, 64)), FakeTensor((2, 64, 64))
        every_other = FakeTensor((2, 64, 64), strides=(8192, 128, 2))  # c[..., ::2] of a [2, 64, 128]
        self.assertRefused(r"argument 'c' must be a bf16 view of shape \[2, 64, 64\] and strides \[8192, 128, 1\]",
                           tj.matmul, a, b, c=every_other, beta=1.0, out=out)
        self.assertRefused(r"with a batched b, c must be \[batch, M, N\], got rank 2", tj.matmul, a, b,
                           c=FakeTensor((64, 64)), beta=1.0, out=out)

    def test_matmul_out_shape(self):
        self.assertRefused(r"argument 'out' must have shape \[16, 32\]", tj.matmul, FakeTensor((16, 64)),
                           FakeTensor((64, 32)), out=FakeTensor((17, 32)))

    def test_flash_attention_ranks_and_heads(self):
        q = FakeTensor((2, 128, 8, 128))
        self.assertRefused(r"k must be \[batch, seqlen, heads, head_dim\] \(rank 4\), got rank 3", tj.flash_attention,
                           q, FakeTensor((128, 8, 128)), FakeTensor((2, 128, 8, 128)), out=FakeTensor((2, 128, 8, 128)))
        self.assertRefused(r"num_heads \(8\) must be a multiple of num_kv_heads \(3\)", tj.flash_attention, q,
                           FakeTensor((2, 128, 3, 128)), FakeTensor((2, 128, 3, 128)), out=FakeTensor((2, 128, 8, 128)))
        self.assertRefused(r"varlen needs max_seqlen_q and max_seqlen_k", tj.flash_attention, FakeTensor((96, 8, 128)),
                           FakeTensor((96, 8, 128)), FakeTensor((96, 8, 128)), out=FakeTensor((96, 8, 128)),
                           cu_seqlens_q=FakeTensor((3,), "int32"), cu_seqlens_k=FakeTensor((3,), "int32"))

    def test_decode_attention_lengths_dtype(self):
        q = FakeTensor((4, 32, 128))
        k = FakeTensor((4, 256, 8, 128))
        self.assertRefused(r"argument 'lengths' has dtype fp32, expected int32", tj.decode_attention, q, k,
                           FakeTensor((4, 256, 8, 128)), FakeTensor((4,), "float32"), out=FakeTensor((4, 32, 128)))

    def test_mla_decode_key_dim(self):
        self.assertRefused(r"argument 'q' must have shape", tj.mla_decode, FakeTensor((2, 16, 512)),
                           FakeTensor((2, 64, 576)), FakeTensor((2,), "int32"), out=FakeTensor((2, 16, 512)))

    def test_embedding_ids_dtype(self):
        self.assertRefused(r"argument 'ids' has dtype bf16, expected int32", tj.embedding, FakeTensor((8,)),
                           FakeTensor((1000, 64)), out=FakeTensor((8, 64)))

    def test_quantize_arguments(self):
        x = FakeTensor((4, 64))
        self.assertRefused(r"scaling must be 'per_token', 'block_1x128' or 'per_tensor', got 'per_row'", tj.quantize, x,
                           "per_row")
        self.assertRefused(r"argument 'out' has dtype bf16, expected fp8_e4m3", tj.quantize, x, out=FakeTensor((4, 64)),
                           scales=FakeTensor((4,), "float32"))
        self.assertRefused(r"dtype must be bf16 or fp16, got fp32", tj.quantize, FakeTensor((4, 64), "float32"),
                           out=FakeTensor((4, 64)), scales=FakeTensor((4,), "float32"))
        self.assertRefused(r"scale \(a static scale\) applies to per_tensor scaling only", tj.quantize, x,
                           scale=FakeTensor((1,), "float32"), out=FakeTensor((4, 64)))
        self.assertRefused(r"block_1x128 scales must be \[ceil\(cols / 128\), rows\]", tj.quantize, x, "block_1x128",
                           out=FakeTensor((4, 64)), scales=FakeTensor((4,), "float32"))

    def test_moe_topk_arguments(self):
        logits, pair = FakeTensor((4, 64)), (FakeTensor((4, 8), "float32"), FakeTensor((4, 8), "int32"))
        self.assertRefused(r"scoring must be 'softmax' or 'sigmoid', got 'relu'", tj.moe_topk, logits, 8, "relu")
        self.assertRefused(r"k must be in \[1, 32\], got 40", tj.moe_topk, logits, 40, out=pair)
        self.assertRefused(r"experts must be in \[1, 512\], got 1000", tj.moe_topk, FakeTensor((4, 1000)), 8, out=pair)
        self.assertRefused(r"correction_bias applies to sigmoid scoring only", tj.moe_topk, logits, 8,
                           correction_bias=FakeTensor((64,), "float32"), out=pair)
        self.assertRefused(r"experts = 64 must split into n_group = 5 groups", tj.moe_topk, logits, 8, "sigmoid",
                           n_group=5, topk_group=2, out=pair)
        self.assertRefused(r"argument 'topk_ids' has dtype fp32, expected int32", tj.moe_topk, logits, 8,
                           out=(FakeTensor((4, 8), "float32"), FakeTensor((4, 8), "float32")))
        self.assertRefused(r"argument 'topk_weights' must have shape \[4, 8\]", tj.moe_topk, logits, 8,
                           out=(FakeTensor((4, 6), "float32"), FakeTensor((4, 8), "int32")))

    def test_moe_permute_and_unpermute_arguments(self):
        x, ids = FakeTensor((4, 64)), FakeTensor((4, 2), "int32")
        outs = (FakeTensor((8, 64)), FakeTensor((17,), "int32"), FakeTensor((4, 2), "int32"))
        self.assertRefused(r"argument 'topk_ids' has dtype bf16, expected int32", tj.moe_permute, x, FakeTensor((4, 2)),
                           16, out=outs)
        self.assertRefused(r"experts must be in \[1, 512\], got 1000", tj.moe_permute, x, ids, 1000, out=outs)
        self.assertRefused(r"argument 'expert_offsets' must be a contiguous vector of 17", tj.moe_permute, x, ids, 16,
                           out=(outs[0], FakeTensor((16,), "int32"), outs[2]))
        self.assertRefused(r"x_masked must be \[experts, capacity, hidden\] \(rank 3\), got rank 2", tj.moe_permute,
                           x, ids, 16, capacity=4, out=outs)
        self.assertRefused(r"dtype must be bf16, fp16 or fp8_e4m3, got fp32", tj.moe_permute,
                           FakeTensor((4, 64), "float32"), ids, 16, out=outs)
        # Scales: four outputs, ranks that agree, fp8 rows only (these fakes have no fp8 dtype: bf16
        # rows are refused for it, after the shape checks).
        self.assertRefused(r"out must hold 4 tensors", tj.moe_permute, x, ids, 16, x_scales=FakeTensor((4,), "float32"),
                           out=outs)
        self.assertRefused(r"x_scales and perm_scales must both be", tj.moe_permute, x, ids, 16,
                           x_scales=FakeTensor((1, 4), "float32"), out=(*outs, FakeTensor((8,), "float32")))
        self.assertRefused(r"scale_blocks needs fp8_e4m3 rows, x is bf16", tj.moe_permute, x, ids, 16,
                           x_scales=FakeTensor((4,), "float32"), out=(*outs, FakeTensor((8,), "float32")))
        self.assertRefused(r"scale_blocks must be 0 \(no scales\), 1 \(a scale a token\) or 5", tj.moe_permute,
                           FakeTensor((4, 640)), ids, 16, x_scales=FakeTensor((3, 4), "float32"),
                           out=(FakeTensor((8, 640)), outs[1], outs[2], FakeTensor((3, 8), "float32")))
        y, row_map, weights = FakeTensor((8, 64)), FakeTensor((4, 2), "int32"), FakeTensor((4, 2), "float32")
        self.assertRefused(r"accumulate adds into out=, which is missing", tj.moe_unpermute, y, row_map, weights,
                           accumulate=True)
        self.assertRefused(r"dtype must be bf16 or fp16, got fp32", tj.moe_unpermute, FakeTensor((8, 64), "float32"),
                           row_map, weights, out=FakeTensor((4, 64), "float32"))
        self.assertRefused(r"argument 'topk_weights' has dtype bf16, expected fp32", tj.moe_unpermute, y, row_map,
                           FakeTensor((4, 2)), out=FakeTensor((4, 64)))

    def test_gemm_fp8_arguments(self):
        # bf16 fakes stand in for the codes (these DLPack fakes have no fp8 dtype): the checks up to
        # the op's dtype check of A run on them.
        a, b, out = FakeTensor((16, 256)), FakeTensor((32, 256)), FakeTensor((16, 32))
        one = FakeTensor((1,), "float32")
        self.assertRefused(r"scaling must be 'tensor', 'row' or 'block', got 'per_row'", tj.gemm_fp8, a, b, one, one,
                           "per_row", out=out)
        self.assertRefused(r"activation must be None, 'gelu' or 'silu', got 'relu'", tj.gemm_fp8, a, b, one, one,
                           activation="relu", out=out)
        self.assertRefused(r"argument 'a' has dtype bf16, expected fp8_e4m3", tj.gemm_fp8, a, b, one, one, out=out)
        self.assertRefused(r"a's last dim \(256\) must equal b's K \(128\)", tj.gemm_fp8, a, FakeTensor((32, 128)), one,
                           one, out=out)
        self.assertRefused(r"b must be \[N, K\] or \[batch, N, K\], got rank 1", tj.gemm_fp8, a, FakeTensor((256,)),
                           one, one, out=out)
        self.assertRefused(r"k = 40 is not a multiple of 16", tj.gemm_fp8, FakeTensor((16, 40)), FakeTensor((32, 40)),
                           one, one, out=out)
        self.assertRefused(r"beta = 2 needs C", tj.gemm_fp8, a, b, one, one, beta=2.0, out=out)
        self.assertRefused(r"out_dtype must be", tj.gemm_fp8, a, b, one, one, out=FakeTensor((16, 32), "int32"))
        self.assertRefused(r"batch = 2 needs per_tensor scaling", tj.gemm_fp8, FakeTensor((2, 16, 256)),
                           FakeTensor((2, 32, 256)), FakeTensor((16,), "float32"), FakeTensor((32,), "float32"), "row",
                           out=FakeTensor((2, 16, 32)))

    def test_gemm_grouped_arguments(self):
        a, b, out = FakeTensor((64, 256)), FakeTensor((4, 256, 128)), FakeTensor((64, 128))
        offsets, counts = FakeTensor((5,), "int32"), FakeTensor((4,), "int32")
        self.assertRefused(r"give exactly one of offsets= \(contiguous groups\) and counts=", tj.gemm_grouped, a, b,
                           out=out)
        self.assertRefused(r"give exactly one of", tj.gemm_grouped, a, b, offsets, counts, out=out)
        self.assertRefused(r"activation must be None, 'gelu' or 'silu', got 'relu'", tj.gemm_grouped, a, b, offsets,
                           activation="relu", out=out)
        self.assertRefused(r"b must be \[groups, K, N\], got rank 2", tj.gemm_grouped, a, FakeTensor((256, 128)),
                           offsets, out=out)
        self.assertRefused(r"a's last dim \(256\) must equal b's K \(128\)", tj.gemm_grouped, a,
                           FakeTensor((4, 128, 128)), offsets, out=out)
        self.assertRefused(r"counts takes a and out of rank 3", tj.gemm_grouped, a, b, counts=counts, out=out)
        self.assertRefused(r"argument 'group_rows'", tj.gemm_grouped, a, b, counts, out=out)

    def test_gemm_fp8_block_scale_layouts(self):
        a, b, out = FakeTensor((16, 256)), FakeTensor((200, 256)), FakeTensor((16, 200))
        scales_b = FakeTensor((2, 2), "float32")  # [ceil(N / 128), ceil(K / 128)]
        # [M, ceil(K / 128)] row-major holds as many scales as [ceil(K / 128), M], in another order.
        self.assertRefused(r"block scales_a must be \[ceil\(K / 128\), M\] = \[2, 16\] \(contiguous\), or its "
                           r"transpose \[16, 2\] with strides \[1, 16\]; got shape \[16, 2\], strides \[2, 1\]",
                           tj.gemm_fp8, a, b, FakeTensor((16, 2), "float32"), scales_b, "block", out=out)
        self.assertRefused(r"block scales_b must be \[ceil\(N / 128\), ceil\(K / 128\)\] = \[2, 2\] \(contiguous\); "
                           r"got rank 1", tj.gemm_fp8, a, b, FakeTensor((2, 16), "float32"),
                           FakeTensor((4,), "float32"), "block", out=out)
        # Both layouts of scales_a pass to the op's own checks (here: A's dtype).
        for scales_a in [FakeTensor((2, 16), "float32"), FakeTensor((16, 2), "float32", strides=(1, 16))]:
            self.assertRefused(r"argument 'a' has dtype bf16, expected fp8_e4m3", tj.gemm_fp8, a, b, scales_a, scales_b,
                               "block", out=out)

    def test_rope_append_needs_all_four(self):
        q, k = FakeTensor((8, 4, 64)), FakeTensor((8, 2, 64))
        self.assertRefused(r"needs v, slots, k_cache and v_cache together", tj.rope, q, k, FakeTensor((8,), "int32"),
                           v=FakeTensor((8, 2, 64)), q_out=FakeTensor((8, 4, 64)), k_out=FakeTensor((8, 2, 64)))
        self.assertRefused(r"style must be 'neox', 'gptj' or 'none'", tj.rope, q, k, FakeTensor((8,), "int32"),
                           style="llama")
        self.assertRefused(r"scaling type must be 'none', 'linear' or 'llama3', got 'yarn'", tj.rope, q, k,
                           FakeTensor((8,), "int32"), scaling=tj.RopeScaling("yarn", 4.0))

    def test_sample_parameters_together(self):
        # _C takes all five or none; the package fills missing ones for torch tensors only (below).
        self.assertRefused(r"temperature, top_k, top_p, min_p and offsets go together", tj._C.sample,
                           FakeTensor((2, 1000), "float32"), FakeTensor((2,), "int32"), FakeTensor((2,), "float32"))
        self.assertRefused(r"sample: top_k, top_p, min_p, offsets not given: with tensors other than torch's \(a "
                           r"FakeTensor here\) the package cannot make them", tj.sample,
                           FakeTensor((2, 1000), "float32"), temperature=FakeTensor((2,), "float32"),
                           out=FakeTensor((2,), "int32"))


@unittest.skipIf(has_gpu(), "a GPU is present: the fakes' addresses would be used")
class WithoutGpuTest(Released):
    def test_well_formed_call_raises_a_runtime_error(self):
        with self.assertRaises(RuntimeError) as caught:
            tj.rms_norm(FakeTensor((4, 64)), FakeTensor((64,)), out=FakeTensor((4, 64)))
        self.assertNotIsInstance(caught.exception, ValueError)


def run_python(code, env=None, torch_dir=None):
    """Runs `code` in a fresh interpreter with the package (and a stand-in torch from torch_dir) on
    its path; returns (exit code, stdout + stderr)."""
    paths = [p for p in [torch_dir, os.path.dirname(os.path.abspath(__file__)), *sys.path] if p]
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **(env or {}))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout + done.stderr


class StandInDtype:
    def __init__(self, name):
        self.name = name


class StandInTensor(FakeTensor):
    """A torch.Tensor stand-in for the package's Python side (the module reads it through DLPack,
    since torch is not what it is): records the outputs the package makes with it."""

    made = []  # (how, shape, value, dtype name)

    def _make(self, how, shape, value, dtype):
        name = getattr(dtype, "name", dtype)
        StandInTensor.made.append((how, tuple(shape), value, name))
        return StandInTensor(shape, name)

    def new_empty(self, shape, dtype):
        return self._make("empty", shape, None, dtype)

    def new_zeros(self, shape, dtype):
        return self._make("zeros", shape, 0, dtype)

    def new_full(self, shape, value, dtype):
        return self._make("full", shape, value, dtype)


class WithStandInTorch(Released):
    """The package's Python side sees StandInTensor as torch.Tensor."""

    def setUp(self):
        super().setUp()
        self.saved_torch = tj.ops._torch
        dtypes = {name: StandInDtype(name) for name in ["float32", "float16", "bfloat16", "int32", "float8_e4m3fn"]}
        tj.ops._torch = types.SimpleNamespace(Tensor=StandInTensor, dtype=StandInDtype, **dtypes)
        StandInTensor.made = []

    def tearDown(self):
        tj.ops._torch = self.saved_torch
        super().tearDown()


class SampleParametersTest(WithStandInTorch):
    def test_missing_parameters_take_neutral_values_on_the_logits_device(self):
        logits = StandInTensor((2, 1000), "float32")
        # A float32 out stops the call at the op's check of it, after the parameters passed theirs.
        self.assertRefused(r"argument 'out' has dtype fp32, expected int32", tj.sample, logits,
                           temperature=FakeTensor((2,), "float32"), out=FakeTensor((2,), "float32"))
        self.assertEqual(StandInTensor.made, [("full", (2,), 0, "int32"), ("full", (2,), 1.0, "float32"),
                                              ("full", (2,), 0.0, "float32"), ("full", (2,), 0, "int32")])
        StandInTensor.made = []
        self.assertRefused(r"argument 'out' has dtype fp32", tj.sample, logits, top_p=FakeTensor((2,), "float32"),
                           out=FakeTensor((2,), "float32"))
        self.assertEqual([(value, dtype) for _, _, value, dtype in StandInTensor.made],
                         [(1.0, "float32"), (0, "int32"), (0.0, "float32"), (0, "int32")])


class GemmGroupedOutputTest(WithStandInTorch):
    def test_an_allocated_out_is_zeros_as_under_compile(self):
        a, b = StandInTensor((64, 256)), FakeTensor((4, 256, 128))
        # float32 offsets stop the call at the op's checks, after out was made.
        self.assertRefused(r"argument 'group_rows' has dtype fp32, expected int32", tj.gemm_grouped, a, b,
                           FakeTensor((5,), "float32"))
        self.assertEqual(StandInTensor.made, [("zeros", (64, 128), 0, "bfloat16")])


class Result(str):
    """A custom op's result as the stand-ins below name it, with a tensor's shape and dtype."""

    shape, dtype = (4, 8), "bfloat16"


class Recorder:
    """A tensor stand-in for the torch.compile path: records what is copied into it."""

    def __init__(self, name, shape=Result.shape, dtype=Result.dtype):
        self.name = name
        self.shape, self.dtype = shape, dtype
        self.copied = []

    def copy_(self, other):
        self.copied.append(other)
        return self


class StandInCustomOps:
    """tileops_jit.torch_library's functions, returning named results."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, op):
        def call(*args):
            self.calls.append(op)
            if op in ("gemm_grouped_out", "gemm_fp8_grouped_out", "moe_unpermute_accumulate"):
                return None
            if op in ("flash_attention", "decode_attention", "mla_decode", "rope", "quantize", "moe_topk"):
                return Result(f"{op}[0]"), Result(f"{op}[1]")
            if op == "rms_norm" and args[3] is not None:
                return Result("y"), Result("h")
            if op == "moe_permute":
                return Result("x_perm"), Result("offsets"), Result("row_map")
            return Result(f"{op}()")
        return call


class CompiledOutputsTest(unittest.TestCase):
    """Under torch.compile the functions call the custom ops, which allocate; a given out= (and
    residual_out=, q_out=, k_out=, scales=, lse=) receives the result, as it would eagerly."""

    def setUp(self):
        self.saved = tj.ops._compiling, tj.ops._torch_library
        self.ops = StandInCustomOps()
        tj.ops._compiling, tj.ops._torch_library = (lambda: True), self.ops

    def tearDown(self):
        tj.ops._compiling, tj.ops._torch_library = self.saved

    def assertInto(self, returned, out, value):
        self.assertIs(returned, out)
        self.assertEqual(out.copied, [value])

    def test_out_is_written(self):
        x = object()
        for call, op in [(lambda out: tj.rms_norm(x, x, out=out), "rms_norm()"),
                         (lambda out: tj.layer_norm(x, x, x, out=out), "layer_norm()"),
                         (lambda out: tj.softmax(x, out=out), "softmax()"),
                         (lambda out: tj.silu(x, out=out), "elementwise()"),
                         (lambda out: tj.matmul(x, x, out=out), "gemm()"),
                         (lambda out: tj.flash_attention(x, x, x, out=out), "flash_attention[0]"),
                         (lambda out: tj.decode_attention(x, x, x, x, out=out), "decode_attention[0]"),
                         (lambda out: tj.mla_decode(x, x, x, out=out), "mla_decode[0]"),
                         (lambda out: tj.embedding(x, x, out=out), "embedding()"),
                         (lambda out: tj.sample(x, out=out), "sample()"),
                         (lambda out: tj.gemm_fp8(x, x, x, x, out=out), "gemm_fp8()"),
                         (lambda out: tj.moe_unpermute(x, x, x, out=out), "moe_unpermute()")]:
            out = Recorder("out")
            self.assertInto(call(out), out, op)
        # Without out, the custom op's result.
        self.assertEqual(tj.softmax(x), "softmax()")

    def test_out_of_another_shape_or_dtype_refused(self):
        # copy_ would broadcast or cast into it; run eagerly, the op refuses it.
        x = object()
        with self.assertRaisesRegex(tj.InvalidArgument, r"out= has shape \[2, 4, 8\] and dtype bfloat16; the result "
                                                        r"has \[4, 8\] and bfloat16"):
            tj.softmax(x, out=Recorder("out", (2, 4, 8)))
        with self.assertRaisesRegex(tj.InvalidArgument, r"dtype float32; the result has \[4, 8\] and bfloat16"):
            tj.silu(x, out=Recorder("out", dtype="float32"))

    def test_residual_out_updated_in_place(self):
        x, residual, out = object(), Recorder("residual"), Recorder("out")
        y, h = tj.rms_norm(x, x, residual=residual, residual_out=residual, out=out)
        self.assertInto(y, out, "y")
        self.assertInto(h, residual, "h")
        with self.assertRaisesRegex(tj.InvalidArgument, r"residual and residual_out go together"):
            tj.rms_norm(x, x, residual_out=Recorder("r"))

    def test_lse_q_out_k_out_scales_and_pairs(self):
        x = object()
        out, lse = Recorder("out"), Recorder("lse")
        o, l = tj.flash_attention(x, x, x, return_lse=True, out=out, lse=lse)
        self.assertInto(o, out, "flash_attention[0]")
        self.assertInto(l, lse, "flash_attention[1]")
        q_out, k_out = Recorder("q_out"), Recorder("k_out")
        q, k = tj.rope(x, x, x, q_out=q_out, k_out=k_out)
        self.assertInto(q, q_out, "rope[0]")
        self.assertInto(k, k_out, "rope[1]")
        codes, scales = Recorder("q"), Recorder("scales")
        got_codes, got_scales = tj.quantize(x, out=codes, scales=scales)
        self.assertInto(got_codes, codes, "quantize[0]")
        self.assertInto(got_scales, scales, "quantize[1]")
        static = object()
        self.assertIs(tj.quantize(x, "per_tensor", scale=static)[1], static)
        pair = (Recorder("weights"), Recorder("ids"))
        weights, ids = tj.moe_topk(x, 2, out=pair)
        self.assertInto(weights, pair[0], "moe_topk[0]")
        self.assertInto(ids, pair[1], "moe_topk[1]")
        triple = (Recorder("x_perm"), Recorder("offsets"), Recorder("row_map"))
        self.assertIs(tj.moe_permute(x, x, 8, out=triple), triple)
        self.assertEqual([t.copied for t in triple], [["x_perm"], ["offsets"], ["row_map"]])

    def test_gemm_grouped_writes_a_given_out_in_place(self):
        x, out = object(), Recorder("out")
        self.assertIs(tj.gemm_grouped(x, x, x, out=out), out)
        self.assertIs(tj.gemm_grouped(x, x, x, scales_a=x, scales_b=x, out=out), out)
        self.assertEqual(self.ops.calls, ["gemm_grouped_out", "gemm_fp8_grouped_out"])
        self.assertEqual(out.copied, [])  # the mutating custom ops wrote it, leaving other rows alone


class TorchVersionTest(unittest.TestCase):
    """A torch without the custom-op API (< 2.4): the package imports and runs eagerly."""

    def test_import_with_an_old_torch(self):
        for version, body in [("2.1.0", "library = types.ModuleType('torch.library')\n"),
                              ("2.3.0", "library = types.ModuleType('torch.library')\n"
                                        "compiler = types.SimpleNamespace(is_compiling=lambda: True)\n")]:
            with tempfile.TemporaryDirectory() as root:
                os.mkdir(os.path.join(root, "torch"))
                with open(os.path.join(root, "torch", "__init__.py"), "w") as f:
                    f.write(f"import types\n__version__ = {version!r}\nclass Tensor:\n    pass\n{body}")
                code, output = run_python("""
                    import tileops_jit as tj
                    from dlpack_fakes import FakeTensor
                    assert tj.ops._torch is not None and tj.ops._torch_library is None
                    assert not tj.ops._compiling()
                    out = FakeTensor((0, 8))
                    assert tj.softmax(FakeTensor((0, 8)), out=out) is out
                    print("imported")
                """, torch_dir=root)
                self.assertEqual((code, output.strip()), (0, "imported"), version)


class OpCacheSizeTest(unittest.TestCase):
    def test_environment_variable(self):
        code, output = run_python("import tileops_jit as tj; print(tj._C.op_cache_info()['capacity'])",
                                  env={"TILEOPS_PY_OP_CACHE_SIZE": "7"})
        self.assertEqual((code, output.strip()), (0, "7"))
        code, output = run_python("import tileops_jit as tj; print(tj._C.op_cache_info()['capacity'])",
                                  env={"TILEOPS_PY_OP_CACHE_SIZE": ""})
        self.assertEqual((code, output.strip()), (0, "1024"))
        for bad in ["0", "-3", "lots", "1.5"]:
            code, output = run_python("import tileops_jit", env={"TILEOPS_PY_OP_CACHE_SIZE": bad})
            self.assertNotEqual(code, 0, bad)
            self.assertIn(f"TILEOPS_PY_OP_CACHE_SIZE must be a whole number of ops, at least 1 (default 1024), "
                          f"got {bad!r}", output)

    def test_capacity_refused_below_one(self):
        with self.assertRaisesRegex(tj.InvalidArgument, r"capacity must be at least 1"):
            tj._C.set_op_cache_capacity(0)


@unittest.skipIf(has_gpu(), "a GPU is present: the fakes' addresses would be used")
class OpCacheTest(Released):
    """Calls that pass every check build and cache their op, then stop where the driver is missing."""

    def setUp(self):
        super().setUp()
        self.saved_capacity = tj._C.op_cache_info()["capacity"]

    def tearDown(self):
        tj._C.set_op_cache_capacity(self.saved_capacity)
        super().tearDown()

    def run_rms_norm(self, eps, out_rows=4):
        with self.assertRaises(tj.Unsupported):  # past the checks: the driver is missing
            tj.rms_norm(FakeTensor((4, 64)), FakeTensor((64,)), eps, out=FakeTensor((out_rows, 64)))

    def test_least_recently_used_evicted_at_the_bound(self):
        p0, p1, p2, p3 = [1e-3 + i * 1e-6 for i in range(4)]  # rms_norm problems no other test makes
        tj._C.set_op_cache_capacity(3)
        for eps in [p0, p1, p2]:
            self.run_rms_norm(eps)
        info = tj._C.op_cache_info()
        self.assertEqual(info["size"], 3)
        evictions = info["evictions"]
        self.run_rms_norm(p0)  # a hit: p0 is now the most recently used, p1 the least
        self.assertEqual(tj._C.op_cache_info()["evictions"], evictions)
        self.run_rms_norm(p3)  # evicts p1
        self.assertEqual(tj._C.op_cache_info()["evictions"], evictions + 1)
        self.run_rms_norm(p0)  # still there
        self.assertEqual(tj._C.op_cache_info()["evictions"], evictions + 1)
        self.run_rms_norm(p1)  # built again, evicting p2
        self.run_rms_norm(p3)  # still there
        info = tj._C.op_cache_info()
        self.assertEqual((info["size"], info["evictions"]), (3, evictions + 2))
        self.assertGreaterEqual(info["retired"], 2)  # freed at a run outside a graph capture (none here)
        tj._C.set_op_cache_capacity(1)  # shrinking evicts down to the bound
        self.assertEqual(tj._C.op_cache_info()["size"], 1)

    def test_an_op_that_fails_its_checks_is_not_cached(self):
        size = tj._C.op_cache_info()["size"]
        with self.assertRaisesRegex(tj.InvalidArgument, r"argument 'weight' must be a contiguous vector of 64"):
            tj.rms_norm(FakeTensor((4, 64)), FakeTensor((32,)), 2e-3, out=FakeTensor((4, 64)))
        with self.assertRaisesRegex(tj.InvalidArgument, r"k must be in \[1, 32\], got 40"):  # the problem itself
            tj.moe_topk(FakeTensor((4, 64)), 40, out=(FakeTensor((4, 40), "float32"), FakeTensor((4, 40), "int32")))
        self.assertEqual(tj._C.op_cache_info()["size"], size)
        self.run_rms_norm(2e-3)
        self.assertEqual(tj._C.op_cache_info()["size"], size + 1)

    def test_fp8_dlpack_tensors_pass(self):
        e4m3 = "float8_e4m3fn"
        with self.assertRaises(tj.Unsupported):
            tj.gemm_fp8(FakeTensor((16, 256), e4m3), FakeTensor((32, 256), e4m3), FakeTensor((1,), "float32"),
                        FakeTensor((1,), "float32"), out=FakeTensor((16, 32)))

    def test_sampling_parameters_given_together_pass(self):
        with self.assertRaises(tj.Unsupported):
            tj.sample(FakeTensor((2, 1000), "float32"), temperature=FakeTensor((2,), "float32"),
                      top_k=FakeTensor((2,), "int32"), top_p=FakeTensor((2,), "float32"),
                      min_p=FakeTensor((2,), "float32"), offsets=FakeTensor((2,), "int32"), seed=(1 << 64) - 1,
                      out=FakeTensor((2,), "int32"))


class DLPackFp8Test(Released):
    def test_e4m3fn_is_read_and_e5m2_refused(self):
        # q of fp8 passes its dtype check: the scales' shape is what is refused.
        self.assertRefused(r"argument 'scales' must be a contiguous vector of 4", tj.quantize, FakeTensor((4, 64)),
                           out=FakeTensor((4, 64), "float8_e4m3fn"), scales=FakeTensor((5,), "float32"))
        self.assertRefused(r"argument 'a' has DLPack dtype \(code 12, 8 bits, 1 lanes\); supported: .*float8_e4m3fn",
                           tj.gemm_fp8, FakeTensor((16, 256), "float8_e5m2"), FakeTensor((32, 256), "float8_e4m3fn"),
                           FakeTensor((1,), "float32"), FakeTensor((1,), "float32"), out=FakeTensor((16, 32)))


class ScalarArgumentTest(Released):
    """A scalar of the wrong type is an InvalidArgument naming it, not pybind's TypeError."""

    def test_refused_by_name(self):
        x, out = FakeTensor((4, 8)), FakeTensor((4, 8))
        self.assertRefused(r"stream must be a stream handle, an int in \[0, 2\^64\); got -1", tj.softmax, x, out=out,
                           stream=-1)
        self.assertRefused(r"stream.cuda_stream must be a stream handle", tj.softmax, x, out=out,
                           stream=types.SimpleNamespace(cuda_stream=-5))
        self.assertRefused(r"sample: seed must be an int in \[0, 2\^64\), got int -1", tj.sample,
                           FakeTensor((2, 1000), "float32"), seed=-1, out=FakeTensor((2,), "int32"))
        self.assertRefused(r"sample: seed must be an int in \[0, 2\^64\), got float 1.5", tj.sample,
                           FakeTensor((2, 1000), "float32"), seed=1.5, out=FakeTensor((2,), "int32"))
        pair = (FakeTensor((4, 2), "float32"), FakeTensor((4, 2), "int32"))
        self.assertRefused(r"moe_topk: k must be an int, got float 2.0", tj.moe_topk, FakeTensor((4, 64)), 2.0, out=pair)
        self.assertRefused(r"moe_topk: renormalize must be a bool, got str 'yes'", tj.moe_topk, FakeTensor((4, 64)), 2,
                           renormalize="yes", out=pair)
        q = FakeTensor((96, 8, 128))
        self.assertRefused(r"flash_attention: max_seqlen_q must be an int, got float 16.0", tj.flash_attention, q, q, q,
                           out=q, cu_seqlens_q=FakeTensor((3,), "int32"), cu_seqlens_k=FakeTensor((3,), "int32"),
                           max_seqlen_q=16.0, max_seqlen_k=16)
        self.assertRefused(r"flash_attention: causal must be a bool, got str", tj.flash_attention, q, q, q, out=q,
                           causal="no")
        self.assertRefused(r"rms_norm: eps must be a number, got str '1e-5'", tj.rms_norm, x, FakeTensor((8,)), "1e-5",
                           out=out)
        self.assertRefused(r"matmul: alpha must be a number, got NoneType", tj.matmul, x, FakeTensor((8, 8)),
                           alpha=None, out=out)
        self.assertRefused(r"rope: scaling.factor must be a number, got str", tj.rope, FakeTensor((8, 4, 64)),
                           FakeTensor((8, 2, 64)), FakeTensor((8,), "int32"), scaling=("linear", "x"))
        self.assertRefused(r"moe_permute: num_experts must be an int, got float", tj.moe_permute, x,
                           FakeTensor((4, 2), "int32"), 16.0, out=(x, x, x))

    def test_ints_past_int64_refused_by_name_on_the_fast_path(self):
        big = 1 << 63
        q, k = FakeTensor((4, 32, 128)), FakeTensor((4, 256, 8, 128))
        lengths = FakeTensor((4,), "int32")
        self.assertRefused(r"decode_attention: max_kv_len = 9223372036854775808 does not fit in a 64-bit int",
                           tj.decode_attention, q, k, k, lengths, max_kv_len=big, out=q)
        self.assertRefused(r"decode_attention: window_left = -9223372036854775809 does not fit", tj.decode_attention,
                           q, k, k, lengths, window_left=-big - 1, out=q)
        self.assertRefused(r"mla_decode: max_kv_len = 9223372036854775808 does not fit", tj.mla_decode,
                           FakeTensor((2, 16, 576)), FakeTensor((2, 64, 576)), FakeTensor((2,), "int32"),
                           max_kv_len=big, out=FakeTensor((2, 16, 512)))
        fq = FakeTensor((96, 8, 128))
        self.assertRefused(r"flash_attention: max_seqlen_k = 18446744073709551616 does not fit", tj.flash_attention,
                           fq, fq, fq, out=fq, cu_seqlens_q=FakeTensor((3,), "int32"),
                           cu_seqlens_k=FakeTensor((3,), "int32"), max_seqlen_q=16, max_seqlen_k=1 << 64)
        self.assertRefused(r"rope: rotary_dim = 9223372036854775808 does not fit", tj.rope, FakeTensor((8, 4, 64)),
                           FakeTensor((8, 2, 64)), FakeTensor((8,), "int32"), rotary_dim=big)
        pair = (FakeTensor((4, 2), "float32"), FakeTensor((4, 2), "int32"))
        self.assertRefused(r"moe_topk: topk_group = 9223372036854775808 does not fit", tj.moe_topk,
                           FakeTensor((4, 64)), 2, n_group=1, topk_group=big, out=pair)
        # -2**63 itself fits: it takes the slow path, and the call goes on (to fail later without a GPU).
        with self.assertRaises(Exception) as raised:
            tj.decode_attention(q, k, k, lengths, window_left=-big, out=FakeTensor((4, 32, 128)))
        self.assertNotIn("does not fit", str(raised.exception))

    def test_floats_outside_float32_refused_by_name(self):
        x, out = FakeTensor((4, 8)), FakeTensor((4, 8))
        q, k = FakeTensor((4, 32, 128)), FakeTensor((4, 256, 8, 128))
        lengths = FakeTensor((4,), "int32")
        # A scale that rounds to 0 would silently become the default 1 / sqrt(head_dim).
        self.assertRefused(r"decode_attention: scale = 1e-50 is out of float32's range", tj.decode_attention, q, k, k,
                           lengths, scale=1e-50, out=q)
        self.assertRefused(r"decode_attention: k_scale = 1e\+39 is out of float32's range", tj.decode_attention, q, k,
                           k, lengths, k_scale=1e39, out=q)
        fq = FakeTensor((2, 128, 8, 128))
        self.assertRefused(r"flash_attention: scale = -1e-60 is out of float32's range", tj.flash_attention, fq, fq, fq,
                           scale=-1e-60, out=fq)
        self.assertRefused(r"mla_decode: scale = 1e-300 is out", tj.mla_decode, FakeTensor((2, 16, 576)),
                           FakeTensor((2, 64, 576)), FakeTensor((2,), "int32"), scale=1e-300,
                           out=FakeTensor((2, 16, 512)))
        self.assertRefused(r"rms_norm: eps = 1e-50 is out of float32's range", tj.rms_norm, x, FakeTensor((8,)), 1e-50,
                           out=out)
        self.assertRefused(r"layer_norm: eps = 1e\+40 is out", tj.layer_norm, x, FakeTensor((8,)), FakeTensor((8,)),
                           1e40, out=out)
        self.assertRefused(r"matmul: alpha = 1e-50 is out", tj.matmul, x, FakeTensor((8, 8)), alpha=1e-50, out=out)
        pair = (FakeTensor((4, 2), "float32"), FakeTensor((4, 2), "int32"))
        self.assertRefused(r"moe_topk: routed_scaling_factor = 1e\+300 is out", tj.moe_topk, FakeTensor((4, 64)), 2,
                           routed_scaling_factor=1e300, out=pair)
        # A float32 subnormal is no rounding to 0: the call goes on (to fail later without a GPU).
        with self.assertRaises(Exception) as raised:
            tj.decode_attention(q, k, k, lengths, scale=1e-40, out=FakeTensor((4, 32, 128)))
        self.assertNotIn("float32's range", str(raised.exception))

    def test_op_errors_name_the_python_arguments(self):
        x = FakeTensor((4, 8))
        self.assertRefused(r"argument 'residual_out' has dtype fp32", tj.rms_norm, x, FakeTensor((8,)), residual=x,
                           out=FakeTensor((4, 8)), residual_out=FakeTensor((4, 8), "float32"))
        self.assertRefused(r"argument 'c' has dtype fp32", tj.matmul, x, FakeTensor((8, 8)),
                           c=FakeTensor((4, 8), "float32"), beta=1.0, out=FakeTensor((4, 8)))
        cache = FakeTensor((4, 256, 8, 128))
        self.assertRefused(r"argument 'v_cache' has dtype fp32", tj.decode_attention, FakeTensor((4, 32, 128)), cache,
                           FakeTensor((4, 256, 8, 128), "float32"), FakeTensor((4,), "int32"),
                           out=FakeTensor((4, 32, 128)))
        self.assertRefused(r"argument 'out' has dtype bf16, expected fp8_e4m3", tj.quantize, FakeTensor((4, 128)),
                           out=FakeTensor((4, 128)), scales=FakeTensor((4,), "float32"))

    def test_integers_of_other_types_pass(self):
        class Index:
            def __index__(self):
                return 40
        # Reaches the op's own check of k.
        self.assertRefused(r"k must be in \[1, 32\], got 40", tj.moe_topk, FakeTensor((4, 64)), Index(),
                           out=(FakeTensor((4, 40), "float32"), FakeTensor((4, 40), "int32")))


class MoePermuteCapacityTest(Released):
    def test_capacity_below_one_refused(self):
        x, ids = FakeTensor((4, 64)), FakeTensor((4, 2), "int32")
        outs = (FakeTensor((16, 0, 64)), FakeTensor((16,), "int32"), FakeTensor((4, 2), "int32"))
        for capacity in [0, -4]:
            self.assertRefused(rf"moe_permute: capacity must be at least 1 \(or None: the contiguous layout\), got "
                               rf"{capacity}", tj.moe_permute, x, ids, 16, capacity=capacity, out=outs)
        self.assertRefused(r"capacity must be at least 1 \(0 here: the contiguous layout\), got -4", tj._C.moe_permute,
                           x, ids, *outs, None, None, 16, -4)


class EmptyProblemTest(Released):
    """No rows, tokens or sequences: the given outputs come back untouched, no op is built."""

    def test_empty_calls_return_their_outputs(self):
        size = tj._C.op_cache_info()["size"]
        out = FakeTensor((0, 8))
        self.assertIs(tj.softmax(FakeTensor((0, 8)), out=out), out)
        self.assertIs(tj.log_softmax(FakeTensor((2, 0, 8)), out=out), out)
        self.assertIs(tj.rms_norm(FakeTensor((0, 8)), FakeTensor((8,)), out=out), out)
        y, h = tj.rms_norm(FakeTensor((0, 8)), FakeTensor((8,)), residual=FakeTensor((0, 8)), out=out,
                           residual_out=FakeTensor((0, 8)))
        self.assertIs(y, out)
        self.assertIs(tj.silu(FakeTensor((0, 8)), out=out), out)
        d = FakeTensor((0, 32))
        self.assertIs(tj.matmul(FakeTensor((0, 64)), FakeTensor((64, 32)), out=d), d)
        d3 = FakeTensor((3, 0, 32))
        self.assertIs(tj.matmul(FakeTensor((3, 0, 64)), FakeTensor((64, 32), strides=(1, 64)), out=d3), d3)
        e = FakeTensor((0, 64))
        self.assertIs(tj.embedding(FakeTensor((0,), "int32"), FakeTensor((1000, 64)), out=e), e)
        pair = (FakeTensor((0, 2), "float32"), FakeTensor((0, 2), "int32"))
        self.assertEqual(tj.moe_topk(FakeTensor((0, 64)), 2, out=pair), pair)
        tokens = FakeTensor((0,), "int32")
        self.assertIs(tj.sample(FakeTensor((0, 1000), "float32"), out=tokens), tokens)
        q = FakeTensor((0, 128, 8, 128))
        self.assertIs(tj.flash_attention(q, q, q, out=q), q)
        self.assertIs(tj.moe_unpermute(FakeTensor((0, 64)), FakeTensor((0, 2), "int32"), FakeTensor((0, 2), "float32"),
                                       out=e), e)
        self.assertEqual(tj._C.op_cache_info()["size"], size)
        self.assertEqual(tj.explain(tj.softmax, FakeTensor((0, 8)), out=out),
                         "tileops_jit.softmax: an empty problem: nothing runs")

    def test_an_empty_problem_with_a_full_output_is_refused(self):
        self.assertRefused(r"softmax: the problem is empty, but argument 'out' has 32 elements", tj.softmax,
                           FakeTensor((0, 8)), out=FakeTensor((4, 8)))
        self.assertRefused(r"matmul: the problem is empty, but argument 'out' has 32 elements", tj.matmul,
                           FakeTensor((0, 64)), FakeTensor((64, 32)), out=FakeTensor((1, 32)))


if __name__ == "__main__":
    unittest.main()
