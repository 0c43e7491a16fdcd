#!/usr/bin/python3
"""Seeds for hdf5_chunk_fuzz: one valid stored chunk per filter chain it decodes, compressed
with the same libraries h5py's plugins use (zlib; liblzf, libblosc, liblz4, libzstd through
ctypes). Deterministic.

  fuzz/make_corpus_chunks.py OUT      seeds into OUT/ (make fuzz: build-asan/seeds/hdf5_chunk_fuzz)
"""
import ctypes
import os
import struct
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "sources", "hdf5"))
from make_compressed_hdf5 import (bitshuffle_block, bitshuffle_chunk, lz4_block,  # noqa: E402
                                  zstd_frame)
import numpy as np  # noqa: E402

_lzf = ctypes.CDLL("liblzf.so.1")
_blosc = ctypes.CDLL("libblosc.so.1")


def lzf(data):
    out = ctypes.create_string_buffer(len(data) * 2 + 16)
    n = _lzf.lzf_compress(data, len(data), out, len(out))
    assert n > 0
    return out.raw[:n]


def blosc(data, typesize, shuffle, codec):
    _blosc.blosc_set_compressor(codec)
    out = ctypes.create_string_buffer(len(data) + 16)
    n = _blosc.blosc_compress(5, shuffle, typesize, ctypes.c_size_t(len(data)), data, out,
                              ctypes.c_size_t(len(out)))
    assert n > 0
    return out.raw[:n]


def hdf5_lz4(data, block):
    out = [struct.pack(">QI", len(data), block)]
    for i in range(0, len(data), block):
        c = lz4_block(data[i:i + block])
        if len(c) >= len(data[i:i + block]):
            c = data[i:i + block]
        out.append(struct.pack(">I", len(c)) + c)
    return b"".join(out)


def shuffle(data, es):
    n = len(data) // es
    return bytes(data[i * es + j] for j in range(es) for i in range(n)) + data[n * es:]


def fletcher32(data):
    s1 = s2 = 0
    for i in range(0, len(data) - 1, 2):
        s1 = (s1 + (data[i] << 8 | data[i + 1])) % 65535
        s2 = (s2 + s1) % 65535
    return struct.pack("<I", s2 << 16 | s1)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    # Smooth float-like data: 600 elements of 4 bytes, compressible.
    plain = b"".join(struct.pack("<f", (i % 37) * 0.25) for i in range(600))
    es = 4

    def seed(name, pick, stored, size=len(plain)):
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes([pick, size & 0xff, size >> 8, es - 1]) + stored)

    seed("shuffle_deflate", 0, zlib.compress(shuffle(plain, es), 1))
    seed("lzf", 1, lzf(plain))
    seed("blosc_lz4_bitshuffle", 2, blosc(plain, es, 2, b"lz4"))
    seed("blosc_zstd", 2, blosc(plain, es, 1, b"zstd"))
    seed("lz4", 3, hdf5_lz4(plain, 1000))
    seed("zstd", 4, zstd_frame(plain))
    seed("bitshuffle_lz4", 5, bitshuffle_chunk(plain, es, 64, lz4_block))
    seed("bitshuffle_zstd", 6, bitshuffle_chunk(plain, es, 64, zstd_frame))
    # Uncompressed: bitshuffle's default block for 4-byte elements (2048) holds all 600.
    seed("bitshuffle_plain", 7,
         bitshuffle_block(np.frombuffer(plain, np.uint8).reshape(-1, es)))
    lz4 = hdf5_lz4(plain, 1 << 30)
    seed("lz4_fletcher32", 8, lz4 + fletcher32(lz4))
    seed("deflate_zstd", 9, zlib.compress(zstd_frame(plain)))


if __name__ == "__main__":
    main()
