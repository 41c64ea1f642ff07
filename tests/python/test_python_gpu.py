"""The Python module on a GPU: every op against a float64 torch reference on random inputs, the
DLPack path, torch.compile(fullgraph=True) and CUDA graph capture. Exits with 4 (CTest: skipped)
where torch or a GPU is missing."""

import math
import sys
import unittest

try:
    import torch
except ImportError:
    torch = None
if torch is None or not torch.cuda.is_available():
    print("skipped: needs torch and a CUDA GPU")
    sys.exit(4)

import tileops_jit as tj

DEV = "cuda"
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1.6e-2}
FP8_GEMM = torch.cuda.get_device_capability() == (9, 0)  # the FP8 GEMM's wgmma: H100, H200


def rand(*shape, dtype=torch.bfloat16, scale=1.0, seed=None):
    g = torch.Generator(device=DEV)
    g.manual_seed(seed if seed is not None else hash(shape) % 10007)
    return (torch.randn(*shape, device=DEV, generator=g, dtype=torch.float32) * scale).to(dtype)


class Close(unittest.TestCase):
    def assertClose(self, got, want, dtype=None, rtol=None):
        """got within the dtype's tolerance of want (relative to want's largest magnitude)."""
        dtype = dtype or got.dtype
        tol = rtol if rtol is not None else TOLERANCE[dtype]
        got, want = got.double(), want.double()
        self.assertEqual(got.shape, want.shape)
        self.assertTrue(torch.isfinite(got).all(), "non-finite output")
        err = (got - want).abs().max().item()
        scale = max(want.abs().max().item(), 1e-30)
        self.assertLessEqual(err / scale, tol, f"max error {err:.3e} against max |want| {scale:.3e}")


