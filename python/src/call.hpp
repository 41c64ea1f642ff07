// One call from Python into an op: its tensors (all on one CUDA device), the stream it runs on, the
// runtime of that device, and the op for its problem (built once per problem, kept in a bounded
// cache).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <list>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

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

// {the op's operand name, the Python argument's}: see Call::finish.
using OperandName = std::pair<std::string_view, std::string_view>;
using OperandNames = std::span<const OperandName>;

// A float argument (Python passes doubles) as the op's float32. A value float32 cannot hold is
// refused by name: rounded to 0 it would silently become an op's default (a softmax scale of 0
// means 1 / sqrt(head_dim)), rounded to infinity it would poison every output.
float to_float32(double value, const char* op, const char* name);

// The address of problem_tag<P> names the problem type P in a cache key, so that problems of
// different types never share a key.
template <class P>
inline const char problem_tag = 0;

// The problem struct `P` with its padding zeroed, so that its bytes (after a tag naming P) are a
// key: two problems with equal fields have equal bytes. Fields are set on it after construction;
// optional fields are only ever engaged, never reset, so a disengaged optional's bytes stay zero.
template <class P>
class ProblemKey {
public:
    ProblemKey() {
        const void* tag = &problem_tag<P>;
        std::memcpy(storage_, &tag, sizeof(tag));
        new (storage_ + kOffset) P;
    }
    ~ProblemKey() { problem().~P(); }
    ProblemKey(const ProblemKey&) = delete;
    ProblemKey& operator=(const ProblemKey&) = delete;
    P& problem() noexcept { return *std::launder(reinterpret_cast<P*>(storage_ + kOffset)); }
    std::string_view bytes() const noexcept { return {reinterpret_cast<const char*>(storage_), sizeof(storage_)}; }

private:
    static constexpr size_t kOffset = (sizeof(const void*) + alignof(P) - 1) / alignof(P) * alignof(P);
    alignas(alignof(P) > alignof(const void*) ? alignof(P) : alignof(const void*)) unsigned char
        storage_[kOffset + sizeof(P)] = {};
};

// An op of the cache (below), shared by the cache and the calls running it: an op evicted while a
// call runs it (on another thread, the GIL released) is destroyed when that call ends.
struct CachedOp {
    std::string key;
    std::unique_ptr<Op> op;
    std::list<CachedOp*>::iterator position;  // in the cache's LRU list or its pinned list
    bool cached = false;                      // in the cache (false once evicted)
    bool pinned = false;                      // ran inside a CUDA graph capture: never destroyed
};

// The ops the module has built, one per problem (every thread's calls share them), at most
// capacity() of them (TILEOPS_PY_OP_CACHE_SIZE, default kDefaultCapacity) besides pinned ones: the
// least recently used is evicted when a new one would pass the bound. An evicted op is retired:
// destroyed (its device workspace freed) at the next run on a stream that is not capturing a CUDA
// graph (freeing memory during a capture would break it), or later, when a call still runs it.
// An op that ran inside a CUDA graph capture is pinned, never evicted nor destroyed: the graph
// may hold its workspace. Ops left at exit are never destroyed: their device memory must not be
// freed after the CUDA context has gone at interpreter exit. Every member is used with the GIL
// held, which serializes them.
class OpCache {
    // Looks keys up by view, so a hit allocates nothing.
    struct KeyHash {
        using is_transparent = void;
        size_t operator()(std::string_view bytes) const noexcept { return std::hash<std::string_view>{}(bytes); }
    };

public:
    static constexpr size_t kDefaultCapacity = 1024;
    static OpCache& instance();

    // The op of `key` (made the most recently used), or null.
    const std::shared_ptr<CachedOp>* find(std::string_view key);
    // Adds `entry` (its key and op set; an entry of the same key already there is kept), then
    // evicts down to the bound.
    void insert(const std::shared_ptr<CachedOp>& entry);
    // Keeps `entry` for the process's life (cached or evicted).
    void pin(const std::shared_ptr<CachedOp>& entry);
    // Throws InvalidArgument for 0; evicts down to the new bound.
    void set_capacity(size_t capacity);
    // Destroys the retired ops no call holds (the caller's stream is not capturing).
    void release_retired() { retired_.clear(); }
    bool has_retired() const noexcept { return !retired_.empty(); }

