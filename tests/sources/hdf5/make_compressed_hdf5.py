#!/usr/bin/python3
"""Writes compressed HDF5 test files: one dataset per filter chain h5py users meet.

Usage: make_compressed_hdf5.py DIR

DIR/compressed.h5 holds the datasets; DIR/<dataset>.bin what h5py reads from each (for the
chains Debian's hdf5plugin cannot read, Bitshuffle and Zstd, the array that was written:
their chunks are compressed here, through liblz4/libzstd with ctypes, and stored with
write_direct_chunk under a pipeline that names the filter). DIR/corrupt.h5 is a copy whose
chunk 1 of every dataset is overwritten with 0xff bytes. DIR/unknown.h5 holds a dataset
under filter 32026 (Blosc2), for which neither gpufeed nor this libhdf5 has a decoder.
Also used by bench/hdf5_compressed.py for the Bitshuffle and Zstd framings.
"""
import ctypes
import json
import os
import shutil
import struct
import sys

import h5py
import hdf5plugin
import numpy as np

_lz4 = ctypes.CDLL("liblz4.so.1")
_zstd = ctypes.CDLL("libzstd.so.1")
_zstd.ZSTD_compressBound.restype = ctypes.c_size_t
_zstd.ZSTD_compress.restype = ctypes.c_size_t
_zstd.ZSTD_isError.restype = ctypes.c_uint


def lz4_block(data):
    cap = _lz4.LZ4_compressBound(len(data))
    out = ctypes.create_string_buffer(cap)
    n = _lz4.LZ4_compress_default(data, out, len(data), cap)
    assert n > 0
    return out.raw[:n]


def zstd_frame(data, level=3):
    cap = _zstd.ZSTD_compressBound(ctypes.c_size_t(len(data)))
    out = ctypes.create_string_buffer(cap)
    n = _zstd.ZSTD_compress(out, ctypes.c_size_t(cap), data, ctypes.c_size_t(len(data)), level)
    assert not _zstd.ZSTD_isError(ctypes.c_size_t(n))
    return out.raw[:n]


def bitshuffle_block(elements):
    """bitshuffle's transform of one block: (n, elem_size) uint8, n a multiple of 8."""
    bits = np.unpackbits(elements, axis=1, bitorder="little")  # column j*8+b: bit b of byte j
    return np.packbits(bits.T, axis=1, bitorder="little").tobytes()