class DLPackOnly:
    """A torch tensor seen only through the DLPack protocol (the path CuPy or JAX arrays take)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, stream=None):
        return self.tensor.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


class RowOpsTest(Close):
    def test_rms_norm_leading_dims_and_odd_rows(self):
        for dtype, cols in [(torch.bfloat16, 4096), (torch.float16, 5003), (torch.float32, 1000)]:
            x, w = rand(3, 37, cols, dtype=dtype), rand(cols, dtype=dtype)
            want = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
            self.assertClose(tj.rms_norm(x, w), want, dtype)

    def test_rms_norm_residual_in_place(self):
        x, r, w = rand(64, 2048), rand(64, 2048, seed=3), rand(2048, seed=4)
        h = x.double() + r.double()
        want = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * w.double()
        y, s = tj.rms_norm(x, w, 1e-5, residual=r, residual_out=r)
        self.assertIs(s, r)
        self.assertClose(y, want, torch.bfloat16)
        self.assertClose(s, h, torch.bfloat16)

    def test_layer_norm_and_out_dtype(self):
        x, w, b = rand(100, 1000, dtype=torch.float16), rand(1000, dtype=torch.float16), rand(1000, dtype=torch.float16)
        xd = x.double()
        want = (xd - xd.mean(-1, keepdim=True)) / torch.sqrt(xd.var(-1, unbiased=False, keepdim=True) + 1e-5)
        want = want * w.double() + b.double()
        self.assertClose(tj.layer_norm(x, w, b, out_dtype=torch.float32), want, torch.float16)

    def test_softmax_gpt2_vocab_and_strided_rows(self):
        x = rand(7, 50257, dtype=torch.float32, scale=3.0)
        self.assertClose(tj.softmax(x), torch.softmax(x.double(), -1))
        self.assertClose(tj.log_softmax(x), torch.log_softmax(x.double(), -1))
        wide = rand(16, 4096 + 64)
        view = wide[:, :4096]  # rows 4160 apart
        self.assertClose(tj.softmax(view), torch.softmax(view.double(), -1), torch.bfloat16)


class ElementwiseTest(Close):
    def test_activations(self):
        a = rand(33, 1000, scale=3.0)
        ad = a.double()
        self.assertClose(tj.gelu(a), torch.nn.functional.gelu(ad), torch.bfloat16)
        self.assertClose(tj.gelu(a, "tanh"), torch.nn.functional.gelu(ad, approximate="tanh"), torch.bfloat16)
        self.assertClose(tj.silu(a), torch.nn.functional.silu(ad), torch.bfloat16)

    def test_gate_and_binary_ops(self):
        x = rand(5, 3, 2 * 768)
        want = torch.nn.functional.silu(x[..., :768].double()) * x[..., 768:].double()
        self.assertClose(tj.silu_and_mul(x), want, torch.bfloat16)
        a, b, row = rand(40, 512, seed=1), rand(40, 512, seed=2), rand(512, seed=3)
        self.assertClose(tj.add(a, b), a.double() + b.double(), torch.bfloat16)
        self.assertClose(tj.mul(a, row), a.double() * row.double(), torch.bfloat16)


class GemmTest(Close):
    def test_linear_with_bias_and_activation(self):
        x, w, b = rand(2, 33, 1024), rand(768, 1024, scale=0.05), rand(768)
        want = torch.nn.functional.gelu(x.double() @ w.double().t() + b.double())
        self.assertClose(tj.linear(x, w, b, activation="gelu"), want, torch.bfloat16)

    def test_matmul_nn_batched_and_beta(self):
        a, b = rand(100, 256, dtype=torch.float16), rand(256, 520, dtype=torch.float16)
        self.assertClose(tj.matmul(a, b, out_dtype=torch.float32), a.double() @ b.double(), torch.float16)
        a3, b3 = rand(4, 64, 128), rand(4, 128, 96)
        self.assertClose(tj.matmul(a3, b3), a3.double() @ b3.double(), torch.bfloat16)
        c = rand(100, 520, dtype=torch.float16, seed=9)
        got = tj.matmul(a, b, c=c, alpha=0.5, beta=2.0)
        self.assertClose(got, 0.5 * (a.double() @ b.double()) + 2.0 * c.double(), torch.float16)


def attention_reference(q, k, v, causal, scale):
    """q: [b, sq, h, d], k, v: [b, sk, hk, d] in float64; causal aligned bottom-right."""
    h, hk = q.shape[2], k.shape[2]
    k = k.repeat_interleave(h // hk, dim=2)
    v = v.repeat_interleave(h // hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v), lse


class AttentionTest(Close):
    def test_flash_causal_gqa_with_lse(self):
        q, k, v = rand(2, 300, 8, 128, seed=1), rand(2, 300, 2, 128, seed=2), rand(2, 300, 2, 128, seed=3)
        out, lse = tj.flash_attention(q, k, v, causal=True, return_lse=True)
        want, want_lse = attention_reference(q.double(), k.double(), v.double(), True, 128 ** -0.5)
        self.assertClose(out, want, torch.bfloat16)
        self.assertClose(lse, want_lse, torch.float16)

    def test_flash_value_head_dim_of_its_own(self):
        # DeepSeek's prefill: q and k of 192, v of 128; the output takes v's head dim. Also a head
        # dim that is not a multiple of 64, under torch.compile (the fake infers the same shape).
        q, k, v = rand(1, 257, 4, 192, seed=1), rand(1, 257, 4, 192, seed=2), rand(1, 257, 4, 128, seed=3)
        out = tj.flash_attention(q, k, v, causal=True)
        self.assertEqual(tuple(out.shape), (1, 257, 4, 128))
        want, _ = attention_reference(q.double(), k.double(), v.double(), True, 192 ** -0.5)
        self.assertClose(out, want, torch.bfloat16)
        q, k, v = (rand(2, 100, 2, 80, seed=s) for s in (4, 5, 6))
        compiled = torch.compile(lambda a, b, c: tj.flash_attention(a, b, c), fullgraph=True)
        want, _ = attention_reference(q.double(), k.double(), v.double(), False, 80 ** -0.5)
        self.assertClose(compiled(q, k, v), want, torch.bfloat16)

    def test_flash_varlen(self):
        lengths = [17, 200, 64]
        cu = torch.tensor([0, 17, 217, 281], dtype=torch.int32, device=DEV)
        q, k, v = (rand(281, 4, 64, dtype=torch.float16, seed=s) for s in (4, 5, 6))
        out = tj.flash_attention(q, k, v, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=200,
                                 max_seqlen_k=200)
        start = 0
        for n in lengths:
            sl = slice(start, start + n)
            want, _ = attention_reference(q[sl][None].double(), k[sl][None].double(), v[sl][None].double(), True,
                                          64 ** -0.5)
            self.assertClose(out[sl], want[0], torch.float16)
            start += n

    def decode_case(self, kv_dtype, k_scale=1.0, v_scale=1.0):
        batch, heads, kv_heads, dim, page = 3, 32, 8, 128, 16
        lengths = [1, 100, 1000]
        pages_per_seq = (max(lengths) + page - 1) // page
        num_pages = batch * pages_per_seq + 5
        q = rand(batch, heads, dim, seed=7)
        k_cache = rand(num_pages, page, kv_heads, dim, seed=8, dtype=torch.float32)
        v_cache = rand(num_pages, page, kv_heads, dim, seed=9, dtype=torch.float32)
        k_stored = (k_cache / k_scale).to(kv_dtype)
        v_stored = (v_cache / v_scale).to(kv_dtype)
        table = torch.randperm(num_pages, device=DEV)[: batch * pages_per_seq].view(batch, pages_per_seq).int()
        lens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
        out = tj.decode_attention(q, k_stored, v_stored, lens, page_table=table, k_scale=k_scale, v_scale=v_scale)
        for b, n in enumerate(lengths):
            rows = table[b].long()
            kb = (k_stored.double() * k_scale)[rows].reshape(-1, kv_heads, dim)[:n]
            vb = (v_stored.double() * v_scale)[rows].reshape(-1, kv_heads, dim)[:n]
            want, _ = attention_reference(q[b][None, None].double(), kb[None], vb[None], False, dim ** -0.5)
            self.assertClose(out[b], want[0, 0], torch.bfloat16)

    def test_decode_paged(self):
        self.decode_case(torch.bfloat16)

    def test_decode_paged_fp8(self):
        self.decode_case(torch.float8_e4m3fn, k_scale=0.02, v_scale=0.03)

    def test_mla_decode(self):
        batch, heads, lengths = 2, 16, [50, 300]
        q = rand(batch, heads, 576, seed=10)
        kv = rand(batch, 320, 576, seed=11)
        lens = torch.tensor(lengths, dtype=torch.int32, device=DEV)
        out = tj.mla_decode(q, kv, lens)
        for b, n in enumerate(lengths):
            s = q[b].double() @ kv[b, :n].double().t() / math.sqrt(576)
            want = torch.softmax(s, -1) @ kv[b, :n, :512].double()
            self.assertClose(out[b], want, torch.bfloat16)


class QuantizeTest(Close):
    def check_quantized(self, x, q, scales, groups):
        """q.float() * scale within half an e4m3 step of x, scale = amax / 448 of each group;
        groups(t) views a [rows, cols] tensor as [groups, elements] (zero-padded)."""
        self.assertEqual(q.dtype, torch.float8_e4m3fn)
        self.assertEqual(q.shape, x.shape)
        xg = groups(x.double().reshape(-1, x.shape[-1]))
        qg = groups(q.double().reshape(-1, x.shape[-1]))
        want = (xg.abs().amax(dim=1) / 448).clamp(min=2.0 ** -126)
        got = scales.double().reshape(-1)
        self.assertLessEqual(((got - want).abs() / want).max().item(), 1e-6)
        err = (qg * got[:, None] - xg).abs()
        bound = torch.maximum(xg.abs() * 2.0 ** -4, got[:, None] * 2.0 ** -10)  # half a step (subnormals too)
        self.assertTrue(bool((err <= bound * (1 + 1e-6)).all()), f"max error {(err - bound).max().item():.3e} past the bound")

    def test_scalings(self):
        x = rand(3, 37, 1000, scale=3.0)
        x[0, 0, 5] = 500.0  # a huge value in one row
        x[1, 2] = 0.0      # an all-zero row
        q, s = tj.quantize(x)
        self.assertEqual(s.shape, (3, 37))
        self.check_quantized(x, q, s, lambda t: t)
        q, s = tj.quantize(x, "block_1x128")
        self.assertEqual(s.shape, (8, 111))

        def blocks(t):  # [rows, cols] -> [blocks x rows, 128], block-major as the scales
            padded = torch.nn.functional.pad(t, (0, 8 * 128 - t.shape[1]))
            return padded.reshape(t.shape[0], 8, 128).transpose(0, 1).reshape(-1, 128)

        self.check_quantized(x, q, s, blocks)
        q, s = tj.quantize(x, "per_tensor")
        self.check_quantized(x, q, s, lambda t: t.reshape(1, -1))
        fixed = torch.full((1,), 0.01, device=DEV)
        q, s = tj.quantize(x, "per_tensor", scale=fixed)
        self.assertIs(s, fixed)
        want = (x.float() / 0.01).clamp(-448, 448)
        self.assertLessEqual(((q.float() - want).abs() - want.abs() * 2.0 ** -4).max().item(), 2.0 ** -9)


def moe_topk_reference(logits, k, scoring, renormalize=False, scaling=1.0, n_group=1, topk_group=1, bias=None):
    """(weights, ids, choice, unsure) in float64, torch.topk's order; choice is what experts are
    chosen by; unsure marks tokens whose kept groups are decided by less than 1e-5 (fp32 may keep
    others)."""
    x = logits.double()
    s = torch.softmax(x, -1) if scoring == "softmax" else torch.sigmoid(x)
    choice = s + bias.double() if bias is not None else x
    unsure = torch.zeros(x.shape[:-1], dtype=torch.bool, device=x.device)
    if n_group > 1:
        per = (s + bias.double() if bias is not None else s).view(*x.shape[:-1], n_group, -1)
        group_scores = per.topk(2, dim=-1).values.sum(-1)
        kept = group_scores.topk(topk_group, dim=-1).indices
        if topk_group < n_group:
            top = group_scores.topk(topk_group + 1, dim=-1).values
            unsure = (top[..., -2] - top[..., -1]) < 1e-5
        mask = torch.zeros_like(group_scores).scatter_(-1, kept, 1.0).repeat_interleave(x.shape[-1] // n_group, -1)
        choice = choice.masked_fill(mask == 0, float("-inf"))
    ids = choice.topk(k, dim=-1).indices
    w = s.gather(-1, ids)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return w * scaling, ids.int(), choice, unsure


class MoeRoutingTest(Close):
    def check_topk(self, logits, k, scoring, **kw):
        args = (kw.get("renormalize", False), kw.get("routed_scaling_factor", 1.0), kw.get("n_group", 1),
                kw.get("topk_group", 1), kw.get("correction_bias"))
        w, ids = tj.moe_topk(logits, k, scoring, **kw)
        want_w, want_ids, choice, unsure = moe_topk_reference(logits, k, scoring, *args)
        self.assertEqual(ids.dtype, torch.int32)
        self.assertEqual(w.dtype, torch.float32)
        same = (ids == want_ids).all(-1)
        # fp32 sigmoid + bias may order near-equal choices (1e-5 apart) otherwise: equal choices then.
        near = ((choice.gather(-1, ids.long()) - choice.gather(-1, want_ids.long())).abs() < 1e-5).all(-1)
        ok = same | near | unsure
        self.assertTrue(bool(ok.all()), f"{int((~ok).sum())} tokens chose other experts")
        self.assertLessEqual(int(unsure.sum()), max(1, logits.shape[0] // 100))
        self.assertClose(w[same], want_w[same], torch.float32, rtol=2e-5)
        # The weights of the experts chosen, where they differ.
        x = logits.double()
        s = torch.softmax(x, -1) if scoring == "softmax" else torch.sigmoid(x)
        ref = s.gather(-1, ids.long())
        if args[0]:
            ref = ref / ref.sum(-1, keepdim=True)
        self.assertClose(w, ref * args[1], torch.float32, rtol=2e-5)

    def test_topk_real_routers(self):
        for tokens in (1, 77, 4096):
            self.check_topk(rand(tokens, 8, scale=2.0), 2, "softmax", renormalize=True)      # Mixtral
            self.check_topk(rand(tokens, 128, scale=2.0), 8, "softmax", renormalize=True)    # Qwen3-30B-A3B
            bias = rand(256, dtype=torch.float32, scale=0.1, seed=3)
            self.check_topk(rand(tokens, 256, scale=2.0), 8, "sigmoid", renormalize=True, routed_scaling_factor=2.5,
                            n_group=8, topk_group=4, correction_bias=bias)                     # DeepSeek-V3
            self.check_topk(rand(tokens, 97, dtype=torch.float32), 5, "sigmoid")
            self.check_topk(rand(tokens, 64, dtype=torch.float16)[:, :60], 4, "softmax")  # strided rows

    def test_topk_ties_take_the_lower_index(self):
        logits = torch.zeros(3, 64, device=DEV, dtype=torch.bfloat16)
        logits[:, 40:] = 1.0
        _, ids = tj.moe_topk(logits, 4, "softmax")
        self.assertTrue(torch.equal(ids, torch.arange(40, 44, device=DEV, dtype=torch.int32).expand(3, 4)))

    def check_permute(self, x, ids, experts, capacity=None):
        out, info, row_map = tj.moe_permute(x, ids, experts, capacity=capacity)
        k = ids.shape[-1]
        flat = ids.flatten().long()
        valid = (flat >= 0) & (flat < experts)
        counts = torch.bincount(flat[valid], minlength=experts)
        order = torch.argsort(torch.where(valid, flat, experts), stable=True)  # invalid ids last
        rank = torch.empty_like(order)
        starts = torch.cumsum(counts, 0) - counts
        sorted_ids = torch.where(valid, flat, experts)[order]
        rank[order] = torch.arange(order.numel(), device=DEV) - torch.cat([starts, counts.sum().view(1)])[sorted_ids]
        if capacity is None:
            want_offsets = torch.cat([torch.zeros(1, device=DEV, dtype=torch.long), torch.cumsum(counts, 0)])
            self.assertTrue(torch.equal(info.long(), want_offsets))
            want_map = torch.where(valid, want_offsets[:-1][flat.clamp(0, experts - 1)] + rank, -1)
        else:
            self.assertTrue(torch.equal(info.long(), counts.clamp(max=capacity)))
            want_map = torch.where(valid & (rank < capacity), flat.clamp(0, experts - 1) * capacity + rank, -1)
        self.assertTrue(torch.equal(row_map.flatten().long(), want_map))
        rows = out.reshape(-1, x.shape[-1])
        hit = want_map >= 0
        got, want = rows[want_map[hit]], x[torch.arange(flat.numel(), device=DEV)[hit] // k]
        if x.dtype == torch.float8_e4m3fn:  # compared as bytes
            got, want = got.view(torch.int8), want.view(torch.int8)
        self.assertTrue(torch.equal(got, want))

    def test_permute_layouts(self):
        g = torch.Generator(device=DEV).manual_seed(1)
        for tokens, hidden, experts, k in ((1, 7168, 256, 8), (500, 4096, 8, 2), (333, 2050, 97, 6)):
            x = rand(tokens, hidden, seed=tokens)
            logits = torch.randn(tokens, experts, device=DEV, generator=g)
            logits[:, ::7] += 3.0  # skewed: a few hot experts
            ids = logits.topk(k, -1).indices.int()
            self.check_permute(x, ids, experts)
            self.check_permute(x, ids, experts, capacity=max(1, tokens * k // experts))  # drops
            self.check_permute(x.to(torch.float8_e4m3fn), ids, experts)
        hostile = torch.tensor([[0, -1], [5, 8], [2**31 - 1, 3], [-2**31, 7]], device=DEV, dtype=torch.int32)
        self.check_permute(rand(4, 64), hostile, 8)
        self.check_permute(rand(4, 64), hostile, 8, capacity=2)

    def test_permute_carries_fp8_scales(self):
        # quantize's scales of the fp8 rows go along with them: per token, and 1 x 128 blocks.
        tokens, hidden, experts, k = 300, 1000, 64, 6
        x = rand(tokens, hidden, seed=9)
        ids = rand(tokens, experts, dtype=torch.float32, seed=10).topk(k, -1).indices.int()
        for scaling, capacity, cols in (("per_token", None, hidden), ("block_1x128", None, hidden),
                                        ("block_1x128", 20, hidden), ("block_1x128", None, 100)):
            q, scales = tj.quantize(x[:, :cols].contiguous(), scaling)  # 100 columns: scales [1, tokens]
            out, info, row_map, perm_scales = tj.moe_permute(q, ids, experts, capacity=capacity, x_scales=scales)
            self.assertEqual(perm_scales.shape[:-1], scales.shape[:-1])
            flat = row_map.flatten().long()
            hit = flat >= 0
            token = torch.arange(flat.numel(), device=DEV)[hit] // k
            self.assertTrue(torch.equal(perm_scales[..., flat[hit]], scales[..., token]))
            # Dequantized, the permuted rows are x's rows within fp8's rounding.
            blocks = perm_scales.unsqueeze(-1) if scaling == "per_token" else perm_scales.t().repeat_interleave(128, 1)
            rows = out.reshape(-1, cols)[flat[hit]].float() * blocks[flat[hit]][:, :cols]
            torch.testing.assert_close(rows, x[token, :cols].float(), rtol=0.07, atol=1e-3)

    def test_unpermute_against_index_add(self):
        tokens, hidden, experts, k = 300, 1024, 64, 6
        x = rand(tokens, hidden)
        logits = rand(tokens, experts, dtype=torch.float32, seed=4)
        w, ids = tj.moe_topk(logits, k, "softmax", renormalize=True)
        y, offsets, row_map = tj.moe_permute(x, ids, experts)
        y = y * 0.5  # the experts
        out = tj.moe_unpermute(y, row_map, w)
        want = torch.zeros(tokens, hidden, dtype=torch.float64, device=DEV)
        want.index_add_(0, torch.arange(tokens * k, device=DEV) // k, w.flatten()[:, None].double() *
                        y[row_map.flatten().long()].double())
        self.assertClose(out, want, torch.bfloat16)
        residual = rand(tokens, hidden, seed=9)
        acc = residual.clone()
        tj.moe_unpermute(y, row_map, w, accumulate=True, out=acc)
        self.assertClose(acc, want + residual.double(), torch.bfloat16)
        # Masked: y [experts, capacity, hidden], dropped rows skipped.
        ym, counts, row_map_m = tj.moe_permute(x, ids, experts, capacity=20)
        outm = tj.moe_unpermute(ym, row_map_m, w)
        keep = (row_map_m >= 0).double()
        self.assertClose(outm, (w.double() * keep).sum(-1, keepdim=True) * x.double(), torch.bfloat16)


def fp8_codes(*shape, seed):
    """Random non-zero float8_e4m3fn codes, of magnitudes 1/16 to 448."""
    x = rand(*shape, dtype=torch.float32, scale=64.0, seed=seed).clamp(-448.0, 448.0)
    return x.masked_fill(x.abs() < 0.0625, 1.0).to(torch.float8_e4m3fn)


def fp8_scales(*shape, seed):
    """Random positive fp32 scales."""
    return rand(*shape, dtype=torch.float32, seed=seed).abs() * 0.01 + 0.002


def fp8_scale_shapes(scaling, m, n, k):
    """The shapes of scales_a and scales_b tj.gemm_fp8 takes."""
    k_blocks = (k + 127) // 128
    shapes = {"tensor": ((1,), (1,)), "row": ((m,), (n,)), "block": ((k_blocks, m), ((n + 127) // 128, k_blocks))}
    return shapes[scaling]


def fp8_gemm_reference(a, b, scales_a, scales_b, scaling):
    """(a x scales_a) @ (b x scales_b)^T in float64 from the dequantized codes; a [M, K], b [N, K]."""
    (m, k), n = a.shape, b.shape[0]
    sa, sb = scales_a.double(), scales_b.double()
    if scaling == "tensor":
        sa_full, sb_full = sa.reshape(1, 1), sb.reshape(1, 1)
    elif scaling == "row":
        sa_full, sb_full = sa.reshape(m, 1), sb.reshape(n, 1)
    else:  # a's scale of [r, c] is scales_a[c // 128, r]; b's of [r, c] is scales_b[r // 128, c // 128]
        sa_full = sa.t().repeat_interleave(128, dim=1)[:, :k]
        sb_full = sb.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:n, :k]
    return (a.double() * sa_full) @ (b.double() * sb_full).t()


@unittest.skipUnless(FP8_GEMM, "the FP8 GEMM needs sm_90")
class GemmFp8Test(Close):
    def operands(self, scaling, m, n, k, seed=0):
        a, b = fp8_codes(m, k, seed=seed + 1), fp8_codes(n, k, seed=seed + 2)
        shape_a, shape_b = fp8_scale_shapes(scaling, m, n, k)
        return a, b, fp8_scales(*shape_a, seed=seed + 3), fp8_scales(*shape_b, seed=seed + 4)

    def test_scalings_ragged(self):
        for scaling in ("tensor", "row", "block"):
            for k in (272, 1024):  # 272: a partial last block of K
                a, b, sa, sb = self.operands(scaling, 77, 200, k, seed=k)
                want = fp8_gemm_reference(a, b, sa, sb, scaling)
                for out_dtype, rtol in ((torch.bfloat16, TOLERANCE[torch.bfloat16]), (torch.float32, 2e-3)):
                    with self.subTest(scaling=scaling, k=k, out_dtype=out_dtype):
                        got = tj.gemm_fp8(a, b, sa, sb, scaling, out_dtype=out_dtype)
                        self.assertEqual(got.dtype, out_dtype)
                        self.assertClose(got, want, rtol=rtol)

    def test_block_scales_a_transposed_view(self):
        # [M, ceil(K / 128)] with strides [1, M] is the same memory as [ceil(K / 128), M].
        a, b, sa, sb = self.operands("block", 77, 200, 272, seed=5)
        want = tj.gemm_fp8(a, b, sa, sb, "block")
        self.assertTrue(torch.equal(tj.gemm_fp8(a, b, sa.t(), sb, "block"), want))

    def test_quantized_activations_with_epilogue(self):
        # a from tj.quantize: [7, 11, K] folds into M = 77 rows, its per-token scales [7, 11] are a's row scales.
        x = rand(7, 11, 272, scale=3.0, seed=30)
        a, sa = tj.quantize(x)
        b, sb = fp8_codes(200, 272, seed=31), fp8_scales(200, seed=32)
        c, bias = rand(7, 11, 200, seed=33), rand(200, seed=34)
        got = tj.gemm_fp8(a, b, sa, sb, "row", bias=bias, c=c, alpha=0.5, beta=2.0, activation="gelu")
        self.assertEqual(got.shape, (7, 11, 200))
        ab = fp8_gemm_reference(a.reshape(77, 272), b, sa, sb, "row").reshape(7, 11, 200)
        want = torch.nn.functional.gelu(0.5 * ab + 2.0 * c.double() + bias.double())
        self.assertClose(got, want, torch.bfloat16)
        out = torch.empty(7, 11, 200, device=DEV, dtype=torch.float32)
        self.assertIs(tj.gemm_fp8(a, b, sa, sb, "row", activation="silu", out=out), out)
        self.assertClose(out, torch.nn.functional.silu(ab), rtol=2e-3)

    def test_block_scales_from_quantize(self):
        x = rand(77, 1024, seed=35)
        a, sa = tj.quantize(x, "block_1x128")  # sa: [8, 77], the layout block scales_a has
        _, b, _, sb = self.operands("block", 77, 200, 1024, seed=36)
        self.assertClose(tj.gemm_fp8(a, b, sa, sb, "block"), fp8_gemm_reference(a, b, sa, sb, "block"),
                         torch.bfloat16)

    def test_batched_per_tensor(self):
        a, b = fp8_codes(3, 40, 128, seed=37), fp8_codes(3, 72, 128, seed=38)
        sa, sb = fp8_scales(1, seed=39), fp8_scales(1, seed=40)
        want = (a.double() * sa.double()) @ (b.double() * sb.double()).transpose(1, 2)
        self.assertClose(tj.gemm_fp8(a, b, sa, sb, out_dtype=torch.float32), want, rtol=2e-3)


def grouped_reference(a, b, offsets):
    """Each group's rows of a times its b, in fp64; rows outside the groups are None's (NaN)."""
    out = torch.full((a.shape[0], b.shape[-1]), float("nan"), device=DEV, dtype=torch.float64)
    bounds = offsets.tolist()
    for g in range(b.shape[0]):
        s, e = bounds[g], bounds[g + 1]
        out[s:e] = a[s:e].double() @ b[g].double()
    return out


class GemmGroupedTest(Close):
    def test_contiguous_uneven_weights_layout(self):
        # Expert weights [G, N, K] seen as [G, K, N]; empty groups, one row, rows past a tile.
        counts = [0, 1, 77, 0, 129, 300, 64, 0]
        offsets = torch.tensor([0] + list(torch.tensor(counts).cumsum(0)), dtype=torch.int32, device=DEV)
        a, w = rand(571, 136, seed=50), rand(8, 200, 136, seed=51, scale=0.1)
        got = tj.gemm_grouped(a, w.transpose(1, 2), offsets=offsets)
        self.assertEqual(got.shape, (571, 200))
        self.assertClose(got, grouped_reference(a, w.transpose(1, 2), offsets), torch.bfloat16)

    def test_contiguous_kn_fp16_gelu_fp32_out(self):
        offsets = torch.tensor([0, 100, 100, 337], dtype=torch.int32, device=DEV)
        a, b = rand(337, 128, dtype=torch.float16, seed=52), rand(3, 128, 192, dtype=torch.float16, seed=53, scale=0.1)
        got = tj.gemm_grouped(a, b, offsets=offsets, alpha=0.5, activation="gelu", out_dtype=torch.float32)
        self.assertEqual(got.dtype, torch.float32)
        self.assertClose(got, torch.nn.functional.gelu(0.5 * grouped_reference(a, b, offsets)), rtol=1e-3)

    def test_masked_leaves_rows_past_counts(self):
        counts = torch.tensor([0, 1, 40, 17], dtype=torch.int32, device=DEV)
        a, b = rand(4, 40, 256, seed=54), rand(4, 256, 384, seed=55, scale=0.1)
        out = torch.full((4, 40, 384), float("nan"), device=DEV, dtype=torch.bfloat16)
        self.assertIs(tj.gemm_grouped(a, b, counts=counts, activation="silu", out=out), out)
        for g, count in enumerate(counts.tolist()):
            self.assertTrue(out[g, count:].isnan().all())
            if count == 0:
                continue
            self.assertClose(out[g, :count], torch.nn.functional.silu(a[g, :count].double() @ b[g].double()),
                             torch.bfloat16)

    def test_graph_replay_follows_new_offsets(self):
        a, w = rand(400, 192, seed=56), rand(6, 256, 192, seed=57, scale=0.1)
        offsets = torch.tensor([0, 10, 100, 100, 250, 251, 400], dtype=torch.int32, device=DEV)
        out = torch.empty(400, 256, device=DEV, dtype=torch.bfloat16)
        tj.gemm_grouped(a, w.transpose(1, 2), offsets=offsets, out=out)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            tj.gemm_grouped(a, w.transpose(1, 2), offsets=offsets, out=out)
        offsets.copy_(torch.tensor([0, 200, 200, 200, 200, 200, 400], dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        self.assertClose(out, grouped_reference(a, w.transpose(1, 2), offsets), torch.bfloat16)

    @unittest.skipUnless(FP8_GEMM, "the FP8 GEMM needs sm_90")
    def test_fp8_block_scales_from_quantize(self):
        # a quantized with tj.quantize's 1 x 128 scales, each expert's e4m3 weights with 128 x 128 block scales.
        offsets = torch.tensor([0, 77, 77, 300], dtype=torch.int32, device=DEV)
        a8, sa = tj.quantize(rand(300, 384, seed=60), "block_1x128")  # sa: [3, 300]
        w8, sw = fp8_codes(3, 200, 384, seed=61), fp8_scales(3, 2, 3, seed=62)
        got = tj.gemm_grouped(a8, w8.transpose(1, 2), offsets=offsets, scales_a=sa, scales_b=sw, scaling="block")
        self.assertEqual(got.dtype, torch.bfloat16)
        for g, (s, e) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist())):
            if e > s:
                want = fp8_gemm_reference(a8[s:e], w8[g], sa[:, s:e], sw[g], "block")
                self.assertClose(got[s:e], want, torch.bfloat16)

    def test_torch_compile(self):
        offsets = torch.tensor([0, 30, 64], dtype=torch.int32, device=DEV)
        a, w = rand(64, 256, seed=58), rand(2, 128, 256, seed=59, scale=0.1)
        fn = torch.compile(lambda a, w, o: tj.gemm_grouped(a, w.transpose(1, 2), offsets=o), fullgraph=True)
        self.assertClose(fn(a, w, offsets), grouped_reference(a, w.transpose(1, 2), offsets), torch.bfloat16)


class MoeLayerTest(Close):
    """A mixture-of-experts layer from the library's ops alone: the router's top-k, the permute into
    expert order, the experts' gate-up and down projections as grouped GEMMs over the permute's
    offsets (or counts), SwiGLU between them, the weighted unpermute; against float64 per token."""

    EXPERTS, K, HIDDEN, INTER = 16, 4, 256, 128

    def weights(self):
        w_gate_up = rand(self.EXPERTS, 2 * self.INTER, self.HIDDEN, seed=70, scale=0.06)
        w_down = rand(self.EXPERTS, self.HIDDEN, self.INTER, seed=71, scale=0.09)
        return w_gate_up, w_down

    def reference(self, x, w_gate_up, w_down, weights, ids):
        out = torch.zeros(x.shape, dtype=torch.float64, device=DEV)
        for t in range(x.shape[0]):
            for j in range(ids.shape[1]):
                e = int(ids[t, j])
                gate, up = (w_gate_up[e].double() @ x[t].double()).chunk(2)
                out[t] += float(weights[t, j]) * (w_down[e].double() @ (torch.nn.functional.silu(gate) * up))
        return out

    def test_contiguous_layer(self):
        x, logits = rand(77, self.HIDDEN, seed=72), rand(77, self.EXPERTS, dtype=torch.float32, seed=73)
        w_gate_up, w_down = self.weights()
        weights, ids = tj.moe_topk(logits, self.K, renormalize=True)
        x_perm, offsets, row_map = tj.moe_permute(x, ids, self.EXPERTS)
        h = tj.gemm_grouped(x_perm, w_gate_up.transpose(1, 2), offsets=offsets)
        y = tj.gemm_grouped(tj.silu_and_mul(h), w_down.transpose(1, 2), offsets=offsets)
        out = tj.moe_unpermute(y, row_map, weights)
        self.assertClose(out, self.reference(x, w_gate_up, w_down, weights, ids), rtol=3e-2)

    def test_masked_decode_layer(self):
        x, logits = rand(5, self.HIDDEN, seed=74), rand(5, self.EXPERTS, dtype=torch.float32, seed=75)
        w_gate_up, w_down = self.weights()
        weights, ids = tj.moe_topk(logits, self.K, renormalize=True)
        # A capacity of every entry: none is dropped.
        x_masked, counts, row_map = tj.moe_permute(x, ids, self.EXPERTS, capacity=5 * self.K)
        h = tj.gemm_grouped(x_masked, w_gate_up.transpose(1, 2), counts=counts)
        y = tj.gemm_grouped(tj.silu_and_mul(h), w_down.transpose(1, 2), counts=counts)
        out = tj.moe_unpermute(y, row_map, weights)
        self.assertClose(out, self.reference(x, w_gate_up, w_down, weights, ids), rtol=3e-2)


class ModelOpsTest(Close):
    def test_embedding_with_positions(self):
        ids = torch.randint(0, 50257, (2, 9), dtype=torch.int32, device=DEV)
        pos = torch.arange(9, dtype=torch.int32, device=DEV).repeat(2, 1)
        table, ptable = rand(50257, 768), rand(1024, 768, seed=12)
        want = table.double()[ids.long()] + ptable.double()[pos.long()]
        self.assertClose(tj.embedding(ids, table, positions=pos, position_table=ptable), want, torch.bfloat16)

    def test_rope_neox_with_paged_append(self):
        tokens, heads, kv_heads, dim, page = 10, 8, 2, 64, 16
        q, k, v = rand(tokens, heads, dim, seed=13), rand(tokens, kv_heads, dim, seed=14), rand(tokens, kv_heads, dim, seed=15)
        positions = torch.arange(100, 100 + tokens, dtype=torch.int32, device=DEV)
        slots = torch.arange(tokens, dtype=torch.int32, device=DEV) + 3
        k_cache = torch.full((2, page, kv_heads, dim), float("nan"), dtype=torch.bfloat16, device=DEV)
        v_cache = torch.full_like(k_cache, float("nan"))
        q_out, k_out = tj.rope(q, k, positions, theta=500000.0, v=v, slots=slots, k_cache=k_cache, v_cache=v_cache)
        inv_freq = 1.0 / (500000.0 ** (torch.arange(0, dim, 2, device=DEV, dtype=torch.float64) / dim))
        angle = positions.double()[:, None] * inv_freq[None]
        cos, sin = torch.cat([angle.cos()] * 2, -1)[:, None], torch.cat([angle.sin()] * 2, -1)[:, None]

        def rotate(x):
            x = x.double()
            half = torch.cat([-x[..., dim // 2:], x[..., : dim // 2]], -1)
            return x * cos + half * sin

        self.assertClose(q_out, rotate(q), torch.bfloat16)
        self.assertClose(k_out, rotate(k), torch.bfloat16)
        flat_k, flat_v = k_cache.view(-1, kv_heads, dim), v_cache.view(-1, kv_heads, dim)
        self.assertClose(flat_k[3:13], rotate(k), torch.bfloat16)
        self.assertTrue(torch.equal(flat_v[3:13], v))
        for cache in (flat_k, flat_v):  # the slots no token names keep their poison
            self.assertTrue(cache[:3].isnan().all().item())
            self.assertTrue(cache[13:].isnan().all().item())

    def test_sample_greedy_and_top_k_one(self):
        logits = rand(4, 50257, dtype=torch.float32, scale=4.0)
        want = logits.argmax(-1).int()
        self.assertTrue(torch.equal(tj.sample(logits), want))
        ones = torch.ones(4, device=DEV)
        got = tj.sample(logits, temperature=ones, top_k=torch.ones(4, dtype=torch.int32, device=DEV), top_p=ones,
                        min_p=torch.zeros(4, device=DEV), offsets=torch.zeros(4, dtype=torch.int32, device=DEV),
                        seed=5)
        self.assertTrue(torch.equal(got, want))


def rope_append_afresh(q, k, positions, v, slots, k_cache, v_cache):
    """RoPE with the append into caches refilled first: each mode (eager, compiled, graph) must
    write the slots itself, not find the eager run's rows there."""
    k_cache.fill_(7.0)
    v_cache.fill_(7.0)
    return tj.rope(q, k, positions, v=v, slots=slots, k_cache=k_cache, v_cache=v_cache) + (k_cache.clone(), v_cache.clone())


