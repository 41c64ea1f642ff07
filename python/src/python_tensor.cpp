#include "python_tensor.hpp"

#include <fmt/format.h>

#include <string>

#include "tileops/error.hpp"

namespace tileops::python {
namespace {

// Owned reference to a Python object (released on scope exit).
class Ref {
public:
    explicit Ref(PyObject* object) noexcept : object_(object) {}
    ~Ref() { Py_XDECREF(object_); }
    Ref(const Ref&) = delete;
    Ref& operator=(const Ref&) = delete;
    PyObject* get() const noexcept { return object_; }
    explicit operator bool() const noexcept { return object_ != nullptr; }

private:
    PyObject* object_;
};

// A Python error raised while reading a tensor becomes an InvalidArgument naming it (the
// Python message kept), so every failure reaches the caller as one exception type.
[[noreturn]] void throw_python_error(const char* name, const char* what) {
    std::string detail = "unknown error";
    PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
    PyErr_Fetch(&type, &value, &traceback);
    if (value != nullptr) {
        Ref text(PyObject_Str(value));
        if (text) {
            if (const char* utf8 = PyUnicode_AsUTF8(text.get())) detail = utf8;
        }
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    PyErr_Clear();
    throw InvalidArgument(fmt::format("tileops_jit: argument '{}': {} failed: {}", name, what, detail));
}

// What torch exposes that the fast path reads, looked up once torch is imported.
struct TorchTypes {
    PyObject* tensor_type = nullptr;
    PyObject* dtypes[5] = {};  // in DType order: fp32, fp16, bf16, int32, fp8_e4m3
    PyObject* current_stream = nullptr;
    bool ready = false;
};

TorchTypes& torch_types() {
    static TorchTypes types;  // references held for the process's life
    if (types.ready) return types;
    PyObject* modules = PyImport_GetModuleDict();
    PyObject* torch = PyDict_GetItemString(modules, "torch");  // borrowed; null: torch not imported
    if (torch == nullptr) return types;
    // An attribute a build of torch lacks leaves its slot null (its error cleared before the next lookup).
    types.tensor_type = PyObject_GetAttrString(torch, "Tensor");
    PyErr_Clear();
    const char* dtype_names[5] = {"float32", "float16", "bfloat16", "int32", "float8_e4m3fn"};
    for (int i = 0; i < 5; ++i) {
        types.dtypes[i] = PyObject_GetAttrString(torch, dtype_names[i]);
        PyErr_Clear();
    }
    if (Ref c(PyObject_GetAttrString(torch, "_C")); c)
        types.current_stream = PyObject_GetAttrString(c.get(), "_cuda_getCurrentRawStream");
    PyErr_Clear();
    types.ready = types.tensor_type != nullptr;
    return types;
}

// Attribute and method names, interned once: a lookup by an interned string skips the string's
// creation and hashing on every call.
struct Names {
    PyObject* is_cuda = PyUnicode_InternFromString("is_cuda");
    PyObject* dtype = PyUnicode_InternFromString("dtype");
    PyObject* shape = PyUnicode_InternFromString("shape");
    PyObject* stride = PyUnicode_InternFromString("stride");
    PyObject* data_ptr = PyUnicode_InternFromString("data_ptr");
    PyObject* get_device = PyUnicode_InternFromString("get_device");
};

const Names& names() {
    static const Names* interned = new Names();  // for the interpreter's life
    return *interned;
}

int64_t to_int64(PyObject* object, const char* name, const char* what) {
    const long long value = PyLong_AsLongLong(object);
    if (value == -1 && PyErr_Occurred()) throw_python_error(name, what);
    return value;
}

// Fills rank, shape or strides from a tuple of ints.
void read_dims(PyObject* tuple, const char* name, const char* what, std::array<int64_t, PyTensor::kMaxRank>& dims,
               int& rank) {
    if (tuple == nullptr || !PyTuple_Check(tuple)) throw_python_error(name, what);
    const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    if (n > PyTensor::kMaxRank)
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}' has rank {}, at most {} is supported", name, n,
                                          PyTensor::kMaxRank));
    rank = static_cast<int>(n);
    for (Py_ssize_t i = 0; i < n; ++i) dims[static_cast<size_t>(i)] = to_int64(PyTuple_GET_ITEM(tuple, i), name, what);
}

