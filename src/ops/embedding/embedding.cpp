// Token embedding: problem checks, tuning key and kernel choice (EmbeddingModel), and
// Embedding::run. Kernel: kernel_templates/embedding/embedding.cuh.
#include "tileops/embedding.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "tileops/error.hpp"

namespace tileops {
namespace detail {
namespace {

constexpr const char* kOp = "Embedding";
constexpr int64_t kMaxGridY = 65535;  // tokens beyond it are walked in steps of the grid

}  // namespace

class EmbeddingModel final : public OpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const EmbeddingProblem& problem() const noexcept { return p_; }
    explicit EmbeddingModel(const EmbeddingProblem& p)
        : p_(p), shape_vec_(widest_dividing_vector(8, {p.hidden, p.table_stride, p.out_stride})) {}

    std::string op_name() const override { return "embedding"; }
    std::vector<long long> shape() const override { return {p_.num_tokens, p_.vocab_size, p_.hidden}; }
    std::string dtype_key() const override {
        if (p_.dtype == *p_.out_dtype) return dtype_name(p_.dtype);
        return fmt::format("{}->{}", dtype_name(p_.dtype), dtype_name(*p_.out_dtype));
    }
    std::string flags() const override { return p_.positions ? fmt::format("positions{}", p_.max_positions) : ""; }

    std::vector<OperandSpec> operands() const override {
        std::vector<OperandSpec> list{
            {"ids", DType::int32, 0, p_.num_tokens, p_.num_tokens, false, OperandFill::scrambled_index, p_.vocab_size},
            {"table", p_.dtype, p_.vocab_size, p_.hidden, p_.table_stride, false}};
        // A gather: at most one table row a token is read.
        list.back().rows_read = std::min(p_.num_tokens, p_.vocab_size);
        if (p_.positions) {
            list.push_back({"positions", DType::int32, 0, p_.num_tokens, p_.num_tokens, false,
                            OperandFill::scrambled_index, p_.max_positions});
            list.push_back({"position_table", p_.dtype, p_.max_positions, p_.hidden, p_.table_stride, false});
            list.back().rows_read = std::min(p_.num_tokens, p_.max_positions);
        }
        list.push_back({"y", *p_.out_dtype, p_.num_tokens, p_.hidden, p_.out_stride, true});
        return list;
    }

    // 16-byte accesses; a block spans the row when it is short, else 256 threads.
    Config heuristic(const DeviceInfo&) const override {
        const long long vec = max_vec();
        const long long vectors = (p_.hidden + vec - 1) / vec;
        const long long threads = std::clamp<long long>((vectors + 31) / 32 * 32, 32, 256);
        return {{"threads", threads}, {"vec", vec}};
    }

    std::vector<Config> search_space(const DeviceInfo& device) const override {
        std::vector<Config> candidates;
        for (long long threads : {32, 64, 128, 256, 512})
            for (long long vec = max_vec(); vec >= std::max(1LL, max_vec() / 4); vec /= 2)
                candidates.push_back({{"threads", threads}, {"vec", vec}});
        return valid_configs(candidates, device);
    }

    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        long long threads = 0, vec = 0;
        if (auto why = read_tunables(config, op_name(), {{"threads", &threads}, {"vec", &vec}})) return why;
        if (auto why = block_threads_reason(threads, device)) return why;
        if (auto why = vector_width_reason(vec, max_vec())) return why;
        // Counted at one element a vector: a launch narrows the vector for misaligned operands.
        if ((p_.hidden + threads - 1) / threads > std::numeric_limits<int>::max()) return "too many blocks along the row";
        return std::nullopt;
    }

    std::vector<int> vector_widths(const Config& config) const override {
        return halving_widths(std::min(static_cast<int>(config.at("vec")), shape_vec_));
    }

    LaunchPlan plan(const Config& config, int vec, const DeviceInfo&) const override {
        const long long threads = config.at("threads");
        LaunchPlan plan;
        plan.template_file = "embedding/embedding.cuh";
        plan.name_expression = fmt::format("tileops::embedding_kernel<{}, {}, {}, {}, {}>", device_type_name(p_.dtype),
                                           device_type_name(*p_.out_dtype), vec, threads, p_.positions);
        plan.grid[0] = static_cast<unsigned>((p_.hidden + threads * vec - 1) / (threads * vec));
        plan.grid[1] = static_cast<unsigned>(std::min(p_.num_tokens, kMaxGridY));
        plan.block[0] = static_cast<unsigned>(threads);
        return plan;
    }

    int shape_vec() const noexcept { return shape_vec_; }

private:
    long long max_vec() const {
        return static_cast<long long>(16 / std::max(dtype_size(p_.dtype), dtype_size(*p_.out_dtype)));
    }

