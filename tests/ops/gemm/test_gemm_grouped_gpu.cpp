// GemmGrouped against a double-precision reference on the CPU: random inputs (never zeros),
// poisoned outputs, uneven groups (empty ones, one row, rows that are not a multiple of any
// tile), both group layouts and B layouts, fp16 / bf16 in, every output dtype, activations,
// padded and unaligned D; rows that belong to no group must stay poisoned (the kernel writes
// exactly its groups' rows); new row counts on the device take effect without a new op; hostile
// counts stay in bounds.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <fmt/format.h>

#include "core/op_model.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/device_tensor.hpp"
#include "support/gemm_reference.hpp"
#include "support/run_op.hpp"
#include "support/test_support.hpp"
#include "tuning/op_config.hpp"
#include "tileops/tileops.hpp"

using namespace tileops;
using tileops::test::DeviceMatrix;
using tileops::test::shared_runtime;

namespace {

// As the batched GEMM's tests: fp32 D to its accumulation, 16-bit D to its rounding.
double grouped_tolerance(DType out) { return out == DType::fp32 ? 1e-4 : 1e-2; }

struct Case {
    GemmGroupedProblem p;
    std::vector<int> group_rows;   // offsets [groups + 1] or counts [groups]
    int64_t pad = 0;               // extra elements per row of D
    size_t d_misalign = 0;         // bytes D is shifted off 16-byte alignment (stored from registers)
    int64_t guard_rows = 0;        // rows of D past the problem's, which must stay poisoned
    bool check_values = true;      // false: groups overlap (unspecified values); only the guards are checked
    std::optional<Config> config;  // run this config (twice, D poisoned in between) instead of the runtime's
};

// Rows [begin, end) of group g as the kernel clamps them (gemm_groups.cuh).
std::pair<int64_t, int64_t> group_span(const GemmGroupedProblem& p, const std::vector<int>& rows, int64_t g) {
    if (p.group_layout == GemmGroupLayout::masked) {
        const int64_t begin = g * p.rows;
        return {begin, begin + std::clamp<int64_t>(rows[g], 0, p.rows)};
    }
    const int64_t begin = std::clamp<int64_t>(rows[g], 0, p.rows);
    return {begin, std::clamp<int64_t>(rows[g + 1], begin, p.rows)};
}

void run_case(Case c) {
    shared_runtime();  // first: it makes the device's context current for the allocations
    GemmGroupedProblem& p = c.p;
    if (!p.out_dtype) p.out_dtype = p.dtype;
    const DType out = *p.out_dtype;
    const bool nt = p.layout == GemmLayout::nt;
    const bool masked = p.group_layout == GemmGroupLayout::masked;
    const int64_t rows = masked ? p.groups * p.rows : p.rows;
    p.ldd = p.n + c.pad;
    INFO(fmt::format("{} groups x {} rows, N {}, K {}, {} {} {}->{} {} pad {} misalign {}", p.groups, p.rows, p.n, p.k,
                     gemm_group_layout_name(p.group_layout), gemm_layout_name(p.layout), dtype_name(p.dtype),
                     dtype_name(out), gemm_epilogue_name(p.epilogue), c.pad, c.d_misalign));
    GemmGrouped op(p);
    const uint64_t seed = static_cast<uint64_t>(p.groups * 7 + rows * 131 + p.n * 17 + p.k);
    const double scale = 1.0 / std::sqrt(static_cast<double>(p.k));
    const std::vector<double> a = test::round_to(p.dtype, test::random_values(rows * p.k, seed + 1, -2.0 * scale, 2.0 * scale));
    const std::vector<double> b = test::round_to(p.dtype, test::random_values(p.groups * p.n * p.k, seed + 2));
    DeviceMatrix da(p.dtype, rows, p.k), db(p.dtype, p.groups * (nt ? p.n : p.k), nt ? p.k : p.n);
    DeviceMatrix dd(out, rows + c.guard_rows, p.n, p.ldd, c.d_misalign);
    DeviceMatrix dgroups(DType::int32, 1, static_cast<int64_t>(c.group_rows.size()));
    da.upload(a);
    db.upload(b);
    std::vector<double> group_values(c.group_rows.begin(), c.group_rows.end());
    dgroups.upload(group_values);
    std::vector<TensorArg> inputs{da.data(), db.data(), dgroups.data()};
    test::run_op(op, inputs, OutputArg(dd.data()), dd, c.config);
    const std::vector<double> got = dd.download();
    // Which group (if any) owns each row.
    std::vector<int64_t> owner(rows + c.guard_rows, -1);
    for (int64_t g = 0; g < p.groups; ++g) {
        const auto [begin, end] = group_span(p, c.group_rows, g);
        for (int64_t r = begin; r < end; ++r) owner[r] = g;
    }
    std::vector<double> out_values, ref_values;
    bool others_untouched = true;
    for (int64_t r = 0; r < rows + c.guard_rows; ++r) {
        const int64_t g = owner[r];
        for (int64_t j = 0; j < p.n; ++j) {
            const double value = got[r * p.n + j];
            if (g < 0) {
                others_untouched = others_untouched && std::isnan(value);
                continue;
            }
            double sum = 0;
            const double* b_g = b.data() + g * p.n * p.k;
            for (int64_t kk = 0; kk < p.k; ++kk) sum += a[r * p.k + kk] * (nt ? b_g[j * p.k + kk] : b_g[kk * p.n + j]);
            ref_values.push_back(test::gemm_activation(p.epilogue, p.alpha * sum));
            out_values.push_back(value);
        }
    }
    CHECK(others_untouched);
    if (!c.check_values) return;
    const double error = test::relative_error(out_values, test::round_to(out, ref_values));
    INFO("relative error " << error << " over " << out_values.size() << " outputs");
    CHECK(error <= grouped_tolerance(out));
    if (c.pad > 0) CHECK(dd.gaps_untouched());
}

// Offsets of groups with these row counts, starting at `first` (rows before it belong to none).
std::vector<int> offsets_of(const std::vector<int>& counts, int first = 0) {
    std::vector<int> offsets{first};
    for (int count : counts) offsets.push_back(offsets.back() + count);
    return offsets;
}

GemmGroupedProblem make(int64_t groups, int64_t rows, int64_t n, int64_t k, GemmLayout layout, DType dtype,
                        GemmGroupLayout group_layout = GemmGroupLayout::contiguous) {
    GemmGroupedProblem p;
    p.groups = groups, p.rows = rows, p.n = n, p.k = k, p.layout = layout, p.dtype = dtype, p.group_layout = group_layout;
    return p;
}

}  // namespace

