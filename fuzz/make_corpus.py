#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora: valid inputs of every shape each parser takes, so the
fuzzers start from deep inside the formats. Pure Python (no numpy), deterministic.

  fuzz/make_corpus.py OUT            seeds into OUT/<target>/ (make fuzz: build-asan/seeds)
  fuzz/make_corpus.py --regressions fuzz/corpus
                                     the small regression inputs kept in git: one per bug
                                     class of hostile input (the HDF5 ones come from hdf5's own
                                     script)
"""
import os
import struct
import sys


def npy(descr, shape, data=b"", version=1):
    dims = ", ".join(str(d) for d in shape)
    if len(shape) == 1:
        dims += ","
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    pre = 10 if version == 1 else 12
    total = (pre + len(d) + 1 + 63) // 64 * 64
    d = d + " " * (total - pre - len(d) - 1) + "\n"
    length = struct.pack("<H", len(d)) if version == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([version, 0]) + length + d.encode() + data


def be16(v):
    return struct.pack(">h", v)


def be32(v):
    return struct.pack(">i", v)


PG_HEADER = b"PGCOPY\n\xff\r\n\x00" + be32(0) + be32(0)


def pg_value(payload):
    return be32(len(payload)) + payload


def pg_array(elem_oid, dims, elements, fmt):
    body = be32(len(dims)) + be32(0) + be32(elem_oid)
    for d in dims:
        body += be32(d) + be32(1)
    for e in elements:
        v = struct.pack(">" + fmt, e)
        body += be32(len(v)) + v
    return pg_value(body)


def pg_stream(choice, rows):
    out = bytes([choice]) + PG_HEADER
    for r in rows:
        out += be16(len(r)) + b"".join(r)
    return out + be16(-1)


def pg_seeds():
    seeds = {}
    rows0 = [[pg_value(struct.pack(">i", i)), pg_value(struct.pack(">d", i / 3))] for i in range(4)]
    rows1 = [[pg_array(700, [3], [1.0, 2.0, 3.0], "f"), pg_value(struct.pack(">q", i))]
             for i in range(3)]
    rows2 = [[pg_array(700, [6], [float(j) for j in range(6)], "f")] for _ in range(2)]
    rows2b = [[pg_array(700, [2, 3], [float(j) for j in range(6)], "f")]]
    rows3 = [[pg_value(b"\x01"), pg_array(20, [2, 2], [1, 2, 3, 4], "q"),
              pg_array(21, [0], [], "h")]]
    for split in (0, 4, 60):
        seeds["cols0_split%d" % split] = pg_stream(split * 4 + 0, rows0)
        seeds["cols1_split%d" % split] = pg_stream(split * 4 + 1, rows1)
        seeds["cols2_split%d" % split] = pg_stream(split * 4 + 2, rows2)
        seeds["cols3_split%d" % split] = pg_stream(split * 4 + 3, rows3)
    seeds["cols2_2d"] = pg_stream(2, rows2b)
    seeds["empty_array"] = pg_stream(1, [[pg_value(be32(0) + be32(0) + be32(700)),
                                          pg_value(struct.pack(">q", 1))]])
    return seeds


def shm_header(samples=5, identity=b"synthetic:seed", description=b"synthetic (3 fields)"):
    """A header as EncodeShmHeader writes it, for the fuzz target's schema (its checksum is
    fixed up by the target)."""
    schema = b"mel: float32[1,8,4], label: int64[], mask: bool[3]"
    rows = [128, 8, 3]
    def up(n, to=4096):
        return (n + to - 1) // to * to
    offsets, off = [], 0
    for r in rows:
        offsets.append(off)
        off = up(off + r * samples)
    data_bytes = off
    blocks = (data_bytes + 16383) // 16384
    texts = identity + schema + description
    header_bytes = up(128 + len(texts) + 16 * len(rows) + 8 * blocks)
    fixed = b"GPUFCACH" + struct.pack("<IIQQqQQQQQQqQ", 3, len(rows), header_bytes,
                                      header_bytes + data_bytes, samples, 16384, blocks,
                                      data_bytes, len(identity), len(schema),
                                      len(description), 1234, 0)
    fixed += b"\0" * (128 - len(fixed))
    var = texts + b"".join(struct.pack("<Q", o) for o in offsets)
    var += b"".join(struct.pack("<Q", r) for r in rows)
    var += b"".join(struct.pack("<Q", 7919 * b) for b in range(blocks))
    h = fixed + var
    return h + b"\0" * (header_bytes - len(h))


def shm_seeds():
    seeds = {}
    for samples in (0, 1, 5, 200):
        h = shm_header(samples)
        seeds["header_%d" % samples] = bytes([2]) + h  # size delta 0
    seeds["header_5_short"] = bytes([1]) + shm_header(5)  # file one byte short
    return seeds


def shm_row_bytes_72():
    """A well-formed header whose field table says 72 bytes per row where the
    schema says 128 (and so on): refused by CheckShmHeaderFor."""
    h = bytearray(shm_header(5))
    at = 128 + len(b"synthetic:seed") + len(b"mel: float32[1,8,4], label: int64[], mask: bool[3]")
    at += len(b"synthetic (3 fields)") + 8 * 3
    h[at:at + 8] = struct.pack("<Q", 72)
    return bytes([2]) + bytes(h)


SCHEMAS = [
    "mel:float32[1,64,32],label:int64[]",
    "x:uint8[3,224,224], y:int32[], w:float16[7]",
    "a:bool[1], b:int8[2,2], c:uint16[3], d:uint32[], e:uint64[1,1,1], f:float64[2]",
    "z:bfloat16[8]",
]

URIS = [
    "sqlite:///tmp/train.db?query=SELECT%20x%2C%20label%20FROM%20t",
    "sqlite:rel/path.db?table=samples&columns=x,label&fields=x:float32[7,5]",
    "postgresql://user@host:5432/db?table=samples&key=id&connections=4",
    "postgres:///db?host=/run/pg&query=SELECT%20x%20FROM%20t&fields=x:float32[7,5]&cursor=1",
    "postgresql://u:p%40ss@h/db?sslmode=require&table=t",
]


def megatron_idx(code, lengths, itemsize, pointers=None, docs=None, tail=b""):
    """A .idx as Megatron's _IndexWriter writes it (sequences end to end unless `pointers`)."""
    if pointers is None:
        pointers, at = [], 0
        for n in lengths:
            pointers.append(at)
            at += n * itemsize
    if docs is None:
        docs = list(range(len(lengths) + 1))
    return (b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(lengths), len(docs)) +
            struct.pack("<%di" % len(lengths), *lengths) +
            struct.pack("<%dq" % len(pointers), *pointers) +
            struct.pack("<%dq" % len(docs), *docs) + tail)


