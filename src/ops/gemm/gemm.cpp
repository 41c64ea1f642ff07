// GEMM: problem checks, tuning key and kernel choice (GemmModel), operand checks and the launch.
// Kernels: kernel_templates/gemm/: gemm_sm80.cuh (any sm_80+), gemm_sm90.cuh (sm_90a: TMA + wgmma),
// gemm_skinny.cuh (M <= 64) and gemm_gemv.cuh (M <= 4, CUDA cores); the last two read rows of any
// alignment in place.
// Configs: gemm_config.cpp.
#include "tileops/gemm.hpp"

#include <any>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/gemm_operands.hpp"
#include "core/launch.hpp"
#include "core/op_model.hpp"
#include "core/validation.hpp"
#include "cuda/driver.hpp"
#include "gemm/gemm_args.cuh"  // kernel_templates/: the kernels' argument block
#include "ops/gemm/gemm_config.hpp"
#include "tileops/error.hpp"

namespace tileops {

const char* gemm_layout_name(GemmLayout layout) noexcept { return layout == GemmLayout::nt ? "nt" : "nn"; }

const char* gemm_epilogue_name(GemmEpilogue epilogue) noexcept {
    switch (epilogue) {
        case GemmEpilogue::none: return "none";
        case GemmEpilogue::gelu: return "gelu";
        case GemmEpilogue::silu: return "silu";
    }
    return "none";
}

namespace detail {
namespace {

constexpr const char* kOp = "Gemm";
constexpr int64_t kMaxBatch = 65535;  // gridDim.z of the sm_80 kernel

bool nt(const GemmProblem& p) { return p.layout == GemmLayout::nt; }
int64_t b_rows(const GemmProblem& p) { return nt(p) ? p.n : p.k; }
int64_t b_cols(const GemmProblem& p) { return nt(p) ? p.k : p.n; }

GemmProblem normalized(GemmProblem p) {
    const int64_t dims[] = {p.m, p.n, p.k};
    const char* names[] = {"m", "n", "k"};
    for (int i = 0; i < 3; ++i) {
        if (dims[i] < 1) throw InvalidArgument(fmt::format("tileops::Gemm: {} must be >= 1, got {}", names[i], dims[i]));
        if (dims[i] > (int64_t{1} << 31) - 1)
            throw InvalidArgument(fmt::format("tileops::Gemm: {} = {} is larger than supported (2^31 - 1)", names[i], dims[i]));
    }
    if (p.dtype != DType::fp16 && p.dtype != DType::bf16)
        throw Unsupported(fmt::format("tileops::Gemm: dtype {} is not supported for A and B (fp16 or bf16)", dtype_name(p.dtype)));
    if (!p.out_dtype) p.out_dtype = p.dtype;
    check_float_dtype("Gemm", "out_dtype", *p.out_dtype);
    if (p.layout != GemmLayout::nn && p.layout != GemmLayout::nt)
        throw InvalidArgument(fmt::format("tileops::Gemm: layout {} is not nn or nt", static_cast<int>(p.layout)));
    if (p.epilogue != GemmEpilogue::none && p.epilogue != GemmEpilogue::gelu && p.epilogue != GemmEpilogue::silu)
        throw InvalidArgument(fmt::format("tileops::Gemm: epilogue {} is not none, gelu or silu", static_cast<int>(p.epilogue)));
    if (!std::isfinite(p.alpha) || !std::isfinite(p.beta))
        throw InvalidArgument(fmt::format("tileops::Gemm: alpha and beta must be finite, got {} and {}", p.alpha, p.beta));
    if (p.beta != 0.0f && !p.has_c)
        throw InvalidArgument(fmt::format("tileops::Gemm: beta = {} needs C: set has_c (and pass C to run())", p.beta));
    // The kernels read C whenever it is given, and 0 x NaN is NaN: BLAS leaves C unread at beta = 0.
    if (p.beta == 0.0f && p.has_c)
        throw InvalidArgument("tileops::Gemm: has_c with beta = 0 would still read C (NaN or Inf there reaches D): "
                              "leave has_c unset when beta is 0");
    if (p.batch < 1 || p.batch > kMaxBatch)
        throw InvalidArgument(fmt::format("tileops::Gemm: batch = {} is not in [1, {}]", p.batch, kMaxBatch));
    p.lda = gemm_leading_dimension(kOp, "lda", p.lda, p.k);
    p.ldb = gemm_leading_dimension(kOp, "ldb", p.ldb, b_cols(p));
    p.ldc = gemm_leading_dimension(kOp, "ldc", p.ldc, p.n);
    p.ldd = gemm_leading_dimension(kOp, "ldd", p.ldd, p.n);
    // Every offset the kernels form must fit in 64 bits: check the largest one, with headroom.
    check_gemm_offsets(kOp, std::max(p.m, std::max(p.n, p.k)), {{"lda", p.lda}, {"ldb", p.ldb}, {"ldc", p.ldc}, {"ldd", p.ldd}});
    p.batch_stride_a = gemm_batch_stride(kOp, "batch_stride_a", p.batch_stride_a, p.batch, p.m, p.k, p.lda, false);
    p.batch_stride_b = gemm_batch_stride(kOp, "batch_stride_b", p.batch_stride_b, p.batch, b_rows(p), b_cols(p), p.ldb, false);
    p.batch_stride_c = gemm_batch_stride(kOp, "batch_stride_c", p.batch_stride_c, p.batch, p.m, p.n, p.ldc, false);
    p.batch_stride_d = gemm_batch_stride(kOp, "batch_stride_d", p.batch_stride_d, p.batch, p.m, p.n, p.ldd, true);
    check_gemm_offsets(kOp, p.batch, {{"batch_stride_a", p.batch_stride_a}, {"batch_stride_b", p.batch_stride_b},
                                      {"batch_stride_c", p.batch_stride_c}, {"batch_stride_d", p.batch_stride_d}});
    return p;
}

const char* activation_index(GemmEpilogue e) { return e == GemmEpilogue::gelu ? "1" : e == GemmEpilogue::silu ? "2" : "0"; }

// Launch widths of a GEMM (OpModel::vector_widths, vector_width, plan). Every kernel loads A and B
// as 16-byte vectors, so what varies is how operands that are not 16-byte aligned get there:
//   8: A, B and D aligned (the sm_90 kernel stores a 16-bit D with TMA);
//   ragged_width(8): A and B aligned, D not (stored from registers);
//   1: A or B not aligned: copied first into the workspace with aligned rows (gemm_pack.cuh), but
//      for the skinny kernel, which reads any row in place;
//   ragged_width(1): both.
constexpr int kAlignedWidth = 8;
constexpr bool packs_operands(int width) { return width_vector(width) == 1; }
constexpr bool stores_d_aligned(int width) { return !is_ragged_width(width); }
constexpr int gemm_width(bool pack, bool d_aligned) {
    const int vec = pack ? 1 : kAlignedWidth;
    return d_aligned ? vec : ragged_width(vec);
}

int64_t round_up_to_vector(int64_t cols) { return (cols + 7) / 8 * 8; }

}  // namespace

class GemmModel final : public OpModel {
public:
    int vector_width(Inputs inputs, Outputs outputs) const override;
    void launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const override;
    const GemmProblem& problem() const noexcept { return p_; }
    explicit GemmModel(const GemmProblem& p)
        : p_(p),
          // 16-byte loads need every row of A and B to start 16 bytes apart from the last; a TMA
          // store of a 16-bit D needs its rows to start and end on 16 bytes.
          shape_{p.batch, p.m, p.n, p.k, dtype_size(p.dtype), nt(p), dtype_size(*p.out_dtype),
                 widest_dividing_vector(8, {p.lda, p.ldb, p.batch > 1 ? p.batch_stride_a : 0,
                                            p.batch > 1 ? p.batch_stride_b : 0}) == 8},
          d_store_(shape_.out_bytes, {p.n, p.ldd, p.batch > 1 ? p.batch_stride_d : 0}, 8) {}

