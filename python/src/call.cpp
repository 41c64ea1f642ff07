#include "call.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "tileops/error.hpp"

namespace tileops::python {
namespace {

// Leaves the CUDA context that was current (torch's, usually the same primary context) current
// again: a runtime makes its device's context current on this thread.
class KeepCurrentContext {
public:
    KeepCurrentContext() {
        if (cuda::driver().cuCtxGetCurrent(&saved_) != CUDA_SUCCESS) saved_ = nullptr;
    }
    ~KeepCurrentContext() {
        CUcontext now = nullptr;
        if (saved_ != nullptr && cuda::driver().cuCtxGetCurrent(&now) == CUDA_SUCCESS && now != saved_)
            cuda::driver().cuCtxSetCurrent(saved_);
    }
    KeepCurrentContext(const KeepCurrentContext&) = delete;
    KeepCurrentContext& operator=(const KeepCurrentContext&) = delete;

private:
    CUcontext saved_ = nullptr;
};

// A stream handle: a non-negative int that fits a pointer.
uintptr_t handle_of(py::handle value, const char* what) {
    if (PyLong_Check(value.ptr())) {
        const unsigned long long handle = PyLong_AsUnsignedLongLong(value.ptr());
        if (!(handle == static_cast<unsigned long long>(-1) && PyErr_Occurred()) && handle <= UINTPTR_MAX)
            return static_cast<uintptr_t>(handle);
        PyErr_Clear();
    }
    throw InvalidArgument(fmt::format("tileops_jit: stream{} must be a stream handle, an int in [0, 2^64); got {}", what,
                                      py::repr(value).cast<std::string>()));
}

uintptr_t stream_handle(py::handle stream) {
    if (PyLong_Check(stream.ptr())) return handle_of(stream, "");
    for (const char* attribute : {"cuda_stream", "ptr"})
        if (py::hasattr(stream, attribute))
            return handle_of(stream.attr(attribute), attribute[0] == 'c' ? ".cuda_stream" : ".ptr");
    throw InvalidArgument(fmt::format("tileops_jit: stream must be None, an int handle, or a stream object with "
                                      "cuda_stream or ptr; got a {}",
                                      py::str(py::type::of(stream).attr("__name__")).cast<std::string>()));
}

thread_local Mode current_mode = Mode::run;
thread_local std::string explanation;

// Runtimes are never destroyed, for the reason cached ops are not (OpCache).
std::map<int, std::unique_ptr<Runtime>>& runtimes() {
    static auto* by_device = new std::map<int, std::unique_ptr<Runtime>>();
    return *by_device;
}

}  // namespace

void set_mode(Mode mode) { current_mode = mode; }

std::string take_explanation() { return std::exchange(explanation, std::string()); }

float to_float32(double value, const char* op, const char* name) {
    const float narrowed = static_cast<float>(value);
    if (std::isfinite(value) && (std::isinf(narrowed) || (narrowed == 0.0f && value != 0.0)))
        throw InvalidArgument(fmt::format("tileops_jit.{}: {} = {} is out of float32's range (its magnitude must be "
                                          "between about 1.4e-45 and 3.4e38, or 0)",
                                          op, name, value));
    return narrowed;
}

Runtime& runtime_for(int device) {
    auto found = runtimes().find(device);
    if (found == runtimes().end()) {
        RuntimeOptions options;
        options.device = device;
        found = runtimes().emplace(device, std::make_unique<Runtime>(options)).first;
    }
    return *found->second;
}

OpCache& OpCache::instance() {
    static auto* cache = new OpCache();  // never destroyed (see the class)
    return *cache;
}

const std::shared_ptr<CachedOp>* OpCache::find(std::string_view key) {
    auto found = index_.find(key);
    if (found == index_.end()) return nullptr;
    CachedOp& entry = *found->second;
    if (!entry.pinned && entry.position != lru_.begin()) lru_.splice(lru_.begin(), lru_, entry.position);
    return &found->second;
}

void OpCache::insert(const std::shared_ptr<CachedOp>& entry) {
    if (entry->cached || index_.find(entry->key) != index_.end()) return;
    index_.emplace(std::string_view(entry->key), entry);
    entry->position = lru_.insert(lru_.begin(), entry.get());
    entry->cached = true;
    evict_to_bound();
}

void OpCache::pin(const std::shared_ptr<CachedOp>& entry) {
    if (entry->pinned) return;
    entry->pinned = true;
    if (entry->cached)
        pinned_.splice(pinned_.end(), lru_, entry->position);
    else
        kept_.push_back(entry);
}

void OpCache::set_capacity(size_t capacity) {
    if (capacity == 0) throw InvalidArgument("tileops_jit: the op cache's capacity must be at least 1");
    capacity_ = capacity;
    evict_to_bound();
}

void OpCache::evict_to_bound() {
    while (lru_.size() > capacity_) {
        CachedOp* victim = lru_.back();
        lru_.pop_back();
        victim->cached = false;
        ++evictions_;
        auto found = index_.find(std::string_view(victim->key));
        retired_.push_back(std::move(found->second));
        index_.erase(found);
    }
}

Call::Call(py::handle stream) {
    if (!stream.is_none()) {
        stream_ = stream_handle(stream);
        stream_known_ = true;
        if (!PyLong_Check(stream.ptr()) && py::hasattr(stream, "device_index")) {
            const py::object index = stream.attr("device_index");
            if (PyLong_Check(index.ptr())) stream_device_ = index.cast<int>();
        }
    }
}

void Call::resolve_stream(const PyTensor& first) {
    device_ = first.device;
    // A stream of another GPU would fail in the driver with a bare "invalid handle".
    if (stream_device_ >= 0 && stream_device_ != device_)
        throw InvalidArgument(fmt::format("tileops_jit: stream is on cuda:{}, the tensors on cuda:{}", stream_device_,
                                          device_));
    if (!stream_known_) stream_ = first.from_torch ? torch_current_stream(device_) : 0;
    stream_known_ = true;
}

const PyTensor& Call::tensor(py::handle object, const char* name) {
    PyTensor& t = tensors_.emplace_back();
    // DLPack: 1 asks for the legacy default stream, the protocol's name for handle 0.
    const long long dlpack_stream = stream_known_ ? (stream_ == 0 ? 1 : static_cast<long long>(stream_)) : 1;
    read_tensor(object.ptr(), name, dlpack_stream, t);
    if (device_ < 0) {
        resolve_stream(t);
    } else if (t.device != device_) {
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}' is on CUDA device {}, the call's other tensors "
                                          "on device {}",
                                          name, t.device, device_));
    }
    return t;
}

