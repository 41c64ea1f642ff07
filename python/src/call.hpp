// One call from Python into an op: its tensors (all on one CUDA device), the stream it runs on, the
// runtime of that device, and the op for its problem (built once per problem and kept).
#pragma once

#include <pybind11/pybind11.h>

#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>

#include "python_tensor.hpp"
#include "tileops/op.hpp"
#include "tileops/runtime.hpp"

namespace tileops::python {

namespace py = pybind11;

// What a call does with the op it resolves: run it, or (for tileops_jit.explain and prepare)
// explain its config or compile its kernels without running. Set per thread, so that the hot path
// passes no mode argument.
enum class Mode { run, explain, prepare };
void set_mode(Mode mode);
// The explanation the last call in explain mode on this thread produced (then cleared).
std::string take_explanation();

// The runtime of CUDA device `device`, created on first use and kept for the process's life.
Runtime& runtime_for(int device);

// The problem struct `P` with its padding zeroed, so that its bytes are a key: two problems with
// equal fields have equal bytes. Fields are set on it after construction; optional fields are
// only ever engaged, never reset, so a disengaged optional's bytes stay zero.
template <class P>
class ProblemKey {
public:
    ProblemKey() { new (storage_) P; }
    ~ProblemKey() { problem().~P(); }
    ProblemKey(const ProblemKey&) = delete;
    ProblemKey& operator=(const ProblemKey&) = delete;
    P& problem() noexcept { return *std::launder(reinterpret_cast<P*>(storage_)); }
    std::string_view bytes() const noexcept { return {reinterpret_cast<const char*>(storage_), sizeof(P)}; }

private:
    alignas(P) unsigned char storage_[sizeof(P)] = {};
};

class Call {
    // Looks keys up by view, so a hit allocates nothing.
    struct KeyHash {
        using is_transparent = void;
        size_t operator()(std::string_view bytes) const noexcept { return std::hash<std::string_view>{}(bytes); }
    };

public:
    // `stream`: None (torch's current stream for torch tensors, else the legacy default stream),
    // an int handle, or an object with `cuda_stream` (torch.cuda.Stream) or `ptr` (cupy).
    explicit Call(py::handle stream);

    // Reads a required tensor argument. All tensors of a call must be on one device.
    const PyTensor& tensor(py::handle object, const char* name);
    // Null when `object` is None.
    const PyTensor* optional(py::handle object, const char* name);

    // The op of `problem`, built on first use (the problem is validated then) and kept.
    // Ops are never destroyed: they may hold device memory, which must not be freed after the
    // CUDA context has gone at interpreter exit. The GIL serializes the map's users.
    template <class OpType, class P>
    OpType& op(ProblemKey<P>& key) {
        static auto* built = new std::unordered_map<std::string, std::unique_ptr<OpType>, KeyHash, std::equal_to<>>();
        auto found = built->find(key.bytes());
        if (found == built->end())
            found = built->emplace(std::string(key.bytes()), std::make_unique<OpType>(key.problem())).first;
        return *found->second;
    }

    // Runs, explains or prepares `op` on the call's device and stream; the CUDA context current
    // before the call is current again after it. Returns None (explain mode keeps the text for
    // take_explanation()).
    py::object finish(Op& op, Inputs inputs, Outputs outputs);

private:
    void resolve_stream(const PyTensor& first);

    bool stream_known_ = false;
    uintptr_t stream_ = 0;
    int device_ = -1;
    std::deque<PyTensor> tensors_;  // stable addresses
};

// Shared by every op's binding: the `stream` argument.
#define TILEOPS_PY_CALL_ARGS py::arg("stream") = py::none()

}  // namespace tileops::python
