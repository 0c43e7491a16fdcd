"""The pinned staging buffers a closed CUDA loader leaves, against the fake libcuda.so.1: kept
pinned for the next loader, which takes them, and unpinned by gpufeed.release_memory(). Run
with GPUFEED_CUDA_LIBRARY set to it.

usage: cuda_pinned_pool.py FAKE_LIBCUDA   prints "ok", or fails an assert
"""

import ctypes
import sys

import gpufeed
from gpufeed import _gpufeed

fake = ctypes.CDLL(sys.argv[1])  # the same library the engine dlopens
fake.fake_cuda_outstanding_allocations.restype = ctypes.c_int64


def one_epoch():
    source = _gpufeed.synthetic("x:float32[256]", 64, 1)
    loader = _gpufeed._Loader(source, _gpufeed._LoaderOptions(
        batch_size=16, shuffle=False, device="cuda:0", workers=2, prefetch=1))
    while loader.next() is not None:
        pass
    loader.close()


one_epoch()
kept = fake.fake_cuda_outstanding_allocations()
assert kept > 0, "a closed loader's pinned buffers are kept"
assert fake.fake_cuda_primary_ctx_refs(0) == 1, "with the context that pinned them"
one_epoch()
assert fake.fake_cuda_outstanding_allocations() == kept, "the next loader took them"
freed = gpufeed.release_memory()
assert freed["pinned_bytes"] >= 2 * 16 * 256 * 4, freed
assert fake.fake_cuda_outstanding_allocations() == 0
assert fake.fake_cuda_primary_ctx_refs(0) == 0
assert gpufeed.release_memory()["pinned_bytes"] == 0
print("ok")
