"""The CUDA export path against the fake libcuda.so.1 (host memory as device memory, copies
that complete late), through the DLPack protocol: run with GPUFEED_CUDA_LIBRARY set to it.

usage: cuda_fake.py FAKE_LIBCUDA   prints "ok" and figures, or fails an assert
"""

import ctypes
import sys

import numpy as np

from gpufeed import _gpufeed

fake = ctypes.CDLL(sys.argv[1])  # the same library the engine dlopens
capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
capsule_pointer.restype = ctypes.c_void_p
capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def check(result):
    assert result == 0, f"driver call failed: {result}"


def data_address(capsule):
    # DLManagedTensor starts with DLTensor, whose first member is the data pointer.
    return ctypes.c_void_p.from_address(capsule_pointer(capsule, b"dltensor")).value


def pending_on(stream, address, size):
    """Unfinished copies into [address, address + size) when `stream` gets there."""
    out = ctypes.c_int(-2)
    check(fake.fake_cuda_stream_probe(stream, ctypes.c_void_p(address), ctypes.c_size_t(size),
                                      ctypes.byref(out)))
    check(fake.cuStreamSynchronize(stream))
    return out.value


fake.fake_cuda_set_copy_delay_us(ctypes.c_int64(150_000))
ctx = ctypes.c_void_p()
check(fake.cuInit(0))
check(fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
check(fake.cuCtxSetCurrent(ctx))
streams = [ctypes.c_void_p(), ctypes.c_void_p()]
for s in streams:
    check(fake.cuStreamCreate(ctypes.byref(s), 0))

rows, width = 16, 256
source = _gpufeed.synthetic(f"x:float32[{width}]", 64, 1)
loader = _gpufeed._Loader(source, _gpufeed._LoaderOptions(
    batch_size=rows, shuffle=False, device="cuda:0", workers=1, prefetch=1))
assert loader.device == "cuda:0"

# A consumer stream named in __dlpack__ waits for the batch's copy.
first = loader.next()
field = first.field("x")
assert field.__dlpack_device__() == (2, 0)
capsule = field.__dlpack__(stream=streams[0].value)
address = data_address(capsule)
assert pending_on(streams[0], address, rows * width * 4) == 0

# stream=-1: the consumer said it synchronizes itself; nothing orders its stream.
second = loader.next()
capsule2 = second.field("x").__dlpack__(stream=-1)
assert pending_on(streams[1], data_address(capsule2), rows * width * 4) > 0

for bad in (0, -5):
    try:
        second.field("x").__dlpack__(stream=bad)
        raise AssertionError(f"stream={bad} accepted")
    except BufferError as e:
        assert "not valid for CUDA" in str(e)

# The data the consumer's stream sees is the batch's rows.
fake.fake_cuda_synchronize_all()
values = np.ctypeslib.as_array((ctypes.c_float * (rows * width)).from_address(address))
want = [_gpufeed.synthetic_value(1, 0, s, e, "float32") for s in range(rows) for e in range(width)]
np.testing.assert_allclose(values, np.array(want, dtype=np.float32))
assert list(first.indices()) == list(range(rows))

del capsule, capsule2, field, first, second
assert loader.held_batches == 0
loader.close()
del loader
for s in streams:
    check(fake.cuStreamDestroy_v2(s))
check(fake.cuDevicePrimaryCtxRelease_v2(0))
failures = [fake.fake_cuda_failure(i) for i in range(fake.fake_cuda_failures())]
assert not failures, failures
copies = fake.fake_cuda_copies_completed()
fake.fake_cuda_reset()  # joins the fake's finished stream threads
print("ok", copies, "copies")