def op_cases():
    """One call of every op (and its main variants) as its own function (torch.compile caches
    compiled code per function), with its inputs."""
    x, w, b, r = rand(8, 1000), rand(1000, seed=1), rand(1000, seed=2), rand(8, 1000, seed=3)
    q, k, v = rand(2, 100, 8, 64, seed=4), rand(2, 100, 2, 64, seed=5), rand(2, 100, 2, 64, seed=6)
    cu = torch.tensor([0, 30, 100], dtype=torch.int32, device=DEV)
    qv, kv_, vv = q[0], k[0], v[0]
    pages = torch.randperm(20, device=DEV)[:16].view(2, 8).int()
    lengths = torch.tensor([5, 120], dtype=torch.int32, device=DEV)
    kc, vc = rand(20, 16, 2, 64, seed=7), rand(20, 16, 2, 64, seed=8)
    kc8, vc8 = (kc.float() * 10).to(torch.float8_e4m3fn), (vc.float() * 10).to(torch.float8_e4m3fn)
    mq, mkv = rand(2, 16, 576, seed=9), rand(2, 128, 576, seed=10)
    ids = torch.randint(0, 1000, (2, 7), dtype=torch.int32, device=DEV)
    pos = torch.arange(7, dtype=torch.int32, device=DEV).repeat(2, 1)
    rq, rk, rv = rand(6, 8, 64, seed=11), rand(6, 2, 64, seed=12), rand(6, 2, 64, seed=13)
    rpos, slots = torch.arange(6, dtype=torch.int32, device=DEV), torch.arange(6, dtype=torch.int32, device=DEV) * 3
    rkc, rvc = torch.zeros(2, 16, 2, 64, dtype=torch.bfloat16, device=DEV), torch.zeros(2, 16, 2, 64, dtype=torch.bfloat16, device=DEV)
    logits = rand(3, 5000, dtype=torch.float32, scale=3.0)
    temp, top_p = torch.full((3,), 0.8, device=DEV), torch.full((3,), 0.9, device=DEV)
    top_k, min_p = torch.full((3,), 40, dtype=torch.int32, device=DEV), torch.full((3,), 0.01, device=DEV)
    offsets = torch.arange(3, dtype=torch.int32, device=DEV)
    cases = [
        ("rms_norm", lambda x, w: tj.rms_norm(x, w), (x, w)),
        ("rms_norm residual", lambda x, r, w: tj.rms_norm(x, w, residual=r), (x, r, w)),
        ("layer_norm", lambda x, w, b: tj.layer_norm(x, w, b), (x, w, b)),
        ("softmax", lambda x: tj.softmax(x), (x,)),
        ("log_softmax fp32 out", lambda x: tj.log_softmax(x, out_dtype=torch.float32), (x,)),
        ("gelu", lambda x: tj.gelu(x), (x,)),
        ("gelu tanh", lambda x: tj.gelu(x, "tanh"), (x,)),
        ("silu", lambda x: tj.silu(x), (x,)),
        ("silu_and_mul", lambda x: tj.silu_and_mul(x), (x,)),
        ("add broadcast", lambda x, b: tj.add(x, b), (x, b)),
        ("mul", lambda x, r: tj.mul(x, r), (x, r)),
        ("linear", lambda x, w2, b2: tj.linear(x, w2, b2, activation="silu"), (x, rand(256, 1000, seed=14, scale=0.03), rand(256, seed=15))),
        ("matmul batched", lambda a, b: tj.matmul(a, b), (rand(3, 40, 64, seed=16), rand(3, 64, 72, seed=17))),
        ("flash causal lse", lambda q, k, v: tj.flash_attention(q, k, v, causal=True, return_lse=True), (q, k, v)),
        ("flash varlen", lambda q, k, v, cu: tj.flash_attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=70,
                                                                 max_seqlen_k=70), (qv, kv_, vv, cu)),
        ("decode paged", lambda q, kc, vc, n, t: tj.decode_attention(q, kc, vc, n, page_table=t), (q[:, 0], kc, vc, lengths, pages)),
        ("decode fp8 lse", lambda q, kc, vc, n, t: tj.decode_attention(q, kc, vc, n, page_table=t, k_scale=0.1, v_scale=0.1,
                                                                       return_lse=True), (q[:, 0], kc8, vc8, lengths, pages)),
        ("mla_decode", lambda q, kv, n: tj.mla_decode(q, kv, n), (mq, mkv, lengths)),
        ("embedding", lambda i, t, p, pt: tj.embedding(i, t, positions=p, position_table=pt), (ids, rand(1000, 64, seed=18), pos, rand(16, 64, seed=19))),
        ("rope append", rope_append_afresh, (rq, rk, rpos, rv, slots, rkc, rvc)),
        ("rope llama3 gptj", lambda q, k, p: tj.rope(q, k, p, theta=500000.0, style="gptj",
                                                     scaling=tj.llama3_rope_scaling()), (rq, rk, rpos)),
        ("sample greedy", lambda l: tj.sample(l), (logits,)),
        ("sample", lambda l, t, k, p, m, o: tj.sample(l, temperature=t, top_k=k, top_p=p, min_p=m, offsets=o, seed=3),
         (logits, temp, top_k, top_p, min_p, offsets)),
        # The codes compared as floats (a graph's outputs are refilled with NaN before its replay).
        ("quantize per_token", lambda x: (lambda q, s: (q.float(), s))(*tj.quantize(x)), (x,)),
        ("quantize block_1x128", lambda x: (lambda q, s: (q.float(), s))(*tj.quantize(x, "block_1x128")), (x,)),
        ("quantize per_tensor", lambda x: (lambda q, s: (q.float(), s))(*tj.quantize(x, "per_tensor")), (x,)),
        ("moe_topk deepseek", lambda l, b: tj.moe_topk(l, 8, "sigmoid", renormalize=True, routed_scaling_factor=2.5,
                                                       n_group=8, topk_group=4, correction_bias=b),
         (rand(8, 256, seed=27), rand(256, dtype=torch.float32, scale=0.1, seed=28))),
        ("moe permute unpermute", lambda x, l: (lambda w, i: (lambda p, o, m: (p, o, m, tj.moe_unpermute(p, m, w)))(
            *tj.moe_permute(x, i, 16)))(*tj.moe_topk(l, 4, "softmax", renormalize=True)),
         (x, rand(8, 16, dtype=torch.float32, seed=29))),
    ]
    if FP8_GEMM:
        a8, b8 = fp8_codes(40, 256, seed=20), fp8_codes(72, 256, seed=21)
        cases += [
            ("gemm_fp8 row", lambda a, b, sa, sb: tj.gemm_fp8(a, b, sa, sb, "row"),
             (a8, b8, fp8_scales(40, seed=22), fp8_scales(72, seed=23))),
            ("gemm_fp8 block bias silu fp32", lambda a, b, sa, sb, bias: tj.gemm_fp8(
                a, b, sa, sb, "block", bias=bias, activation="silu", out_dtype=torch.float32),
             (a8, b8, fp8_scales(2, 40, seed=24), fp8_scales(1, 2, seed=25), rand(72, dtype=torch.float32, seed=26))),
        ]
    return cases