TEST_CASE("GemmGrouped (contiguous) matches a double-precision reference on uneven groups", "[gpu][gemm_grouped]") {
    TILEOPS_REQUIRE_GPU();
    const GemmLayout layout = GENERATE(GemmLayout::nt, GemmLayout::nn);
    // Empty groups first, last and in between; one row; rows just past a tile; rows before the
    // first group and after the last, which no group owns.
    const std::vector<int> counts{0, 1, 77, 0, 129, 300, 64, 0};
    const std::vector<int> offsets = offsets_of(counts, 5);
    const int64_t rows = offsets.back() + 11;
    Case c{make(8, rows, 200, 136, layout, DType::bf16), offsets};
    run_case(c);
    // fp16 in, fp32 out, alpha and GELU; with B as weights, N not a multiple of 8 (B's rows as
    // K x N must be 16-byte aligned).
    Case f{make(8, rows, layout == GemmLayout::nt ? 131 : 136, 264, layout, DType::fp16), offsets};
    f.p.out_dtype = DType::fp32, f.p.alpha = 0.5f, f.p.epilogue = GemmEpilogue::gelu;
    run_case(f);
}

TEST_CASE("GemmGrouped (masked) writes each group's first counts rows only", "[gpu][gemm_grouped]") {
    TILEOPS_REQUIRE_GPU();
    const GemmLayout layout = GENERATE(GemmLayout::nt, GemmLayout::nn);
    Case c{make(5, 70, 256, 256, layout, DType::fp16, GemmGroupLayout::masked), {0, 1, 70, 17, 65}};
    c.p.epilogue = GemmEpilogue::silu;
    run_case(c);
    // A decode step: many experts, a few tokens each.
    std::vector<int> counts(64);
    std::mt19937 rng(3);
    for (int& count : counts) count = static_cast<int>(rng() % 9);
    run_case(Case{make(64, 8, 384, 512, layout, DType::bf16, GemmGroupLayout::masked), counts});
}