void read_torch(PyObject* object, const char* name, PyTensor& out) {
    const TorchTypes& torch = torch_types();
    const Names& n = names();
    Ref is_cuda(PyObject_GetAttr(object, n.is_cuda));
    if (!is_cuda) throw_python_error(name, "reading is_cuda");
    if (is_cuda.get() != Py_True) {
        Ref device(PyObject_GetAttrString(object, "device"));
        Ref text(device ? PyObject_Str(device.get()) : nullptr);
        const char* where = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
        PyErr_Clear();
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}' is on {}; tileops_jit runs on CUDA tensors", name,
                                          where != nullptr ? where : "a device other than CUDA"));
    }
    Ref dtype(PyObject_GetAttr(object, n.dtype));
    if (!dtype) throw_python_error(name, "reading dtype");
    int index = -1;
    for (int i = 0; i < 5; ++i)
        if (dtype.get() == torch.dtypes[i]) index = i;
    if (index < 0) {
        Ref text(PyObject_Str(dtype.get()));
        const char* what = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
        PyErr_Clear();
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}' has dtype {}; supported: float32, float16, "
                                          "bfloat16, int32, float8_e4m3fn",
                                          name, what != nullptr ? what : "?"));
    }
    out.dtype = static_cast<DType>(index);
    Ref shape(PyObject_GetAttr(object, n.shape));
    read_dims(shape.get(), name, "reading shape", out.shape, out.rank);
    Ref strides(PyObject_CallMethodNoArgs(object, n.stride));
    int stride_rank = 0;
    read_dims(strides.get(), name, "reading stride()", out.strides, stride_rank);
    Ref pointer(PyObject_CallMethodNoArgs(object, n.data_ptr));
    if (!pointer) throw_python_error(name, "data_ptr()");
    out.data = PyLong_AsVoidPtr(pointer.get());
    if (PyErr_Occurred()) throw_python_error(name, "data_ptr()");
    Ref device(PyObject_CallMethodNoArgs(object, n.get_device));
    if (!device) throw_python_error(name, "get_device()");
    out.device = static_cast<int>(to_int64(device.get(), name, "get_device()"));
    out.from_torch = true;
}

const char* dlpack_device_name(int type) {
    switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host (pinned host memory)";
    case kDLCUDAManaged: return "cuda_managed";
    case kDLROCM: return "rocm";
    default: return "a device other than CUDA";
    }
}

// DLPack 1.1's kDLFloat8_e4m3fn (what torch exports float8_e4m3fn as: code 10, 8 bits, 1 lane).
// Spelled out: the dlpack.h found at build time may predate it (v0.6 has no fp8 codes).
constexpr uint8_t kDLPackFloat8E4M3FN = 10;

DType dlpack_dtype(const DLDataType& type, const char* name) {
    if (type.lanes == 1) {
        if (type.code == kDLFloat && type.bits == 32) return DType::fp32;
        if (type.code == kDLFloat && type.bits == 16) return DType::fp16;
        if (type.code == kDLBfloat && type.bits == 16) return DType::bf16;
        if (type.code == kDLInt && type.bits == 32) return DType::int32;
        if (type.code == kDLPackFloat8E4M3FN && type.bits == 8) return DType::fp8_e4m3;
    }
    throw InvalidArgument(fmt::format("tileops_jit: argument '{}' has DLPack dtype (code {}, {} bits, {} lanes); "
                                      "supported: float32, float16, bfloat16, int32, float8_e4m3fn (code 10, 8 bits)",
                                      name, type.code, type.bits, type.lanes));
}