def flat(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


class CompileAndGraphTest(Close):
    """Each op gives the same outputs eagerly, compiled with fullgraph=True (through its torch
    custom op and fake implementation) and replayed from a captured CUDA graph."""

    def assertSame(self, got, want, what):
        for g, w in zip(flat(got), flat(want)):
            self.assertEqual(g.shape, w.shape, what)
            self.assertEqual(g.dtype, w.dtype, what)
            if g.dtype == torch.int32:
                self.assertTrue(torch.equal(g, w), what)
            else:
                self.assertClose(g.float(), w.float(), torch.float32, rtol=1e-6)

    def test_every_op(self):
        for name, fn, args in op_cases():
            with self.subTest(op=name):
                want = [t.clone() for t in flat(fn(*args))]
                self.assertSame(torch.compile(fn, fullgraph=True)(*args), want, name + " compiled")
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    captured = fn(*args)
                for t in flat(captured):
                    t.fill_(-1 if t.dtype == torch.int32 else float("nan"))
                graph.replay()
                torch.cuda.synchronize()
                self.assertSame(captured, want, name + " graph")


class IntegrationTest(Close):
    def test_dlpack_producer_and_explicit_stream(self):
        x, w = rand(8, 4096), rand(4096, seed=2)
        y = torch.empty_like(x)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            tj.rms_norm(DLPackOnly(x), DLPackOnly(w), out=DLPackOnly(y), stream=stream)
        stream.synchronize()
        want = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
        self.assertClose(y, want, torch.bfloat16)

    def test_explain_prepare_stats(self):
        x, w = rand(1024, 4096), rand(4096)
        self.assertIn("rmsnorm", tj.explain(tj.rms_norm, x, w))
        tj.prepare(tj.rms_norm, x, w)
        self.assertGreaterEqual(sum(tj.stats().values()), 1)
        self.assertEqual(tj.device_info()["sm_count"], torch.cuda.get_device_properties(0).multi_processor_count)

    def test_torch_compile_fullgraph(self):
        x, w, wq = rand(16, 1024), rand(1024, seed=2), rand(2048, 1024, seed=3, scale=0.05)

        def block(x, w, wq):
            h = tj.rms_norm(x, w)
            return tj.silu_and_mul(tj.linear(h, wq))

        compiled = torch.compile(block, fullgraph=True)
        self.assertClose(compiled(x, w, wq), block(x, w, wq).float(), torch.bfloat16, rtol=1e-6)

    def test_cuda_graph_capture(self):
        x, w = rand(32, 2048), rand(2048, seed=2)
        y = torch.empty_like(x)
        tj.rms_norm(x, w, out=y)  # the first run builds the op; capture only records launches
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            tj.rms_norm(x, w, out=y)
        x.copy_(rand(32, 2048, seed=99))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
        self.assertClose(y, want, torch.bfloat16)

    def test_errors_are_python_exceptions(self):
        x = rand(4, 64)
        with self.assertRaisesRegex(ValueError, "argument 'weight' must be a contiguous vector of 64 elements"):
            tj.rms_norm(x, rand(32))
        with self.assertRaisesRegex(ValueError, "is on cpu"):
            tj.rms_norm(x.cpu(), rand(64))
        with self.assertRaisesRegex(ValueError, "has dtype torch.float64"):
            tj.softmax(x.double())


class AuditFixesTest(Close):
    """Behaviours the argument-check tests show with stand-ins, on real torch tensors."""

    def test_sample_with_temperature_only(self):
        logits = rand(4, 1000, dtype=torch.float32, scale=3.0, seed=70)
        cold = torch.full((4,), 1e-4, device=DEV)  # the others neutral: next to greedy
        self.assertTrue(torch.equal(tj.sample(logits, temperature=cold, seed=3).long(), logits.argmax(-1)))

    def test_empty_problems(self):
        x = torch.empty(0, 64, device=DEV, dtype=torch.bfloat16)
        self.assertEqual(tj.softmax(x).shape, (0, 64))
        self.assertEqual(tj.matmul(x, rand(64, 32)).shape, (0, 32))
        ids = torch.empty(0, device=DEV, dtype=torch.int32)
        self.assertEqual(tj.embedding(ids, rand(100, 64)).shape, (0, 64))

    def test_gemm_grouped_allocated_rows_outside_groups_are_zero(self):
        offsets = torch.tensor([0, 16, 40], dtype=torch.int32, device=DEV)
        got = tj.gemm_grouped(rand(64, 128, seed=71), rand(2, 128, 64, seed=72, scale=0.1), offsets=offsets)
        self.assertTrue((got[40:] == 0).all())

    def test_compiled_out_is_written(self):
        x = rand(8, 256, seed=73)
        out = torch.empty_like(x)
        torch.compile(lambda a, o: tj.softmax(a, out=o), fullgraph=True)(x, out)
        self.assertClose(out, torch.softmax(x.double(), -1), torch.bfloat16)

    def test_captured_op_is_pinned(self):
        x = rand(16, 96, seed=74)
        y = torch.empty_like(x)
        tj.silu(x, out=y)
        pinned = tj._C.op_cache_info()["pinned"]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            tj.silu(x, out=y)
        self.assertEqual(tj._C.op_cache_info()["pinned"], pinned + 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
