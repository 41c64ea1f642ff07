#include "ops/registry.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tileops/error.hpp"

namespace tileops::detail {

// Each family's folder defines its entry (ops/<family>/<family>_family.cpp).
OpFamily rows_family();
OpFamily elementwise_family();
OpFamily gemm_family();
OpFamily gemm_fp8_family();
OpFamily flash_attention_family();
OpFamily decode_attention_family();
OpFamily mla_decode_family();
OpFamily embedding_family();
OpFamily rope_family();
OpFamily sampling_family();
OpFamily quantize_family();
OpFamily moe_routing_family();

const std::vector<OpFamily>& op_families() {
    static const std::vector<OpFamily> families = {
        rows_family(),
        elementwise_family(),
        gemm_family(),
        gemm_fp8_family(),
        flash_attention_family(),
        decode_attention_family(),
        mla_decode_family(),
        embedding_family(),
        rope_family(),
        sampling_family(),
        quantize_family(),
        moe_routing_family(),
    };
    return families;
}

const OpKind* find_op_kind(const std::string& name) {
    for (const OpFamily& family : op_families())
        for (const OpKind& kind : family.ops)
            if (kind.name == name) return &kind;
    return nullptr;
}

const std::vector<std::string>& known_ops() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> list;
        for (const OpFamily& family : op_families())
            for (const OpKind& kind : family.ops) list.push_back(kind.name);
        return list;
    }();
    return names;
}

std::unique_ptr<Op> make_op(const ProblemSpec& spec) {
    const OpKind* kind = find_op_kind(spec.op);
    if (kind == nullptr)
        throw InvalidArgument(fmt::format("tileops: unknown op '{}' (known: {})", spec.op, fmt::join(known_ops(), ", ")));
    // Every family's numbered flags (pageN, rotN, windowN, positionsN): two of one kind contradict.
    check_flags_distinct(spec.op, split_flags(spec.flags), {"page", "rot", "window", "positions", "dv"});
    return kind->make(spec);
}

std::vector<std::unique_ptr<Op>> representative_ops() {
    std::vector<std::unique_ptr<Op>> ops;
    for (const OpFamily& family : op_families())
        for (std::unique_ptr<Op>& op : family.representative_ops()) ops.push_back(std::move(op));
    return ops;
}

}  // namespace tileops::detail
