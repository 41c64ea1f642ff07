// tileops_jit._C: the library's ops on Python tensors. The package (python/tileops_jit) wraps these
// functions with output allocation and registers them as torch custom ops.
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "tileops/elementwise.hpp"
#include "tileops/flash_attention.hpp"
#include "tileops/gemm.hpp"
#include "tileops/rope.hpp"
#include "tileops/runtime.hpp"
#include "tileops/version.hpp"

namespace tileops::python {
namespace {

// Library errors as Python exceptions: bad arguments are ValueErrors, the rest RuntimeErrors.
// The exception types live as long as the interpreter: never released from a static destructor,
// which would run after the interpreter has finalized.
struct ErrorTypes {
    PyObject* error;
    PyObject* invalid;
    PyObject* unsupported;
    PyObject* driver;
    PyObject* compile;
    PyObject* cache_miss;
    PyObject* file;
};

PyObject* new_error_type(py::module_& m, const char* name, py::handle bases) {
    const std::string qualified = std::string("tileops_jit._C.") + name;
    PyObject* type = PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr);
    if (type == nullptr) throw py::error_already_set();
    m.add_object(name, py::handle(type));  // the module takes its own reference; ours is kept
    return type;
}

void register_errors(py::module_& m) {
    static ErrorTypes types;
    types.error = new_error_type(m, "Error", PyExc_RuntimeError);
    // InvalidArgument derives from both Error and ValueError, so `except ValueError` catches it.
    types.invalid = new_error_type(m, "InvalidArgument", py::make_tuple(py::handle(types.error), py::handle(PyExc_ValueError)));
    types.unsupported = new_error_type(m, "Unsupported", types.error);
    types.driver = new_error_type(m, "DriverError", types.error);
    types.compile = new_error_type(m, "CompileError", types.error);
    types.cache_miss = new_error_type(m, "CacheMiss", types.error);
    types.file = new_error_type(m, "FileError", types.error);
    py::register_exception_translator([](std::exception_ptr thrown) {
        try {
            if (thrown) std::rethrow_exception(thrown);
        } catch (const InvalidArgument& e) {
            PyErr_SetString(types.invalid, e.what());
        } catch (const Unsupported& e) {
            PyErr_SetString(types.unsupported, e.what());
        } catch (const DriverError& e) {
            PyErr_SetString(types.driver, e.what());
        } catch (const CompileError& e) {
            // The log is where a compile error is explained: it goes into the message.
            const std::string text = e.log().empty() ? e.what() : std::string(e.what()) + "\n" + e.log();
            PyErr_SetString(types.compile, text.c_str());
        } catch (const CacheMiss& e) {
            PyErr_SetString(types.cache_miss, e.what());
        } catch (const FileError& e) {
            PyErr_SetString(types.file, e.what());
        } catch (const Error& e) {
            PyErr_SetString(types.error, e.what());
        }
    });
}

void bind_types(py::module_& m) {
    py::enum_<Mode>(m, "Mode").value("run", Mode::run).value("explain", Mode::explain).value("prepare", Mode::prepare);
    py::enum_<ElementwiseOp>(m, "ElementwiseOp")
        .value("gelu", ElementwiseOp::gelu)
        .value("gelu_tanh", ElementwiseOp::gelu_tanh)
        .value("silu", ElementwiseOp::silu)
        .value("silu_mul", ElementwiseOp::silu_mul)
        .value("add", ElementwiseOp::add)
        .value("mul", ElementwiseOp::mul);
    py::enum_<GemmEpilogue>(m, "GemmEpilogue")
        .value("none", GemmEpilogue::none)
        .value("gelu", GemmEpilogue::gelu)
        .value("silu", GemmEpilogue::silu);
    py::enum_<AttentionLayout>(m, "AttentionLayout").value("bshd", AttentionLayout::bshd).value("bhsd", AttentionLayout::bhsd);
    py::enum_<RopeStyle>(m, "RopeStyle").value("neox", RopeStyle::neox).value("gptj", RopeStyle::gptj).value("none", RopeStyle::none);
    py::enum_<RopeScaling::Type>(m, "RopeScalingType")
        .value("none", RopeScaling::Type::none)
        .value("linear", RopeScaling::Type::linear)
        .value("llama3", RopeScaling::Type::llama3);
    py::class_<RopeScaling>(m, "RopeScaling")
        .def(py::init([](RopeScaling::Type type, double factor, double low, double high, double original) {
                 return RopeScaling{type, factor, low, high, original};
             }),
             py::arg("type") = RopeScaling::Type::none, py::arg("factor") = 1.0, py::arg("low_freq_factor") = 1.0,
             py::arg("high_freq_factor") = 4.0, py::arg("original_max_positions") = 8192.0)
        .def_readonly("type", &RopeScaling::type)
        .def_readonly("factor", &RopeScaling::factor)
        .def_readonly("low_freq_factor", &RopeScaling::low_freq_factor)
        .def_readonly("high_freq_factor", &RopeScaling::high_freq_factor)
        .def_readonly("original_max_positions", &RopeScaling::original_max_positions);
}

void bind_runtime(py::module_& m) {
    m.def("version", [] { return std::string(tileops::version()); });
    m.def("set_mode", &set_mode, py::arg("mode"));
    m.def("take_explanation", &take_explanation);
    // The op cache (call.hpp): its bound (TILEOPS_PY_OP_CACHE_SIZE, read by the package) and state.
    m.def("set_op_cache_capacity", [](size_t capacity) { OpCache::instance().set_capacity(capacity); },
          py::arg("capacity"));
    m.def("op_cache_info", [] {
        const OpCache& cache = OpCache::instance();
        py::dict d;
        d["size"] = cache.size();
        d["capacity"] = cache.capacity();
        d["pinned"] = cache.pinned();
        d["evictions"] = cache.evictions();
        d["retired"] = cache.retired();
        d["default_capacity"] = OpCache::kDefaultCapacity;
        return d;
    });
    m.def("device_info", [](int device) {
        const DeviceInfo& info = runtime_for(device).device();
        py::dict d;
        d["name"] = info.name;
        d["arch"] = info.arch();
        d["sm_count"] = info.sm_count;
        d["total_memory"] = info.total_memory;
        return d;
    }, py::arg("device") = 0);
    m.def("stats", [](int device) {
        const RuntimeStats stats = runtime_for(device).stats();
        py::dict d;
        d["kernels_compiled"] = stats.kernels_compiled;
        d["disk_cache_hits"] = stats.disk_cache_hits;
        d["bundle_hits"] = stats.bundle_hits;
        d["memory_cache_hits"] = stats.memory_cache_hits;
        d["background_compiles"] = stats.background_compiles;
        d["standin_runs"] = stats.standin_runs;
        return d;
    }, py::arg("device") = 0);
}

}  // namespace
}  // namespace tileops::python

PYBIND11_MODULE(_C, m) {
    using namespace tileops::python;
    m.doc() = "tileops_jit's ops on CUDA tensors (torch, or any DLPack producer); see the tileops_jit package";
    register_errors(m);
    bind_types(m);
    bind_runtime(m);
    bind_rows(m);
    bind_gemm(m);
    bind_attention(m);
    bind_model_ops(m);
    bind_quantize(m);
    bind_gemm_fp8(m);
    bind_gemm_grouped(m);
    bind_moe_routing(m);
}
