#include "autotune/operand_buffers.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>

#include "autotune/length_spread.hpp"
#include "util/host_dtype.hpp"
#include "util/parallel_for.hpp"

namespace tileops::tuning {
namespace {

// The most random bytes drawn for one operand; larger ones repeat them.
constexpr size_t kPatternBytes = size_t{64} << 20;

size_t extent_bytes(const detail::OperandSpec& spec) {
    const long long rows = spec.rows == 0 ? 1 : spec.rows;
    return static_cast<size_t>((rows - 1) * spec.stride + spec.cols) * dtype_size(spec.dtype);
}

// A stateless hash of the element index (splitmix64's finalizer): every element is drawn on its
// own, so the cores draw an operand together and the values do not depend on how it is cut.
uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// `values`: an index operand's values as the spread drew them (sequence lengths, or a grouped
// GEMM's uneven group offsets); empty where the fill alone decides them.
std::vector<uint8_t> input_bytes(const detail::OperandSpec& spec, size_t bytes, std::mt19937_64& rng,
                                 const std::vector<int32_t>& values) {
    std::vector<uint8_t> host(bytes);
    const size_t element = dtype_size(spec.dtype);
    const size_t n = bytes / element;
    if (!values.empty() && spec.dtype == DType::int32) {
        std::memcpy(host.data(), values.data(), std::min(bytes, values.size() * sizeof(int32_t)));
        return host;
    }
    if (spec.fill == detail::OperandFill::random) {
        // Uniform in [-2, 2) from the top 24 bits of each element's hash; 64 MB take ~0.3 s drawn
        // one after another with a distribution object, which made a 200-shape sweep host-bound.
        const uint64_t stream = rng();
        util::parallel_for_chunks(n, size_t{1} << 20, [&](size_t, size_t begin, size_t end) {
            for (size_t i = begin; i < end; ++i) {
                const float unit = static_cast<float>(mix(stream + i) >> 40) * (1.0f / 16777216.0f);
                util::encode_value(spec.dtype, 4.0f * unit - 2.0f, &host[i * element]);
            }
        });
        return host;
    }
    if (spec.fill == detail::OperandFill::constant_real) {
        for (size_t i = 0; i < n; ++i)
            util::encode_value(spec.dtype, static_cast<float>(spec.real_value), &host[i * element]);
        return host;
    }
    for (size_t i = 0; i < n; ++i) {
        const long long value = index_fill(spec, i, n);
        const int32_t index = static_cast<int32_t>(value);
        if (spec.dtype == DType::int32) std::memcpy(&host[i * element], &index, sizeof index);
        else util::encode_value(spec.dtype, static_cast<float>(value), &host[i * element]);
    }
    return host;
}

}  // namespace

long long index_fill(const detail::OperandSpec& spec, size_t i, size_t n) {
    switch (spec.fill) {
        case detail::OperandFill::scrambled_index: {
            // 7919 is prime, so i -> i * 7919 mod a modulus it does not divide is a permutation.
            const size_t modulus = spec.fill_value > 0 ? static_cast<size_t>(spec.fill_value) : 1;
            return static_cast<long long>((i * 7919u + 13u) % modulus);
        }
        case detail::OperandFill::multiples:
            return static_cast<long long>(i) * spec.fill_value;
        case detail::OperandFill::even_offsets:
            return n <= 1 ? 0 : even_offset(spec.fill_value, static_cast<long long>(n - 1), static_cast<long long>(i));
        default:
            return spec.fill_value;
    }
}

OperandBuffers::OperandBuffers(const detail::OpModel& model, uint64_t seed, LengthSpread spread)
    : specs_(model.operands()) {
    std::mt19937_64 rng(seed);
    // The operands the spread decides first (their own draw, so the other operands do not depend
    // on the spread): sequence lengths, with the share of the full cache they hold, and a grouped
    // GEMM's uneven group offsets (even ones are index_fill's).
    const uint64_t spread_seed = seed ^ 0x5eedf00dULL;
    std::vector<std::vector<int32_t>> spread_values(specs_.size());
    double held_share = 1.0;
    for (size_t i = 0; i < specs_.size(); ++i) {
        const detail::OperandSpec& spec = specs_[i];
        if (spec.fill == detail::OperandFill::even_offsets && spread != LengthSpread::uniform && spec.cols >= 1 &&
            spec.fill_value <= INT32_MAX) {
            for (int64_t offset : spread_group_offsets(spread, spec.cols - 1, spec.fill_value, spread_seed))
                spread_values[i].push_back(static_cast<int32_t>(offset));
        }
        if (spec.fill != detail::OperandFill::sequence_lengths) continue;
        spread_values[i] = spread_lengths(spread, spec.cols, spec.fill_value, spread_seed);
        double held = 0;
        for (int32_t len : spread_values[i]) held += len;
        const double full = static_cast<double>(spec.cols) * static_cast<double>(spec.fill_value);
        held_share = full > 0 ? held / full : 1.0;
    }
    buffers_.reserve(specs_.size());
    for (size_t i = 0; i < specs_.size(); ++i) {
        const detail::OperandSpec& spec = specs_[i];
        const size_t bytes = extent_bytes(spec);
        buffers_.emplace_back(bytes);
        bytes_moved_ += spec.bytes() * (spec.read_by_lengths ? held_share : 1.0);
        if (spec.output) {
            buffers_.back().fill_bytes(0xff);
            outputs_.emplace_back(buffers_.back().data());
        } else {
            // Random and constant floats repeat a pattern of at most kPatternBytes: a grouped
            // GEMM's experts' weights reach 15 GB, which the host would take minutes to draw.
            // Index operands are drawn whole (their values depend on the position).
            const bool repeats = spec.fill == detail::OperandFill::random || spec.fill == detail::OperandFill::constant_real;
            const size_t element = dtype_size(spec.dtype);
            const size_t drawn = repeats ? std::min(bytes, kPatternBytes / element * element) : bytes;
            std::vector<uint8_t> host = input_bytes(spec, drawn, rng, spread_values[i]);
            for (size_t offset = 0; offset < bytes; offset += drawn)
                buffers_.back().upload(host.data(), std::min(drawn, bytes - offset), offset);
            inputs_.emplace_back(buffers_.back().data());
        }
    }
}

void OperandBuffers::poison_outputs() {
    for (size_t i = 0; i < specs_.size(); ++i)
        if (specs_[i].output) buffers_[i].fill_bytes(specs_[i].partial ? 0x00 : 0xff);
}

std::vector<float> OperandBuffers::download_outputs() const {
    // Outputs of long-row problems reach 10^8 elements: one allocation, decoded on every core.
    auto rows_of = [](const auto& spec) { return spec.rows == 0 ? size_t{1} : static_cast<size_t>(spec.rows); };
    size_t count = 0;
    for (const auto& spec : specs_)
        if (spec.output) count += rows_of(spec) * static_cast<size_t>(spec.cols);
    std::vector<float> values(count);
    size_t base = 0;
    for (size_t i = 0; i < specs_.size(); ++i) {
        if (!specs_[i].output) continue;
        const auto& spec = specs_[i];
        std::vector<uint8_t> host(buffers_[i].size());
        buffers_[i].download(host.data(), host.size());
        const size_t element = dtype_size(spec.dtype);
        const size_t rows = rows_of(spec);
        const size_t cols = static_cast<size_t>(spec.cols), stride = static_cast<size_t>(spec.stride);
        util::parallel_for_chunks(rows, std::max<size_t>(1, (1 << 18) / std::max<size_t>(cols, 1)),
                                  [&](size_t, size_t begin, size_t end) {
                                      for (size_t r = begin; r < end; ++r)
                                          for (size_t c = 0; c < cols; ++c)
                                              values[base + r * cols + c] =
                                                  util::decode_value(spec.dtype, &host[(r * stride + c) * element]);
                                  });
        base += rows * cols;
    }
    return values;
}

}  // namespace tileops::tuning
