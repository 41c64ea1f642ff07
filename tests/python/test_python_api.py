"""The Python module without a GPU: import, argument checks and the errors they raise. Tensors are
DLPack fakes (dlpack_fakes.py): the checks run before any device work, so they need no GPU."""

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
        self.assertRefused(r"argument 'y' must have shape \[4, 64\]", tj.rms_norm, FakeTensor((4, 64)),
                           FakeTensor((64,)), out=FakeTensor((5, 64)))

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

    def test_matmul_out_shape(self):
        self.assertRefused(r"argument 'D' must have shape \[16, 32\]", tj.matmul, FakeTensor((16, 64)),
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
        self.assertRefused(r"argument 'q' has dtype bf16, expected fp8_e4m3", tj.quantize, x, out=FakeTensor((4, 64)),
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
        self.assertRefused(r"argument 'A' has dtype bf16, expected fp8_e4m3", tj.gemm_fp8, a, b, one, one, out=out)
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
            self.assertRefused(r"argument 'A' has dtype bf16, expected fp8_e4m3", tj.gemm_fp8, a, b, scales_a, scales_b,
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
        self.assertRefused(r"temperature, top_k, top_p, min_p and offsets go together", tj.sample,
                           FakeTensor((2, 1000), "float32"), temperature=FakeTensor((2,), "float32"),
                           out=FakeTensor((2,), "int32"))


@unittest.skipIf(has_gpu(), "a GPU is present: the fakes' addresses would be used")
class WithoutGpuTest(Released):
    def test_well_formed_call_raises_a_runtime_error(self):
        with self.assertRaises(RuntimeError) as caught:
            tj.rms_norm(FakeTensor((4, 64)), FakeTensor((64,)), out=FakeTensor((4, 64)))
        self.assertNotIsInstance(caught.exception, ValueError)


if __name__ == "__main__":
    unittest.main()