void read_dlpack(PyObject* object, const char* name, long long dlpack_stream, PyTensor& out) {
    Ref device(PyObject_CallMethod(object, "__dlpack_device__", nullptr));
    if (!device) throw_python_error(name, "__dlpack_device__()");
    if (!PyTuple_Check(device.get()) || PyTuple_GET_SIZE(device.get()) != 2)
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}': __dlpack_device__() must return a pair", name));
    const int64_t type = to_int64(PyTuple_GET_ITEM(device.get(), 0), name, "__dlpack_device__()");
    const int64_t id = to_int64(PyTuple_GET_ITEM(device.get(), 1), name, "__dlpack_device__()");
    if (type != kDLCUDA)
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}' is on {} memory; tileops_jit runs on CUDA tensors",
                                          name, dlpack_device_name(static_cast<int>(type))));
    Ref method(PyObject_GetAttrString(object, "__dlpack__"));
    Ref args(PyTuple_New(0));
    Ref kwargs(Py_BuildValue("{s:L}", "stream", dlpack_stream));
    Ref capsule(method && args && kwargs ? PyObject_Call(method.get(), args.get(), kwargs.get()) : nullptr);
    if (!capsule) throw_python_error(name, "__dlpack__()");
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.get(), "dltensor"));
    if (managed == nullptr) throw_python_error(name, "reading the DLPack capsule");
    // The capsule is consumed: renamed so that its destructor leaves the tensor to us.
    PyCapsule_SetName(capsule.get(), "used_dltensor");
    out.managed = managed;
    const DLTensor& t = managed->dl_tensor;
    if (t.device.device_type != kDLCUDA || t.device.device_id != id)
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}': the DLPack tensor's device differs from "
                                          "__dlpack_device__()",
                                          name));
    out.dtype = dlpack_dtype(t.dtype, name);
    if (t.ndim < 0 || t.ndim > PyTensor::kMaxRank)
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}' has rank {}, at most {} is supported", name, t.ndim,
                                          PyTensor::kMaxRank));
    out.rank = t.ndim;
    int64_t contiguous = 1;
    for (int d = out.rank - 1; d >= 0; --d) {
        const auto i = static_cast<size_t>(d);
        out.shape[i] = t.shape[d];
        out.strides[i] = t.strides != nullptr ? t.strides[d] : contiguous;  // null strides: row-major
        contiguous *= t.shape[d];
    }
    out.data = static_cast<char*>(t.data) + t.byte_offset;
    out.device = static_cast<int>(id);
}

}  // namespace

PyTensor::~PyTensor() {
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

size_t PyTensor::dim(int d) const {
    const int index = d < 0 ? d + rank : d;
    if (index < 0 || index >= rank)
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}' has {} dim{}, too few for this op", name, rank,
                                          rank == 1 ? "" : "s"));
    return static_cast<size_t>(index);
}

void PyTensor::require_dims_of(const char* op, const PyTensor& like, bool last_dim_too) const {
    const int compared = last_dim_too ? like.rank : like.rank - 1;
    bool same = rank == like.rank;
    for (int d = 0; same && d < compared; ++d) same = shape[static_cast<size_t>(d)] == like.shape[static_cast<size_t>(d)];
    if (same) return;
    throw InvalidArgument(fmt::format("tileops_jit.{}: {} has shape [{}] where {} has [{}]{}", op, name,
                                      fmt::join(shape.begin(), shape.begin() + rank, ", "), like.name,
                                      fmt::join(like.shape.begin(), like.shape.begin() + like.rank, ", "),
                                      last_dim_too ? "" : " (the last dim aside)"));
}

int64_t PyTensor::numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[static_cast<size_t>(d)];
    return n;
}

int64_t PyTensor::rows() const {
    int64_t n = 1;
    for (int d = 0; d + 1 < rank; ++d) n *= shape[static_cast<size_t>(d)];
    return n;
}

