// A tensor handed in from Python: a torch.Tensor (read through its attributes, the fast path) or
// any object with __dlpack__ (CuPy, JAX, NumPy...). Only CUDA tensors pass; the checks name the
// argument and say what was wrong.
#pragma once

#include <Python.h>
#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>

#include "tileops/tensor.hpp"

namespace tileops::python {

struct PyTensor {
    static constexpr int kMaxRank = 8;

    const char* name = "";  // the argument's name, for errors
    void* data = nullptr;
    DType dtype = DType::fp32;
    int rank = 0;
    std::array<int64_t, kMaxRank> shape{};
    std::array<int64_t, kMaxRank> strides{};  // in elements
    int device = 0;
    bool from_torch = false;

    PyTensor() = default;
    PyTensor(const PyTensor&) = delete;
    PyTensor& operator=(const PyTensor&) = delete;
    // A DLPack producer's tensor is released (its deleter called) with this object.
    ~PyTensor();

    // Dim d (from the end where negative); throws InvalidArgument naming the tensor where it has
    // no such dim (a rank-0 tensor's last dim, a vector's second to last).
    int64_t size(int d) const { return shape[dim(d)]; }
    int64_t stride(int d) const { return strides[dim(d)]; }
    int64_t numel() const;

    // Views in the ranks the ops check (their shapes and strides as the problem states them).
    // rows(): the tensor as [rows, last dim] with one row stride: the leading dims must collapse
    // into one (throws InvalidArgument naming the tensor otherwise); the last dim contiguous.
    TensorView rows_view() const;
    int64_t rows() const;        // product of the leading dims (1 for a vector)
    int64_t row_stride() const;  // elements between rows; requires rows_view()'s conditions
    // The tensor itself (rank <= 4).
    TensorView view() const;
    // A contiguous tensor of any shape as the vector of its elements (rank 1; throws
    // InvalidArgument naming the tensor when it is not contiguous): scales, a one-element scale.
    TensorView vector_view() const;

    DLManagedTensor* managed = nullptr;

    // The same dims as `like` (all of them, or all but the last); else throws InvalidArgument
    // naming both: "tileops_jit.<op>: b has shape [3, 2, 8] where a has [2, 3, 8]".
    void require_dims_of(const char* op, const PyTensor& like, bool last_dim_too = true) const;

private:
    size_t dim(int d) const;
};

// Reads `object` into `out`. `dlpack_stream` is what __dlpack__ is asked to make the data ready
// for (1: the legacy default stream, else a stream handle). Throws InvalidArgument for an object
// that is not a CUDA tensor of a supported dtype.
void read_tensor(PyObject* object, const char* name, long long dlpack_stream, PyTensor& out);

// Whether `object` is a torch.Tensor (false when torch has not been imported).
bool is_torch_tensor(PyObject* object);

// torch's current stream on `device` (the caller's stream for torch users).
uintptr_t torch_current_stream(int device);

}  // namespace tileops::python
