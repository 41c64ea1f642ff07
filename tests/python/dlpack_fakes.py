"""DLPack producers for tests that need no GPU: objects that claim a device, dtype, shape and
strides through the DLPack protocol (ctypes structs in a PyCapsule), pointing at memory that is
never touched. They let the argument checks, which run before any device work, be tested anywhere,
and count how often the consumer releases what it took."""

import ctypes

KDL_CPU, KDL_CUDA = 1, 2
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4
KDL_FLOAT8_E4M3FN, KDL_FLOAT8_E5M2 = 10, 12  # DLPack >= 1.1 (torch exports float8_e4m3fn as code 10)
DTYPES = {"float32": (KDL_FLOAT, 32), "float16": (KDL_FLOAT, 16), "bfloat16": (KDL_BFLOAT, 16),
          "int32": (KDL_INT, 32), "int64": (KDL_INT, 64), "float64": (KDL_FLOAT, 64),
          "float8_e4m3fn": (KDL_FLOAT8_E4M3FN, 8), "float8_e5m2": (KDL_FLOAT8_E5M2, 8)}
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "float64": 8,
                 "float8_e4m3fn": 1, "float8_e5m2": 1}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_next_address = [1 << 40]  # fake device addresses, 256-byte aligned, never dereferenced


class FakeTensor:
    """A tensor on `device` ("cuda" or "cpu") that only describes itself."""

    released = 0  # deleters called, over all fakes
    taken = 0     # capsules handed out

    def __init__(self, shape, dtype="bfloat16", device="cuda", device_id=0, strides=None, offset_elements=0):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device
        self.device_id = device_id
        if strides is None:
            strides, step = [], 1
            for n in reversed(self.shape):
                strides.insert(0, step)
                step *= n
        self._strides = tuple(strides)
        self.address = _next_address[0] + offset_elements * ELEMENT_BYTES[dtype]
        _next_address[0] += 1 << 30
        self._keep = []

    def stride(self):
        return self._strides

    def __dlpack_device__(self):
        return (KDL_CUDA if self.device == "cuda" else KDL_CPU, self.device_id)

    def __dlpack__(self, stream=None):
        shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        strides = (ctypes.c_int64 * len(self.shape))(*self._strides)
        code, bits = DTYPES[self.dtype]
        managed = DLManagedTensor()
        managed.dl_tensor = DLTensor(self.address, DLDevice(*self.__dlpack_device__()), len(self.shape),
                                     DLDataType(code, bits, 1), shape, strides, 0)

        def release(_):
            FakeTensor.released += 1

        managed.deleter = DELETER(release)
        self._keep.append((managed, shape, strides, managed.deleter))
        FakeTensor.taken += 1
        return _capsule_new(ctypes.addressof(managed), b"dltensor", None)

    def __getitem__(self, index):
        raise TypeError("FakeTensor does not slice")