def indexed_seeds():
    return {
        "i32": megatron_idx(4, [3, 0, 100, 1, 0, 2], 4, docs=[0, 2, 3, 6]),
        "u16": megatron_idx(8, [5, 0, 7], 2),
        "u8_long": megatron_idx(1, [0, 4000, 1], 1),
        "f64": megatron_idx(6, [2, 2], 8),
        "empty": megatron_idx(4, [], 4),
        "gapped": megatron_idx(3, [2, 2], 2, pointers=[100, 10]),
    }


def seeds():
    npys = {
        "f4_2d": npy("<f4", (3, 2), struct.pack("<6f", *range(6))),
        "u1_1d": npy("|u1", (5,), bytes(range(5))),
        "i8_3d": npy("<i8", (2, 1, 2), struct.pack("<4q", 1, 2, 3, 4)),
        "b1_v2": npy("|b1", (4, 1), b"\x01\x00\x01\x01", version=2),
        "f2_v3": npy("<f2", (2, 2), b"\x00\x3c" * 4, version=3),
        "empty": npy("<f4", (0, 3)),
    }
    return {
        "npy_fuzz": npys,
        "indexed_fuzz": indexed_seeds(),
        "pg_copy_fuzz": pg_seeds(),
        "shm_header_fuzz": shm_seeds(),
        "schema_fuzz": {"s%d" % i: s.encode() for i, s in enumerate(SCHEMAS)},
        "database_uri_fuzz": {"u%d" % i: u.encode() for i, u in enumerate(URIS)},
    }


def regressions():
    return {
        "npy_fuzz": {
            "empty_with_overflowing_sample": npy("<f4", (0, 2**62, 2**62)),
            "zero_width_rows": npy("<f4", (2**61, 0)),
            "byte_count_wraps": npy("<f4", (2**62,)),
        },
        "pg_copy_fuzz": {
            # 73 bytes asking for 2^32 elements; negative dims; a product that wraps to 0.
            "array_asks_64gib": pg_stream(1, [[pg_value(be32(2) + be32(0) + be32(700) +
                                                        be32(65536) + be32(1) + be32(65536) +
                                                        be32(1) + be32(4) + b"\0\0\0\0"),
                                               pg_value(struct.pack(">q", 1))]]),
            "array_negative_dims": pg_stream(2, [[pg_value(be32(2) + be32(0) + be32(700) +
                                                           be32(-1) + be32(1) + be32(-1) +
                                                           be32(1))]]),
            "array_dims_wrap": pg_stream(1, [[pg_value(be32(6) + be32(0) + be32(700) +
                                                       (be32(65536) + be32(1)) * 6),
                                              pg_value(struct.pack(">q", 1))]]),
        },
        "indexed_fuzz": {
            "count_2_60": megatron_idx(4, [1], 4)[:18] + struct.pack("<QQ", 2**60, 2),
            "pointer_end_wraps": megatron_idx(4, [2], 4, pointers=[2**63 - 4]),
            "negative_length": megatron_idx(4, [1, -1], 4),
            "documents_backwards": megatron_idx(4, [1, 1, 1], 4, docs=[0, 2, 1, 3]),
        },
        "shm_header_fuzz": {"row_bytes_72": shm_row_bytes_72()},
        "schema_fuzz": {"overflow": b"x:float32[4611686018427387904,4]",
                        "sum_overflow": b"x:uint8[4611686018427387904],y:uint8[6917529027641081856]"},
        "database_uri_fuzz": {"percent_minus_one": b"sqlite:/tmp/a%-1.db",
                              "fields_overflow": b"sqlite:/a.db?fields=x:float32[4611686018427387904,4]"},
    }


def write(out, corpora):
    for target, files in corpora.items():
        d = os.path.join(out, target)
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--regressions":
        write(sys.argv[2], regressions())
    elif len(sys.argv) == 2:
        write(sys.argv[1], seeds())
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