def bitshuffle_chunk(raw, elem_size, block, codec):
    """bitshuffle's HDF5 framing (filter 32008 with LZ4 or Zstd)."""
    n = len(raw) // elem_size
    a = np.frombuffer(raw, np.uint8).reshape(n, elem_size)
    out = [struct.pack(">QI", len(raw), block * elem_size)]
    sizes = [block] * (n // block)
    if n % block // 8 * 8:
        sizes.append(n % block // 8 * 8)
    i = 0
    for b in sizes:
        c = codec(bitshuffle_block(a[i:i + b]))
        out.append(struct.pack(">I", len(c)) + c)
        i += b
    out.append(a[i:].tobytes())  # the elements past the last group of 8, as they are
    return b"".join(out)


def write_direct(f, name, data, chunks, filter_id, opts, encode):
    if filter_id == 32008 and h5py.h5z.filter_avail(32008):
        # Bitshuffle's own HDF5 filter is installed (Debian's bitshuffle): its set_local puts
        # its version and the element size in front of what it is given, so give it only
        # (block size, compression); the stored values are the same either way.
        opts = opts[3:]
    ds = f.create_dataset(name, shape=data.shape, dtype=data.dtype, chunks=chunks,
                          compression=filter_id, compression_opts=opts, allow_unknown_filter=True)
    step = chunks[0]
    for start in range(0, data.shape[0], step):
        block = np.zeros(chunks, data.dtype)
        part = data[start:start + step]
        block[:part.shape[0]] = part
        ds.id.write_direct_chunk((start,) + (0,) * (data.ndim - 1), encode(block.tobytes()))
    return ds


def main():
    d = sys.argv[1]
    rng = np.random.default_rng(11)
    n = 300
    mel = (np.round(rng.standard_normal((n, 1, 16, 8)) * 4) / 4).astype("f4")
    small = rng.integers(-500, 500, (n, 3)).astype("i2")  # 15 elements a chunk: 7 left over
    noise = rng.standard_normal((n, 16)).astype("f4")      # incompressible
    chunks = (32, 1, 16, 8)
    written = {}
    path = os.path.join(d, "compressed.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("gzip_shuffle", data=mel, chunks=chunks, compression="gzip",
                         compression_opts=1, shuffle=True)
        f.create_dataset("gzip_fletcher", data=mel, chunks=chunks, compression="gzip",
                         fletcher32=True)
        f.create_dataset("lzf", data=mel, chunks=chunks, compression="lzf", shuffle=True)
        # Incompressible chunks: LZF gives up and the chunk is stored with its filter skipped.
        f.create_dataset("lzf_noise", data=noise, chunks=(16, 16), compression="lzf")
        B = hdf5plugin.Blosc
        f.create_dataset("blosc_lz4_bitshuffle", data=mel, chunks=chunks,
                         **B(cname="lz4", clevel=5, shuffle=B.BITSHUFFLE))
        f.create_dataset("blosc_zstd", data=mel, chunks=chunks,
                         **B(cname="zstd", clevel=3, shuffle=B.SHUFFLE))
        f.create_dataset("blosc_zlib", data=mel, chunks=chunks,
                         **B(cname="zlib", clevel=5, shuffle=B.NOSHUFFLE))
        f.create_dataset("lz4", data=mel, chunks=chunks, **hdf5plugin.LZ4())
        # Blocks of 1000 bytes: several per chunk, the last one short.
        f.create_dataset("lz4_blocks", data=mel, chunks=chunks, **hdf5plugin.LZ4(nbytes=1000))
        write_direct(f, "bitshuffle_lz4", mel, chunks, 32008, (0, 3, 4, 1000, 2),
                     lambda raw: bitshuffle_chunk(raw, 4, 1000, lz4_block))
        write_direct(f, "bitshuffle_lz4_small", small, (5, 3), 32008, (0, 3, 2, 0, 2),
                     lambda raw: bitshuffle_chunk(raw, 2, 8, lz4_block))
        write_direct(f, "bitshuffle_zstd", mel, chunks, 32008, (0, 3, 4, 512, 3),
                     lambda raw: bitshuffle_chunk(raw, 4, 512, zstd_frame))
        write_direct(f, "zstd", mel, chunks, 32015, (3,), zstd_frame)
        written = {"bitshuffle_lz4": mel, "bitshuffle_lz4_small": small,
                   "bitshuffle_zstd": mel, "zstd": mel}
    manifest = {}
    with h5py.File(path, "r") as f:
        for name in f:
            ds = f[name]
            a = written[name] if name in written else ds[...]
            np.ascontiguousarray(a).tofile(os.path.join(d, name + ".bin"))
            # The chunk the corrupt copy damages, and whether its filter was skipped.
            info = ds.id.get_chunk_info(1)
            manifest[name] = {"offset": info.byte_offset, "size": info.size,
                              "filter_mask": info.filter_mask,
                              "samples_per_chunk": ds.chunks[0]}
    corrupt = os.path.join(d, "corrupt.h5")
    shutil.copyfile(path, corrupt)
    with open(corrupt, "r+b") as out:
        for m in manifest.values():
            out.seek(m["offset"])
            out.write(b"\xff" * m["size"])
    json.dump(manifest, open(os.path.join(d, "manifest.json"), "w"), indent=1)
    with h5py.File(os.path.join(d, "unknown.h5"), "w") as f:
        write_direct(f, "x", mel[:64], chunks, 32026, (), lambda raw: raw)


if __name__ == "__main__":
    main()