    size_t capacity() const noexcept { return capacity_; }
    size_t size() const noexcept { return index_.size(); }
    size_t pinned() const noexcept { return pinned_.size() + kept_.size(); }
    uint64_t evictions() const noexcept { return evictions_; }
    size_t retired() const noexcept { return retired_.size(); }

private:
    void evict_to_bound();

    std::unordered_map<std::string_view, std::shared_ptr<CachedOp>, KeyHash, std::equal_to<>> index_;  // keys: CachedOp::key
    std::list<CachedOp*> lru_;     // unpinned entries, the most recently used first
    std::list<CachedOp*> pinned_;  // pinned entries still in the index
    std::vector<std::shared_ptr<CachedOp>> kept_;     // pinned after their eviction
    std::vector<std::shared_ptr<CachedOp>> retired_;  // evicted, not destroyed yet
    size_t capacity_ = kDefaultCapacity;
    uint64_t evictions_ = 0;
};

class Call {
public:
    // `stream`: None (torch's current stream for torch tensors, else the legacy default stream),
    // an int handle, or an object with `cuda_stream` (torch.cuda.Stream) or `ptr` (cupy).
    explicit Call(py::handle stream);

    // Reads a required tensor argument. All tensors of a call must be on one device.
    const PyTensor& tensor(py::handle object, const char* name);
    // Null when `object` is None.
    const PyTensor* optional(py::handle object, const char* name);

    // Whether the call has no work: `work_empty` (the problem has no element), with every tensor
    // of `outputs` empty too (throws InvalidArgument naming `op` and the first that is not). The
    // binding then returns nothing() without building an op.
    bool empty(bool work_empty, std::initializer_list<const PyTensor*> outputs, const char* op);
    // None; in explain mode, an explanation that nothing runs.
    py::object nothing(const char* op);

    // The op of `problem`, from the cache or built (the problem is validated then: nothing is
    // cached when that throws). A built op enters the cache in finish(), once its operands pass
    // their checks; the call holds it until it ends.
    template <class OpType, class P>
    OpType& op(ProblemKey<P>& key) {
        if (const std::shared_ptr<CachedOp>* hit = OpCache::instance().find(key.bytes())) {
            entry_ = *hit;
        } else {
            auto entry = std::make_shared<CachedOp>();
            entry->op = std::make_unique<OpType>(key.problem());
            entry->key.assign(key.bytes());
            entry_ = std::move(entry);
            fresh_ = true;
        }
        return static_cast<OpType&>(*entry_->op);
    }

    // Runs, explains or prepares `op` (the one op() returned) on the call's device and stream,
    // the GIL released; the CUDA context current before the call is current again after it.
    // Returns None (explain mode keeps the text for take_explanation()). `names` maps the op's
    // operand names to the Python arguments they come from where the two differ (the C++ API's
    // 'y' is the package's 'out'): an InvalidArgument of the op names what the caller passed.
    py::object finish(Op& op, Inputs inputs, Outputs outputs, OperandNames names = {});

private:
    void resolve_stream(const PyTensor& first);
    py::object run_or_explain(Op& op, Inputs inputs, Outputs outputs);

    bool stream_known_ = false;
    bool fresh_ = false;  // entry_ was built by this call and is not cached yet
    uintptr_t stream_ = 0;
    int stream_device_ = -1;  // the device of a stream object that says it (torch's device_index)
    int device_ = -1;
    std::shared_ptr<CachedOp> entry_;
    std::deque<PyTensor> tensors_;  // stable addresses
};

// The GEMM ops' operands as the package names them (matmul, gemm_fp8, gemm_grouped).
inline constexpr OperandName kGemmNames[] = {{"A", "a"}, {"B", "b"}, {"C", "c"}, {"D", "out"}};
// The output of the ops whose C++ API calls it 'y' (row ops, elementwise, embedding).
inline constexpr OperandName kOutNamedY[] = {{"y", "out"}};

// `message` with every quoted operand name of `names` ('y') replaced by its Python name ('out').
std::string with_python_names(std::string_view message, OperandNames names);

// Shared by every op's binding: the `stream` argument.
#define TILEOPS_PY_CALL_ARGS py::arg("stream") = py::none()

}  // namespace tileops::python