int64_t PyTensor::row_stride() const {
    if (rank == 0) throw InvalidArgument(fmt::format("tileops_jit: argument '{}' must have at least one dim", name));
    if (size(-1) > 1 && stride(-1) != 1)
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}' must be contiguous in its last dim (stride {})",
                                          name, stride(-1)));
    // The leading dims, size-1 ones aside, must step as one: row r at r x stride.
    int64_t stride = -1, extent = 0;  // extent: rows the dims inside the current one span
    for (int d = rank - 2; d >= 0; --d) {
        const int64_t n = shape[static_cast<size_t>(d)], s = strides[static_cast<size_t>(d)];
        if (n == 1) continue;
        if (stride < 0) {
            stride = s;
            extent = n;
        } else if (s == stride * extent) {
            extent *= n;
        } else {
            throw InvalidArgument(fmt::format("tileops_jit: argument '{}' (strides {}) cannot be viewed as rows of one "
                                              "stride; make it contiguous",
                                              name, fmt::join(strides.begin(), strides.begin() + rank, ", ")));
        }
    }
    return stride < 0 ? size(-1) : stride;
}

TensorView PyTensor::rows_view() const {
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.rank = 2;
    v.shape = {rows(), rank == 0 ? 1 : size(-1), 0, 0};
    v.strides = {row_stride(), 1, 0, 0};
    return v;
}

TensorView PyTensor::view() const {
    if (rank > TensorView::kMaxRank)
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}' has rank {}, expected at most {}", name, rank,
                                          TensorView::kMaxRank));
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.rank = rank;
    for (int d = 0; d < rank; ++d) {
        v.shape[static_cast<size_t>(d)] = shape[static_cast<size_t>(d)];
        v.strides[static_cast<size_t>(d)] = strides[static_cast<size_t>(d)];
    }
    return v;
}

TensorView PyTensor::vector_view() const {
    int64_t expected = 1;
    for (int d = rank - 1; d >= 0; --d) {
        if (size(d) > 1 && stride(d) != expected)
            throw InvalidArgument(fmt::format("tileops_jit: argument '{}' must be contiguous", name));
        expected *= size(d);
    }
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.rank = 1;
    v.shape[0] = numel();
    v.strides[0] = 1;
    return v;
}

bool is_torch_tensor(PyObject* object) {
    const TorchTypes& torch = torch_types();
    if (!torch.ready) return false;
    const int is = PyObject_IsInstance(object, torch.tensor_type);
    if (is < 0) PyErr_Clear();
    return is == 1;
}

void read_tensor(PyObject* object, const char* name, long long dlpack_stream, PyTensor& out) {
    out.name = name;
    if (object == nullptr || object == Py_None)
        throw InvalidArgument(fmt::format("tileops_jit: argument '{}' is required (got None)", name));
    if (is_torch_tensor(object)) return read_torch(object, name, out);
    if (PyObject_HasAttrString(object, "__dlpack__") && PyObject_HasAttrString(object, "__dlpack_device__"))
        return read_dlpack(object, name, dlpack_stream, out);
    Ref type_name(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(object)), "__name__"));
    const char* type = type_name ? PyUnicode_AsUTF8(type_name.get()) : nullptr;
    PyErr_Clear();
    throw InvalidArgument(fmt::format("tileops_jit: argument '{}' is a {}, not a tensor (a torch.Tensor or an object "
                                      "with __dlpack__)",
                                      name, type != nullptr ? type : "?"));
}

uintptr_t torch_current_stream(int device) {
    const TorchTypes& torch = torch_types();
    if (torch.current_stream == nullptr) return 0;
    Ref index(PyLong_FromLong(device));
    Ref stream(index ? PyObject_CallOneArg(torch.current_stream, index.get()) : nullptr);
    if (!stream) throw_python_error("stream", "torch's current stream");
    const auto handle = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(stream.get()));
    if (PyErr_Occurred()) throw_python_error("stream", "torch's current stream");
    return handle;
}

}  // namespace tileops::python