const PyTensor* Call::optional(py::handle object, const char* name) {
    return object.is_none() ? nullptr : &tensor(object, name);
}

bool Call::empty(bool work_empty, std::initializer_list<const PyTensor*> outputs, const char* op) {
    if (!work_empty) return false;
    for (const PyTensor* t : outputs)
        if (t != nullptr && t->numel() != 0)
            throw InvalidArgument(fmt::format("tileops_jit.{}: the problem is empty, but argument '{}' has {} elements "
                                              "(expected none)",
                                              op, t->name, t->numel()));
    return true;
}

py::object Call::nothing(const char* op) {
    if (current_mode == Mode::explain)
        explanation = fmt::format("tileops_jit.{}: an empty problem: nothing runs", op);
    return py::none();
}

std::string with_python_names(std::string_view message, OperandNames names) {
    std::string renamed;
    size_t at = 0;
    while (at < message.size()) {
        const size_t open = message.find('\'', at);
        const size_t close = open == std::string_view::npos ? open : message.find('\'', open + 1);
        if (close == std::string_view::npos) break;
        const std::string_view quoted = message.substr(open + 1, close - open - 1);
        renamed.append(message.substr(at, open + 1 - at));
        const auto match = std::find_if(names.begin(), names.end(), [&](const auto& n) { return n.first == quoted; });
        renamed.append(match != names.end() ? match->second : quoted);
        renamed.push_back('\'');
        at = close + 1;
    }
    renamed.append(message.substr(std::min(at, message.size())));
    return renamed;
}

py::object Call::finish(Op& op, Inputs inputs, Outputs outputs, OperandNames names) {
    try {
        return run_or_explain(op, inputs, outputs);
    } catch (const InvalidArgument& e) {
        if (names.size() == 0) throw;
        throw InvalidArgument(with_python_names(e.what(), names));
    }
}

py::object Call::run_or_explain(Op& op, Inputs inputs, Outputs outputs) {
    if (device_ < 0) throw InvalidArgument("tileops_jit: the call has no tensor to take its device from");
    // The hot path: a cached op run on a device whose runtime exists; run() checks the operands
    // itself. Otherwise the operand checks come first: they need no GPU, so bad arguments are
    // reported the same on a machine without one, and an op enters the cache only once they pass.
    const Mode mode = current_mode;
    auto found = runtimes().find(device_);
    Runtime* runtime = found != runtimes().end() ? found->second.get() : nullptr;
    if (fresh_ || runtime == nullptr || mode != Mode::run) op.check(inputs, outputs);
    if (fresh_) {
        OpCache::instance().insert(entry_);
        fresh_ = false;
    }
    KeepCurrentContext keep;
    if (runtime == nullptr) runtime = &runtime_for(device_);
    const auto stream = reinterpret_cast<CUstream>(stream_);
    bool capturing = false;
    {
        // Nothing below touches a Python object: the tensors were read, the op is held by entry_.
        py::gil_scoped_release unlocked;
        switch (mode) {
        case Mode::explain: explanation = runtime->explain(op); break;
        case Mode::prepare: runtime->prepare(op); break;
        case Mode::run:
            op.run(*runtime, inputs, outputs, stream);
            capturing = cuda::stream_is_capturing(stream);
            break;
        }
    }
    // A CUDA graph captured on the stream may hold the op's workspace: the op must stay. Retired
    // ops are freed only outside a capture.
    if (capturing)
        OpCache::instance().pin(entry_);
    else if (mode == Mode::run && OpCache::instance().has_retired())
        OpCache::instance().release_retired();
    return py::none();
}

}  // namespace tileops::python