    EmbeddingProblem p_;
    int shape_vec_;
};

namespace {

EmbeddingProblem normalized(EmbeddingProblem p) {
    check_extent(kOp, p.num_tokens, p.hidden);
    check_in_range(kOp, "hidden", p.hidden, 1, std::numeric_limits<int32_t>::max());
    check_in_range(kOp, "vocab_size", p.vocab_size, 1, std::numeric_limits<int32_t>::max());
    if (!p.out_dtype) p.out_dtype = p.dtype;
    check_float_dtype(kOp, "dtype", p.dtype);
    check_float_dtype(kOp, "out_dtype", *p.out_dtype);
    p.table_stride = row_stride(kOp, "table_stride", p.table_stride, p.vocab_size, p.hidden);
    p.out_stride = row_stride(kOp, "out_stride", p.out_stride, p.num_tokens, p.hidden);
    if (p.positions) {
        check_in_range(kOp, "max_positions", p.max_positions, 1, std::numeric_limits<int32_t>::max());
        check_span(kOp, "the position table", p.hidden, {{"table_stride", p.max_positions, p.table_stride}});
    } else {
        p.max_positions = 0;  // unused: a leftover value must not key or refuse anything
    }
    return p;
}

// Checks run()'s operands; returns the widest vector width the shape and every pointer allow.
int bind(const EmbeddingProblem& p, int shape_vec, Inputs inputs, Outputs outputs) {
    check_count(kOp, "inputs", inputs.size(), p.positions ? 4 : 2,
                p.positions ? "ids, table, positions, position_table" : "ids, table");
    check_count(kOp, "outputs", outputs.size(), 1, "y");
    const TensorArg& ids = inputs.begin()[0];
    const TensorArg& table = inputs.begin()[1];
    const OutputArg& y = outputs.begin()[0];
    const size_t in_bytes = dtype_size(p.dtype);
    const RowsSpan ids_span = check_operand(kOp, "ids", ids.data(), ids.view(), DType::int32, 0, p.num_tokens, 1);
    const RowsSpan table_span =
        check_operand(kOp, "table", table.data(), table.view(), p.dtype, p.vocab_size, p.hidden, p.table_stride);
    const RowsSpan y_span = check_operand(kOp, "y", y.data(), y.view(), *p.out_dtype, p.num_tokens, p.hidden, p.out_stride);
    check_output_overlap(kOp, y_span, ids_span, false);
    check_output_overlap(kOp, y_span, table_span, false);
    int vec = widest_aligned_vector(shape_vec, table.data(), in_bytes);
    if (p.positions) {
        const TensorArg& positions = inputs.begin()[2];
        const TensorArg& position_table = inputs.begin()[3];
        const RowsSpan positions_span =
            check_operand(kOp, "positions", positions.data(), positions.view(), DType::int32, 0, p.num_tokens, 1);
        const RowsSpan position_table_span = check_operand(kOp, "position_table", position_table.data(),
                                                           position_table.view(), p.dtype, p.max_positions, p.hidden,
                                                           p.table_stride);
        check_output_overlap(kOp, y_span, positions_span, false);
        check_output_overlap(kOp, y_span, position_table_span, false);
        vec = widest_aligned_vector(vec, position_table.data(), in_bytes);
    }
    return widest_aligned_vector(vec, y.data(), dtype_size(*p.out_dtype));
}

}  // namespace
}  // namespace detail

Embedding::Embedding(const EmbeddingProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::EmbeddingModel>(detail::normalized(problem)));
}

namespace detail {

int EmbeddingModel::vector_width(Inputs inputs, Outputs outputs) const {
    return detail::bind(p_, shape_vec(), inputs, outputs);
}

void EmbeddingModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const EmbeddingProblem& p = p_;
    const void* ids = inputs.begin()[0].data();
    const void* table = inputs.begin()[1].data();
    const void* positions = p.positions ? inputs.begin()[2].data() : nullptr;
    const void* position_table = p.positions ? inputs.begin()[3].data() : nullptr;
    void* y = outputs.begin()[0].data();
    long long vocab = p.vocab_size, max_positions = p.max_positions, table_stride = p.table_stride;
    long long out_stride = p.out_stride, tokens = p.num_tokens, hidden = p.hidden;
    void* args[] = {&ids, &table, &vocab, &positions, &position_table, &max_positions, &table_stride,
                    &y,   &out_stride, &tokens, &hidden};
    detail::launch(launch, args, stream, *this);
}

}  // namespace detail
}  // namespace tileops