TEST_CASE("GemmGrouped on padded and unaligned D", "[gpu][gemm_grouped]") {
    TILEOPS_REQUIRE_GPU();
    const std::vector<int> offsets = offsets_of({100, 0, 37, 200});
    Case padded{make(4, 337, 192, 128, GemmLayout::nt, DType::bf16), offsets};
    padded.pad = 8;  // rows still 16-byte aligned: TMA stores, the gaps untouched
    run_case(padded);
    Case shifted{make(4, 337, 192, 128, GemmLayout::nt, DType::bf16), offsets};
    shifted.d_misalign = 2;  // off 16 bytes: stored from registers
    run_case(shifted);
}

TEST_CASE("GemmGrouped reads the row counts on the device at each run", "[gpu][gemm_grouped]") {
    TILEOPS_REQUIRE_GPU();
    // Same op object, two routings: the second run must follow the new offsets.
    Case first{make(6, 400, 256, 192, GemmLayout::nt, DType::bf16), offsets_of({10, 90, 0, 150, 1, 149})};
    run_case(first);
    Case second = first;
    second.group_rows = offsets_of({200, 0, 0, 0, 0, 200});
    run_case(second);
}

TEST_CASE("GemmGrouped stays in bounds on hostile row counts", "[gpu][gemm_grouped]") {
    TILEOPS_REQUIRE_GPU();
    // Offsets negative and past the rows, counts negative and past the capacity: clamped, the
    // groups checked, the guard rows after D still poisoned. Decreasing offsets make groups
    // overlap (values unspecified): only the guards are checked.
    Case offsets{make(4, 300, 128, 64, GemmLayout::nt, DType::bf16), {-50, 100, 100, 280, 100000}};
    offsets.guard_rows = 64;
    run_case(offsets);
    Case decreasing{make(4, 300, 128, 64, GemmLayout::nt, DType::bf16), {0, 250, 40, 300, 10}};
    decreasing.guard_rows = 64, decreasing.check_values = false;
    run_case(decreasing);
    Case counts{make(4, 40, 128, 64, GemmLayout::nt, DType::bf16, GemmGroupLayout::masked), {-3, 41, 1 << 30, 7}};
    counts.guard_rows = 64;
    run_case(counts);
}

TEST_CASE("GemmGrouped: every config of the search space on uneven groups", "[gpu][gemm_grouped][search_space]") {
    TILEOPS_REQUIRE_GPU();
    Runtime& runtime = shared_runtime();
    const GemmLayout layout = GENERATE(GemmLayout::nt, GemmLayout::nn);
    // Groups of a few tiles (pairs of blocks appear in the space at 2 x block_m rows a group).
    const std::vector<int> offsets = offsets_of({300, 0, 513, 64, 260});
    const GemmGroupedProblem p = make(5, offsets.back(), 520, 320, layout, DType::bf16);
    for (const Config& config : test::this_shard(GemmGrouped(p).model().search_space(runtime.device()))) {
        Case c{p, offsets};
        c.config = config;
        run_case(c);
    }
}

TEST_CASE("GemmGrouped: the sm_80 kernel's configs (mma.sync, any sm_80+) on uneven groups", "[gpu][gemm_grouped]") {
    TILEOPS_REQUIRE_GPU();
    // The sm_80 kernel runs on every GPU this library supports, so it is checked wherever the
    // tests run: the configs an sm_80 device would search, on both layouts and a masked problem.
    const DeviceInfo sm80 = DeviceInfo::for_arch("sm_80");
    const std::vector<int> offsets = offsets_of({300, 0, 131, 64, 1});
    for (const GemmLayout layout : {GemmLayout::nt, GemmLayout::nn}) {
        const GemmGroupedProblem p = make(5, offsets.back() + 7, 264, 200, layout, DType::bf16);
        for (const Config& config : test::this_shard(GemmGrouped(p).model().search_space(sm80))) {
            Case c{p, offsets};
            c.config = config;
            run_case(c);
        }
    }
    Case masked{make(6, 40, 128, 96, GemmLayout::nt, DType::fp16, GemmGroupLayout::masked), {0, 40, 1, 17, 39, 2}};
    masked.config = GemmGrouped(masked.p).model().heuristic(sm80);
    run_case(masked);
}