    std::string op_name() const override { return "gemm"; }
    std::vector<long long> shape() const override {
        if (p_.batch > 1) return {p_.batch, p_.m, p_.n, p_.k};
        return {p_.m, p_.n, p_.k};
    }
    std::string dtype_key() const override {
        if (p_.dtype == *p_.out_dtype) return dtype_name(p_.dtype);
        return fmt::format("{}->{}", dtype_name(p_.dtype), dtype_name(*p_.out_dtype));
    }
    // The options that change the kernel, in a fixed order: "nt,beta,bias,gelu".
    std::string flags() const override {
        std::string text;
        auto add = [&](const char* flag) { text += (text.empty() ? "" : ",") + std::string(flag); };
        if (nt(p_)) add("nt");
        if (p_.has_c) add("beta");
        if (p_.bias) add("bias");
        if (p_.epilogue != GemmEpilogue::none) add(gemm_epilogue_name(p_.epilogue));
        return text;
    }

    Config heuristic(const DeviceInfo& device) const override { return gemm_heuristic(shape_, device).to_config(); }
    std::vector<Config> search_space(const DeviceInfo& device) const override {
        // On sm_90 the sm_80 kernel is only slower (a third of the TMA kernel's speed on H100) and
        // slow to compile: not searched.
        std::vector<Config> space;
        for (const GemmConfig& c : gemm_search_space(shape_, device))
            if (!(device.sm() == 90 && c.kernel == kGemmSm80)) space.push_back(c.to_config());
        return space;
    }
    std::optional<std::string> invalid_reason(const Config& config, const DeviceInfo& device) const override {
        GemmConfig c;
        try {
            c = GemmConfig::from(config);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return gemm_invalid_reason(c, shape_, device);
    }
    // A config tuned for a near shape is reused only where it would not copy rows here that the
    // skinny kernel reads in place, and where its tiles fill the GPU's waves about as well here as
    // there (sweep of 200 model shapes, H200: 64 x 4608 x 3584 took the 64 x 32 tiles tuned for
    // 64 x 4096 x 4096, 144 tiles in two waves, 22.9 us against the heuristic's 14.3).
    std::optional<std::string> neighbour_misfit(const std::vector<long long>& tuned_shape, const Config& config,
                                                const DeviceInfo& device) const override {
        const GemmConfig c = GemmConfig::from(config);
        // The key holds no leading dimensions: 1 x 4096 x 4095 finds 1 x 4096 x 4096's TMA tiles,
        // which would copy A and B first here.
        if (gemm_reads_in_place(gemm_heuristic(shape_, device).kernel) && !gemm_reads_in_place(c.kernel))
            return std::string("its kernel would copy A and B into aligned rows first here; the skinny and gemv kernels "
                               "read these rows (off 16 bytes) in place");
        GemmShape there = shape_;
        const size_t first = tuned_shape.size() == 4 ? 1 : 0;
        if (tuned_shape.size() != 3 + first) return std::nullopt;
        there.batch = first == 1 ? tuned_shape[0] : 1;
        there.m = tuned_shape[first], there.n = tuned_shape[first + 1], there.k = tuned_shape[first + 2];
        const double here_fill = gemm_slot_fill(c, shape_, device), there_fill = gemm_slot_fill(c, there, device);
        if (here_fill >= 0.9 * there_fill) return std::nullopt;
        return fmt::format("its {} x {} tiles keep {:.0f}% of the GPU's tile slots busy here, {:.0f}% on the shape it "
                           "was tuned for", c.block_m, c.block_n, 100 * here_fill, 100 * there_fill);
    }
    // Compile time grows with a TMA kernel's accumulator tile: 128 x 128 tiles (two consumers)
    // compile in ~0.4 s against 1.1 s for 128 x 256 (sm_90a, 2-core host), and run at about 90%
    // of their speed (gemm_heuristic's table).
    std::optional<Config> quick_config(const Config& config, const DeviceInfo& device) const override {
        const GemmConfig chosen = GemmConfig::from(config);
        if (chosen.kernel != kGemmSm90 || chosen.block_m * chosen.block_n / chosen.consumers <= 128 * 128 / 2)
            return std::nullopt;
        GemmConfig quick = chosen;
        quick.block_m = 128, quick.block_n = 128, quick.block_k = 64, quick.consumers = 2;
        quick.pingpong = 0, quick.cluster = 1, quick.split_k = 1, quick.stages = 4;
        if (gemm_invalid_reason(quick, shape_, device)) return std::nullopt;
        return quick.to_config();
    }
    // Split K's counters and partial sums (gemm_reduce_splits in gemm_sm90.cuh), and the copies
    // of A and B of a launch that packs them.
    size_t workspace_bytes(const Config& config, int width) const override {
        return launch_details(GemmConfig::from(config), width).workspace_bytes;
    }
    // Every width run() may pick for pointers of any alignment, given what the shape allows.
    std::vector<int> vector_widths(const Config&) const override {
        std::vector<int> widths;
        for (bool pack : {false, true})
            for (bool d_aligned : {true, false})
                if ((pack || shape_.rows_aligned) && (!d_aligned || d_store_.rows_aligned()))
                    widths.push_back(gemm_width(pack, d_aligned));
        return widths;
    }

    LaunchPlan plan(const Config& config, int width, const DeviceInfo& device) const override {
        const GemmConfig c = GemmConfig::from(config);
        LaunchPlan plan;
        plan.shared_bytes = c.shared_bytes(shape_);
        plan.block[0] = static_cast<unsigned>(c.threads());
        const std::string types = fmt::format("{}, {}, {}", device_type_name(p_.dtype), device_type_name(*p_.out_dtype),
                                              nt(p_) ? "true" : "false");
        const std::string epilogue = fmt::format("{}, {}, {}", p_.has_c ? "true" : "false", p_.bias ? "true" : "false",
                                                 activation_index(p_.epilogue));
        const char* kernel_prefix = c.kernel == kGemmSm90 ? "gemm_sm90" : "gemm_sm80";
        if (launch_packs(c, width)) {
            // One thread a 16-byte chunk of a copy (blockIdx.y: A or B), the blocks striding over
            // the larger of the two, at most a full GPU's worth.
            const int64_t chunks = p_.batch * std::max(p_.m * round_up_to_vector(p_.k), b_rows(p_) * round_up_to_vector(b_cols(p_))) / 8;
            plan.before.name_expression = fmt::format("tileops::{}_pack_kernel<{}>", kernel_prefix, device_type_name(p_.dtype));
            plan.before.grid[0] = static_cast<unsigned>(std::min<int64_t>((chunks + 255) / 256, int64_t{device.sm_count} * 8));
            plan.before.grid[1] = 2;
            plan.before.block[0] = 256;
        }
        plan.details = launch_details(c, width);
        if (c.kernel == kGemmSm90) {
            const bool tma_store = stores_d_aligned(width) && gemm_sm90_stores_with_tma(shape_, c);
            plan.template_file = "gemm/gemm_sm90.cuh";
            plan.name_expression = gemm_kernel_name(c, types, epilogue, tma_store, 0);
            // Persistent: one block per SM at most, each (pair) walking units of `cluster` tiles.
            const int64_t units = (p_.m + c.block_m * c.cluster - 1) / (c.block_m * c.cluster) *
                                  ((p_.n + c.block_n - 1) / c.block_n) * p_.batch * c.split_k;
            plan.grid[0] = static_cast<unsigned>(std::min<int64_t>(units, device.sm_count / c.cluster) * c.cluster);
            plan.cluster = static_cast<unsigned>(c.cluster);
            plan.persistent = true;
        } else if (gemm_reads_in_place(c.kernel)) {
            const bool gemv = c.kernel == kGemmGemv;
            plan.template_file = gemv ? "gemm/gemm_gemv.cuh" : "gemm/gemm_skinny.cuh";
            // The gemv kernel's blocks of a cluster split K (sm_90, NN).
            const std::string stages_and_cluster = gemv ? fmt::format("{}, {}", c.stages, c.cluster) : std::to_string(c.stages);
            plan.name_expression = fmt::format("tileops::{}_kernel<{}, {}, {}, {}, {}, {}, {}, {}>", gemv ? "gemm_gemv" : "gemm_skinny",
                                               device_type_name(p_.dtype), device_type_name(*p_.out_dtype), c.block_m,
                                               c.block_n, c.warps, stages_and_cluster, epilogue, nt(p_) ? "true" : "false");
            plan.grid[0] = static_cast<unsigned>((p_.n + c.block_n - 1) / c.block_n * (gemv ? c.cluster : 1));
            plan.cluster = static_cast<unsigned>(gemv ? c.cluster : 1);
            plan.grid[1] = static_cast<unsigned>((p_.m + c.block_m - 1) / c.block_m);
            plan.grid[2] = static_cast<unsigned>(p_.batch);
        } else {
            plan.template_file = "gemm/gemm_sm80.cuh";
            plan.name_expression = gemm_kernel_name(c, types, epilogue, false, 0);
            plan.grid[0] = static_cast<unsigned>(gemm_tiles(c, shape_) / p_.batch);
            plan.grid[2] = static_cast<unsigned>(p_.batch);
        }
        return plan;
    }

    std::vector<OperandSpec> operands() const override {
        // A batch is described as one tall matrix whose rows cover every entry (the autotuner
        // allocates (rows - 1) * stride + cols elements).
        auto spec = [&](const char* name, DType dtype, int64_t rows, int64_t cols, int64_t ld, int64_t stride, bool out) {
            const int64_t extent = (p_.batch - 1) * stride + gemm_matrix_extent(rows, cols, ld);
            return OperandSpec{name, dtype, (extent - cols + ld - 1) / ld + 1, cols, ld, out};
        };
        std::vector<OperandSpec> list{spec("A", p_.dtype, p_.m, p_.k, p_.lda, p_.batch_stride_a, false),
                                      spec("B", p_.dtype, b_rows(p_), b_cols(p_), p_.ldb, p_.batch_stride_b, false)};
        if (p_.has_c) list.push_back(spec("C", *p_.out_dtype, p_.m, p_.n, p_.ldc, p_.batch_stride_c, false));
        if (p_.bias) list.push_back({"bias", p_.dtype, 0, p_.n, p_.n, false});
        list.push_back(spec("D", *p_.out_dtype, p_.m, p_.n, p_.ldd, p_.batch_stride_d, true));
        return list;
    }

    // Whether the rows of A (or B) at this pointer are 16-byte aligned; else the launch packs them.
    bool input_aligned(const void* data) const {
        return shape_.rows_aligned && widest_aligned_vector(8, data, dtype_size(p_.dtype)) == 8;
    }
    // Whether D's rows can be stored with TMA.

private:
    // Whether a launch copies A and B into aligned rows first: where they are not 16-byte aligned,
    // but for the skinny and gemv kernels, which read rows in place.
    static bool launch_packs(const GemmConfig& c, int width) { return packs_operands(width) && !gemm_reads_in_place(c.kernel); }
    // The launch's workspace: split K's counters and partial sums, then, for a launch that copies
    // A and B (launch_packs), room for both copies, rows padded to 8 elements, each starting on
    // a 256-byte boundary.
    GemmLaunch launch_details(const GemmConfig& c, int width) const {
        GemmLaunch details;
        details.tma = c.kernel == kGemmSm90;
        details.block_m = c.block_m, details.block_n = c.block_n, details.split_k = c.split_k;
        details.paired = c.kernel == kGemmSm90 && c.cluster == 2;
        details.split = GemmSplitWorkspace::of(c, shape_);
        details.workspace_bytes = details.split.bytes();
        details.packs = launch_packs(c, width);
        if (details.packs) {
            auto reserve = [&](int64_t rows, int64_t cols) {
                const size_t offset = (details.workspace_bytes + 255) / 256 * 256;
                details.workspace_bytes = offset + static_cast<size_t>(p_.batch * rows * round_up_to_vector(cols)) * shape_.in_bytes;
                return offset;
            };
            details.pack_a_offset = reserve(p_.m, p_.k);
            details.pack_b_offset = reserve(b_rows(p_), b_cols(p_));
        }
        return details;
    }

    GemmProblem p_;
    GemmShape shape_;
    GemmDStore d_store_;    // gemm_width() names the launch widths: D stored with TMA or not
};

namespace {

// Checks run()'s operands (throws InvalidArgument naming the one that is wrong).
void bind(const GemmProblem& p, Inputs inputs, Outputs outputs) {
    const size_t expected = 2 + (p.has_c ? 1 : 0) + (p.bias ? 1 : 0);
    const char* names = p.has_c && p.bias ? "A, B, C, bias" : p.has_c ? "A, B, C" : p.bias ? "A, B, bias" : "A, B";
    check_count("Gemm", "inputs", inputs.size(), expected, names);
    check_count("Gemm", "outputs", outputs.size(), 1, "D");
    const DType out = *p.out_dtype;
    const TensorArg& a = inputs[0];
    const TensorArg& b = inputs[1];
    const OutputArg& d = outputs[0];
    const RowsSpan a_span = check_gemm_operand(kOp, p.batch, "A", a, p.dtype, p.m, p.k, p.lda, p.batch_stride_a);
    const RowsSpan b_span = check_gemm_operand(kOp, p.batch, "B", b, p.dtype, b_rows(p), b_cols(p), p.ldb, p.batch_stride_b);
    const RowsSpan d_span = check_gemm_operand(kOp, p.batch, "D", d, out, p.m, p.n, p.ldd, p.batch_stride_d);
    // Blocks write D where others still read their operands: any overlap with A, B or the bias
    // races (X = X W in place included), and with C all but exactly in place.
    if (p.has_c) {
        const TensorArg& c = inputs[2];
        if (outputs_conflict(d_span, check_gemm_operand(kOp, p.batch, "C", c, out, p.m, p.n, p.ldc, p.batch_stride_c), true))
            throw InvalidArgument("tileops::Gemm: C and D overlap (only C == D with the same leading dimension and batch "
                                  "stride, in place, is allowed)");
    }
    if (outputs_conflict(d_span, a_span, false))
        throw InvalidArgument("tileops::Gemm: D overlaps A (the output cannot be written over an operand)");
    if (outputs_conflict(d_span, b_span, false))
        throw InvalidArgument("tileops::Gemm: D overlaps B (the output cannot be written over an operand)");
    if (p.bias) {
        const TensorArg& bias = inputs[p.has_c ? 3 : 2];
        if (outputs_conflict(d_span, check_operand("Gemm", "bias", bias.data(), bias.view(), p.dtype, 0, p.n, 1), false))
            throw InvalidArgument("tileops::Gemm: D overlaps the bias (the output cannot be written over an operand)");
    }
}

}  // namespace
}  // namespace detail

Gemm::Gemm(const GemmProblem& problem) {
    problem_ = adopt(std::make_shared<const detail::GemmModel>(detail::normalized(problem)));
}

namespace detail {

int GemmModel::vector_width(Inputs inputs, Outputs outputs) const {
    detail::bind(p_, inputs, outputs);
    return gemm_width(!input_aligned(inputs[0].data()) || !input_aligned(inputs[1].data()), d_store_.aligned(outputs[0].data()));
}

void GemmModel::launch(const ResolvedLaunch& launch, Inputs inputs, Outputs outputs, CUstream stream) const {
    const GemmProblem& p = p_;
    GemmArgs args{inputs[0].data(),
                  inputs[1].data(),
                  p.has_c ? inputs[2].data() : nullptr,
                  p.bias ? inputs[p.has_c ? 3 : 2].data() : nullptr,
                  outputs[0].data(),
                  p.m, p.n, p.k, p.lda, p.ldb, p.ldc, p.ldd,
                  p.batch_stride_a, p.batch_stride_b, p.batch_stride_c, p.batch_stride_d,
                  p.batch, p.alpha, p.beta, 1, nullptr, nullptr, 0, {}, nullptr, 0, 0};
    const auto& details = std::any_cast<const GemmLaunch&>(launch.details);
    if (details.packs) {
        // A and B, where not aligned, are read from their copies (made by the `before` kernel).
        char* workspace = static_cast<char*>(launch.workspace_data());
        auto pack = [&](GemmPackedCopy& copy, const void*& data, long long& ld, long long& stride, int64_t rows,
                        int64_t cols, size_t offset) {
            const int64_t ld_to = round_up_to_vector(cols);
            copy = GemmPackedCopy{data, workspace + offset, rows, cols, ld, ld_to, stride, rows * ld_to};
            data = copy.to, ld = ld_to, stride = rows * ld_to;
        };
        if (!input_aligned(args.a)) pack(args.packs[0], args.a, args.lda, args.batch_stride_a, p.m, p.k, details.pack_a_offset);
        if (!input_aligned(args.b))
            pack(args.packs[1], args.b, args.ldb, args.batch_stride_b, b_rows(p), b_cols(p), details.pack_b_offset);
    }
    if (!details.tma) {  // the sm_80, skinny and gemv kernels
        void* params[] = {&args};
        detail::launch(launch, params, stream, *this);
        return;
    }
    // The TMA kernel: A is loaded block_m rows at a time, B block_n rows (N x K) or 64 rows of K (K x N).
    const unsigned block_n = static_cast<unsigned>(details.block_n);
    args.split_k = details.split_k;
    if (details.split.bytes() > 0) {
        args.split_counters = details.split.counters(launch.workspace_data());
        args.partials = details.split.partials(launch.workspace_data());
    }
    const unsigned b_rows = details.paired ? block_n / 2 : block_n;  // pairs load half each
    args.a_box_rows = detail::gemm_a_box_rows(p.m, details.block_m);
    alignas(64) CUtensorMap map_a = detail::gemm_tensor_map(args.a, p.dtype, p.m, p.k, args.lda, p.batch, args.batch_stride_a,
                                                       static_cast<unsigned>(args.a_box_rows));
    alignas(64) CUtensorMap map_b =
        detail::nt(p) ? detail::gemm_tensor_map(args.b, p.dtype, p.n, p.k, args.ldb, p.batch, args.batch_stride_b, b_rows)
                      : detail::gemm_tensor_map(args.b, p.dtype, p.k, p.n, args.ldb, p.batch, args.batch_stride_b, 64);
    // A 16-bit D with aligned rows is stored from shared memory in boxes of 64 x 64; the kernel
    // ignores map_d otherwise (and TMA could not describe unaligned rows).
    alignas(64) CUtensorMap map_d =
        dtype_size(*p.out_dtype) == 2 && d_store_.aligned(args.d)
            ? detail::gemm_tensor_map(args.d, *p.out_dtype, p.m, p.n, p.ldd, p.batch, p.batch_stride_d, 64)
            : map_a;
    void* params[] = {&map_a, &map_b, &map_d, &args};
    detail::launch(launch, params, stream, *this);
}

}  // namespace detail
}  // namespace tileops
