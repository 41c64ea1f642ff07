#include "call.hpp"

#include <fmt/format.h>

#include <map>
#include <utility>

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

uintptr_t stream_handle(py::handle stream) {
    if (py::isinstance<py::int_>(stream)) return stream.cast<uintptr_t>();
    for (const char* attribute : {"cuda_stream", "ptr"})
        if (py::hasattr(stream, attribute)) return stream.attr(attribute).cast<uintptr_t>();
    throw InvalidArgument(fmt::format("tileops_jit: stream must be None, an int handle, or a stream object with "
                                      "cuda_stream or ptr; got a {}",
                                      py::str(py::type::of(stream).attr("__name__")).cast<std::string>()));
}

thread_local Mode current_mode = Mode::run;
thread_local std::string explanation;

// Runtimes are never destroyed, for the reason ops are not (Call::op).
std::map<int, std::unique_ptr<Runtime>>& runtimes() {
    static auto* by_device = new std::map<int, std::unique_ptr<Runtime>>();
    return *by_device;
}

}  // namespace

void set_mode(Mode mode) { current_mode = mode; }

std::string take_explanation() { return std::exchange(explanation, std::string()); }

Runtime& runtime_for(int device) {
    auto found = runtimes().find(device);
    if (found == runtimes().end()) {
        RuntimeOptions options;
        options.device = device;
        found = runtimes().emplace(device, std::make_unique<Runtime>(options)).first;
    }
    return *found->second;
}

Call::Call(py::handle stream) {
    if (!stream.is_none()) {
        stream_ = stream_handle(stream);
        stream_known_ = true;
    }
}

void Call::resolve_stream(const PyTensor& first) {
    device_ = first.device;
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

py::object Call::finish(Op& op, Inputs inputs, Outputs outputs) {
    if (device_ < 0) throw InvalidArgument("tileops_jit: the call has no tensor to take its device from");
    // The hot path: a run on a device whose runtime exists; run() checks the operands itself.
    if (auto found = runtimes().find(device_); found != runtimes().end() && current_mode == Mode::run) {
        KeepCurrentContext keep;
        op.run(*found->second, inputs, outputs, reinterpret_cast<CUstream>(stream_));
        return py::none();
    }
    // Otherwise the operand checks come first: they need no GPU, so bad arguments are reported
    // the same on a machine without one.
    op.check(inputs, outputs);
    KeepCurrentContext keep;
    Runtime& runtime = runtime_for(device_);
    switch (current_mode) {
    case Mode::explain: explanation = runtime.explain(op); break;
    case Mode::prepare: runtime.prepare(op); break;
    case Mode::run: op.run(runtime, inputs, outputs, reinterpret_cast<CUstream>(stream_)); break;
    }
    return py::none();
}

}  // namespace tileops::python
