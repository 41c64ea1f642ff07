#include "core/gemm_groups.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/gemm_operands.hpp"
#include "gemm/gemm_args.cuh"  // kernel_templates/: the schedules' indices
#include "tileops/error.hpp"

namespace tileops::detail {
namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

GemmGroups GemmGroups::checked(const char* op, int64_t groups, int64_t rows, int64_t n, int64_t k, GemmGroupLayout layout) {
    if (groups < 1 || groups > kGemmMaxGroups)
        throw InvalidArgument(fmt::format("tileops::{}: groups = {} is not in [1, {}]", op, groups, kGemmMaxGroups));
    for (auto [name, value] : {std::pair{"rows", rows}, {"n", n}, {"k", k}}) {
        if (value < 1) throw InvalidArgument(fmt::format("tileops::{}: {} must be >= 1, got {}", op, name, value));
        if (value > (int64_t{1} << 31) - 1)
            throw InvalidArgument(fmt::format("tileops::{}: {} = {} is larger than supported (2^31 - 1)", op, name, value));
    }
    if (layout != GemmGroupLayout::contiguous && layout != GemmGroupLayout::masked)
        throw InvalidArgument(fmt::format("tileops::{}: group_layout {} is not contiguous or masked", op, static_cast<int>(layout)));
    const GemmGroups g{groups, rows, layout == GemmGroupLayout::masked};
    if (g.flat_rows() > (int64_t{1} << 31) - 1)
        throw InvalidArgument(fmt::format("tileops::{}: groups x capacity = {} x {} rows is larger than supported (2^31 - 1)",
                                          op, groups, rows));
    return g;
}

int64_t GemmGroups::typical_rows() const { return std::max<int64_t>(1, masked ? rows : ceil_div(rows, groups)); }

int64_t GemmGroups::max_units(int64_t unit_rows, int64_t n, int64_t block_n) const {
    const int64_t units_m = masked ? groups * ceil_div(rows, unit_rows) : ceil_div(rows, unit_rows) + groups;
    return units_m * ceil_div(n, block_n);
}

int GemmGroups::a_box_rows(int block_m) const { return masked ? gemm_a_box_rows(rows, block_m) : block_m; }

int GemmGroups::schedule() const { return masked ? kGemmGroupsMasked : kGemmGroupsContiguous; }

GemmArgs GemmGroups::kernel_args(const GemmGroupsMatrices& m, int block_m) const {
    const int64_t flat = flat_rows();
    return GemmArgs{m.a, m.b, nullptr, nullptr, m.d,
                    flat, m.n, m.k, m.lda, m.ldb, m.ldd, m.ldd,
                    flat * m.lda, m.group_stride_b, flat * m.ldd, flat * m.ldd,
                    1, m.alpha, 0.0f, 1, nullptr, nullptr, a_box_rows(block_m), {},
                    static_cast<const int*>(m.group_rows), static_cast<int>(groups), masked ? rows : 0};
}

CUtensorMap GemmGroups::a_map(const GemmArgs& args, DType dtype) const {
    return gemm_tensor_map(args.a, dtype, args.m, args.k, args.lda, 1, args.batch_stride_a, static_cast<unsigned>(args.a_box_rows));
}

CUtensorMap GemmGroups::d_map(const GemmArgs& args, DType dtype) const {
    return gemm_tensor_map(args.d, dtype, args.m, args.n, args.ldd, 1, args.batch_stride_d, 64);
}

OperandSpec GemmGroups::rows_operand() const {
    OperandSpec spec{"group_rows", DType::int32, 0, rows_count(), rows_count(), false};
    // Contiguous: every row in a group, the groups as even as the rows allow (49152 rows in 160
    // groups: 307 or 308 each), so that a tuned candidate writes the whole output.
    spec.fill = masked ? OperandFill::constant : OperandFill::even_offsets;
    spec.fill_value = rows;
    return spec;
}

template <typename Arg>
RowsSpan GemmGroups::check_rows_operand(const char* op, const char* name, const Arg& arg, DType dtype, int64_t cols,
                                        int64_t ld) const {
    return check_gemm_operand(op, masked ? groups : 1, name, arg, dtype, rows, cols, ld, rows * ld);
}

template RowsSpan GemmGroups::check_rows_operand<TensorArg>(const char*, const char*, const TensorArg&, DType, int64_t,
                                                            int64_t) const;
template RowsSpan GemmGroups::check_rows_operand<OutputArg>(const char*, const char*, const OutputArg&, DType, int64_t,
                                                            int64_t) const;

RowsSpan GemmGroups::check_group_rows(const char* op, const TensorArg& arg) const {
    return check_operand(op, "group_rows", arg.data(), arg.view(), DType::int32, 0, rows_count(), 1);
}

}  // namespace tileops::detail
