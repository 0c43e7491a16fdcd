#!/usr/bin/python3
"""Writes valid HDF5 files in layouts other tools write and h5py rarely does, each with what
libhdf5 reads from it, and crafted compact layouts gpufeed must refuse. Run with Debian's
/usr/bin/python3 (h5py):

    make_unusual_hdf5.py OUT_DIR

Valid cases: OUT_DIR/<case>.h5 and OUT_DIR/<case>.bin, the dataset 'x' as libhdf5 converts it
into the native type of the dtype named in OUT_DIR/cases.json (h5py's own read where h5py can
read it: N-bit integers, integers at a bit offset, a float with another exponent bias, VAX
byte order, data layout messages of versions 1 and 2 as HDF5 1.6 and older wrote them, data
sets never written, bitfields as PyTables writes bool and h5py reads as unsigned integers).
OUT_DIR/bitfield_b8_not_bool.h5 holds an 8-bit bitfield with a 5 in sample 2.
OUT_DIR/compound.h5 holds compound datasets (compound() says what). OUT_DIR/mantissa_float.h5 holds a float layout of no gpufeed dtype. Hostile cases: OUT_DIR/hostile_<case>.h5, compact layouts whose data do
not match the dataset (libhdf5 1.10.8 copies from a null pointer for the first one).
The C++ test (unusual_test.cc) reads them; fuzz/make_corpus_hdf5.py adds them to the corpus.
"""
import json
import os
import struct
import sys

import h5py
import numpy as np
from h5py import h5d, h5p, h5s, h5t, h5z

RANGE8 = np.array([-4, -3, -2, -1, 0, 1, 2, 3], dtype=np.int32)
FLOATS = np.linspace(-2, 3, 8)


def low_level(path, build, libver='earliest'):
    with h5py.File(path, 'w', libver=libver) as f:
        build(f.id)


def create(fid, ftype, values, shape=(8,), dcpl=None):
    d = h5d.create(fid, b'x', ftype, h5s.create_simple(shape), dcpl=dcpl)
    d.write(h5s.ALL, h5s.ALL, np.ascontiguousarray(values))


def nbit_int(path):
    # The N-bit filter over 3-bit signed integers: stored as 3 bits, read back sign-extended.
    t = h5t.STD_I32LE.copy()
    t.set_precision(3)
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_chunk((4,))
    dcpl.set_filter(h5z.FILTER_NBIT)
    low_level(path, lambda fid: create(fid, t, RANGE8, dcpl=dcpl))
    return 'int32'


def precision_int(path):
    # 3-bit signed integers in 4-byte words, no filter: the word holds 4 for -4.
    t = h5t.STD_I32LE.copy()
    t.set_precision(3)
    low_level(path, lambda fid: create(fid, t, RANGE8))
    return 'int32'


def offset_int(path):
    # Big-endian 16-bit words whose 8 value bits start at bit 4.
    t = h5t.STD_I16BE.copy()
    t.set_precision(8)
    t.set_offset(4)
    low_level(path, lambda fid: create(fid, t, (RANGE8 * 10).astype(np.int16)))
    return 'int16'


def ebias_float(path):
    # IEEE float32 fields under an exponent bias of 100 (h5py reads it as float64).
    t = h5t.IEEE_F32LE.copy()
    t.set_ebias(100)
    low_level(path, lambda fid: create(fid, t, FLOATS.astype(np.float32)))
    return 'float32'


def patch_type_version(path, head):
    """Datatype message `head` (its first 8 bytes) rewritten as version 3."""
    data = bytearray(open(path, 'rb').read())
    at = data.find(head)
    assert at > 0 and data.find(head, at + 1) < 0
    data[at] = (data[at] & 0x0f) | 0x30
    open(path, 'wb').write(data)


def vax(path, base, dtype, size):
    # libhdf5 1.10.8 writes VAX order (byte-order bits 0x41) in a version-1 datatype message,
    # which it then reads as big-endian: version 3, where the bits mean VAX, is what libhdf5
    # writes when asked for version 3 and reads back correctly.
    t = base.copy()
    t.set_order(h5t.ORDER_VAX)
    low_level(path, lambda fid: create(fid, t, FLOATS.astype(dtype)))
    patch_type_version(path, bytes([0x11, 0x61, 0x1f if size == 4 else 0x3f, 0, size, 0, 0, 0]))
    return np.dtype(dtype).name


def compact_be(path):
    # Compact big-endian integers: converted when the data is read from the header.
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_layout(h5d.COMPACT)
    low_level(path, lambda fid: create(fid, h5t.STD_I32BE, RANGE8, dcpl=dcpl))
    return 'int32'


def v1_header(data, addr):
    """The messages of the version-1 object header at `addr`: [type, flags, body]."""
    count = struct.unpack_from('<H', data, addr + 2)[0]
    pos, out = addr + 16, []
    for _ in range(count):
        mtype, size, flags = struct.unpack_from('<HHB', data, pos)
        out.append([mtype, flags, bytes(data[pos + 8:pos + 8 + size])])
        pos += 8 + size
    return out


def rewrite_layout(path, body_of):
    """Replaces the data layout message of dataset 'x' with body_of(old body), repacking the
    header's messages (NIL padding absorbs the growth)."""
    with h5py.File(path, 'r') as f:
        addr = h5py.h5o.get_info(f['x'].id).addr
    data = bytearray(open(path, 'rb').read())
    room = struct.unpack_from('<I', data, addr + 8)[0]
    messages = [m for m in v1_header(data, addr) if m[0] != 0]
    for m in messages:
        if m[0] == 8:
            m[2] = body_of(m[2])
    out = b''
    for mtype, flags, body in messages:
        body += b'\0' * (-len(body) % 8)
        out += struct.pack('<HHB3x', mtype, len(body), flags) + body
    assert len(out) + 8 <= room, 'the new layout message does not fit the header'
    out += struct.pack('<HHB3x', 0, room - len(out) - 8, 0) + b'\0' * (room - len(out) - 8)
    data[addr + 16:addr + 16 + room] = out
    struct.pack_into('<H', data, addr + 2, len(messages) + 1)
    open(path, 'wb').write(data)


def write_x(path, shape, **kw):
    with h5py.File(path, 'w', libver='earliest') as f:
        f.create_dataset('x', data=np.arange(np.prod(shape), dtype='<i4').reshape(shape), **kw)


def old_layout(version, cls, shape, address, dims, compact=b''):
    body = struct.pack('<BBB5x', version, len(dims), cls)
    if cls != 0:
        body += struct.pack('<Q', address)
    body += b''.join(struct.pack('<I', d) for d in dims)
    if cls == 0:
        body += struct.pack('<I', len(compact)) + compact
    return body


def layout_v1_contiguous(path):
    write_x(path, (6, 5))

    def v1(old):  # version 3 class 1: address, size
        address = struct.unpack_from('<Q', old, 2)[0]
        return old_layout(1, 1, (6, 5), address, [6, 5, 4])
    rewrite_layout(path, v1)
    return 'int32'


def chunked_layout(version, shape, chunks):
    def rewrite(path):
        write_x(path, shape, chunks=chunks, compression='gzip')

        def old(v3):  # version 3 class 2: dimensionality, B-tree address, chunk dims
            ndims = v3[2]
            address = struct.unpack_from('<Q', v3, 3)[0]
            dims = struct.unpack_from(f'<{ndims}I', v3, 11)
            return old_layout(version, 2, shape, address, dims)
        rewrite_layout(path, old)
        return 'int32'
    return rewrite


def layout_v1_compact(path):
    with h5py.File(path, 'w', libver='earliest') as f:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_layout(h5d.COMPACT)
        create(f.id, h5t.STD_I32LE, np.arange(30, dtype='<i4').reshape(6, 5), (6, 5), dcpl)

    def v1(old):  # version 3 class 0: size(2), data
        size = struct.unpack_from('<H', old, 2)[0]
        return old_layout(1, 0, (6, 5), 0, [6, 5, 4], old[4:4 + size])
    rewrite_layout(path, v1)
    return 'int32'


def never_written(path):
    with h5py.File(path, 'w', libver='earliest') as f:
        f.create_dataset('x', shape=(6, 3), dtype='<i4', fillvalue=7)
    return 'int32'


def never_written_chunked(path):
    with h5py.File(path, 'w', libver='earliest') as f:
        f.create_dataset('x', shape=(6, 3), dtype='<f8', chunks=(2, 3), fillvalue=-1.5)
    return 'float64'


def sparse_huge_grid(path):
    # Over 2^20 chunk positions, two written: a dense table would dwarf the file, so gpufeed
    # keeps only the stored chunks; the rest read as the fill value. (libhdf5 takes a minute
    # to read every position: the expected values are built here and compared with h5py's
    # around the written chunks.)
    want = np.full(1100000, 9, dtype='<i2')
    want[5], want[-1] = 1, 2
    with h5py.File(path, 'w', libver='earliest') as f:
        d = f.create_dataset('x', shape=want.shape, dtype='<i2', chunks=(1,), fillvalue=9)
        d[5], d[-1] = 1, 2
        assert np.array_equal(d[:10], want[:10]) and np.array_equal(d[-10:], want[-10:])
    return 'int16', want


def sparse_huge_grid_2d(path):
    want = np.full((600000, 4), -3, dtype='i1')
    want[7, 2:], want[-1, :2] = [5, 6], [7, 8]
    with h5py.File(path, 'w', libver='earliest') as f:
        d = f.create_dataset('x', shape=want.shape, dtype='i1', chunks=(1, 2), fillvalue=-3,
                             compression='gzip')
        d[7, 2:], d[-1, :2] = [5, 6], [7, 8]
        assert np.array_equal(d[:10], want[:10]) and np.array_equal(d[-10:], want[-10:])
    return 'int8', want


def never_written_latest(maxshape, compression=None):
    # libver='latest' chunk indexes (fixed array, extensible array, v2 B-tree) not yet made:
    # their address is undefined until a chunk is written.
    def make(path):
        with h5py.File(path, 'w', libver='latest') as f:
            f.create_dataset('x', shape=(6, 3), dtype='<f4', chunks=(2, 3), fillvalue=2.5,
                             maxshape=maxshape, compression=compression)
        return 'float32'
    return make


def sparse_chunked(path):
    with h5py.File(path, 'w', libver='earliest') as f:
        d = f.create_dataset('x', shape=(40, 3), dtype='<i2', chunks=(4, 3), fillvalue=9)
        d[13] = [1, 2, 3]
        d[39] = [4, 5, 6]
    return 'int16'


def bitfield(ftype, values, dtype, **layout):
    """Dataset 'x' of bitfield type `ftype` (as PyTables writes bool: an 8-bit bitfield),
    compared with h5py's read (unsigned integers of the bitfield's width)."""
    values = np.asarray(values, dtype=np.dtype(dtype).str.replace('b', 'u'))
    mtype = {1: h5t.STD_B8LE, 2: h5t.STD_B16LE, 4: h5t.STD_B32LE, 8: h5t.STD_B64LE}

    def make(path):
        dcpl = None
        if layout:
            dcpl = h5p.create(h5p.DATASET_CREATE)
            if 'chunks' in layout:
                dcpl.set_chunk(layout['chunks'])
                dcpl.set_deflate(1)
            if layout.get('compact'):
                dcpl.set_layout(h5d.COMPACT)
        with h5py.File(path, 'w', libver='earliest') as f:
            d = h5d.create(f.id, b'x', ftype, h5s.create_simple(values.shape), dcpl=dcpl)
            d.write(h5s.ALL, h5s.ALL, values, mtype=mtype[values.itemsize])
        with h5py.File(path, 'r') as f:
            mine = f['x'][()]
        assert mine.dtype.kind == 'u' and np.array_equal(mine, values), (path, mine)
        return dtype, mine.astype(values.dtype).view(dtype) if dtype == 'bool' else mine
    return make


BOOLS = np.array([[0, 1, 1], [0, 0, 1], [1, 1, 1], [0, 0, 0]])
BITS16 = np.array([0, 1, 0x8000, 0xffff, 0x1234, 7])
BITS32 = np.array([0, 1, 0x80000000, 0xffffffff, 0x12345678, 7])
BITS64 = np.array([0, 1, 2**63, 2**64 - 1, 0x123456789abcdef0, 7], dtype=np.uint64)

VALID = {
    'nbit_int': nbit_int,
    'precision_int': precision_int,
    'offset_int': offset_int,
    'ebias_float': ebias_float,
    'vax_float32': lambda p: vax(p, h5t.IEEE_F32LE, np.float32, 4),
    'vax_float64': lambda p: vax(p, h5t.IEEE_F64LE, np.float64, 8),
    'compact_be': compact_be,
    'layout_v1_contiguous': layout_v1_contiguous,
    # A 1-D chunked dataset's message is 24 bytes, exactly its fields: HDF5 1.6 files.
    'layout_v1_chunked': chunked_layout(1, (30,), (4,)),
    'layout_v2_chunked': chunked_layout(2, (6, 5), (4, 2)),
    'layout_v1_compact': layout_v1_compact,
    'never_written': never_written,
    'never_written_chunked': never_written_chunked,
    'sparse_chunked': sparse_chunked,
    'sparse_huge_grid': sparse_huge_grid,
    'sparse_huge_grid_2d': sparse_huge_grid_2d,
    'never_written_fixed_array': never_written_latest((6, 3), 'gzip'),
    'never_written_extensible_array': never_written_latest((None, 3)),
    'never_written_btree2': never_written_latest((None, None)),
    'bitfield_b8': bitfield(h5t.STD_B8LE, BOOLS, 'bool'),
    'bitfield_b8_chunked': bitfield(h5t.STD_B8LE, BOOLS, 'bool', chunks=(2, 3)),
    'bitfield_b8_compact': bitfield(h5t.STD_B8LE, BOOLS, 'bool', compact=True),
    'bitfield_b16_be': bitfield(h5t.STD_B16BE, BITS16, 'uint16'),
    'bitfield_b32_le': bitfield(h5t.STD_B32LE, BITS32, 'uint32', chunks=(4,)),
    'bitfield_b64_be': bitfield(h5t.STD_B64BE, BITS64, 'uint64'),
    'bitfield_b16_compact': bitfield(h5t.STD_B16BE, BITS16, 'uint16', compact=True),
}


def compact_12(path):
    with h5py.File(path, 'w', libver='earliest') as f:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_layout(h5d.COMPACT)
        create(f.id, h5t.STD_I32LE, np.arange(12, dtype='<i4').reshape(3, 4), (3, 4), dcpl)


def compact_size_zero(path):
    # The compact layout holds no data for 12 elements: libhdf5 1.10.8 copies the elements
    # from a null pointer when the dataset is read (SIGSEGV in h5py and in gpufeed).
    compact_12(path)
    rewrite_layout(path, lambda old: old[:2] + b'\0\0')


def compact_dataspace_larger(path):
    # The dataspace says 30 x 4 elements; the compact layout holds 3 x 4.
    compact_12(path)
    data = bytearray(open(path, 'rb').read())
    needle = struct.pack('<QQ', 3, 4)
    assert data.count(needle) == 2  # the dataspace's extent and its maximum
    open(path, 'wb').write(data.replace(needle, struct.pack('<QQ', 30, 4)))


def compact_v1_size_zero(path):
    # The same in a version-1 layout message.
    compact_12(path)
    rewrite_layout(path, lambda old: old_layout(1, 0, (3, 4), 0, [3, 4, 4]))


def mantissa_float(path):
    # A 4-byte float with a 20-bit mantissa: no gpufeed dtype holds it (refused, not read).
    t = h5t.IEEE_F32LE.copy()
    t.set_fields(31, 20, 8, 0, 20)
    t.set_precision(32)
    low_level(path, lambda fid: create(fid, t, FLOATS.astype(np.float32)))


def bitfield_b8_not_bool(path):
    # An 8-bit bitfield holding 5 in sample 2: no bool; refused as it is read.
    bitfield(h5t.STD_B8LE, [[0, 1], [1, 0], [1, 5]], 'uint8')(path)


def compound(out):
    """OUT_DIR/compound.h5: compound datasets as PyTables and pandas format="table" write them
    (little- and big-endian members, bool, a string and a variable-length member), and
    OUT_DIR/compound.<dataset>.<member>.bin: each numeric member as h5py reads it."""
    rng = np.random.default_rng(3)
    record = np.dtype([('a', '<i8'), ('b', '>f4'), ('c', '>i2'), ('flag', '?'), ('name', 'S4'),
                       ('v', h5py.vlen_dtype(np.int32))])
    table = np.empty(10, dtype=record)
    table['a'] = np.arange(10) * 1000003
    table['b'] = np.linspace(-3, 4, 10)
    table['c'] = rng.integers(-30000, 30000, 10)
    table['flag'] = np.arange(10) % 3 == 0
    table['name'] = [b'r%d' % i for i in range(10)]
    table['v'] = [np.arange(i, dtype=np.int32) for i in range(10)]
    chunked = np.zeros((12, 2), dtype=[('x', '>f8'), ('y', '<u2')])
    chunked['x'] = rng.standard_normal((12, 2))
    chunked['y'] = rng.integers(0, 65535, (12, 2))
    path = os.path.join(out, 'compound.h5')
    with h5py.File(path, 'w') as f:
        f['table'] = table
        f.create_dataset('chunked', data=chunked, chunks=(4, 2), compression='gzip')
    with h5py.File(path, 'r') as f:
        for name, members in [('table', 'abc'), ('chunked', 'xy')]:
            for m in members:
                mine = f[name][m]
                mine.astype(mine.dtype.newbyteorder('<')).tofile(
                    os.path.join(out, f'compound.{name}.{m}.bin'))
        flags = f['table']['flag']
        assert flags.dtype == np.bool_
        flags.tofile(os.path.join(out, 'compound.table.flag.bin'))
    pytables_table(os.path.join(out, 'compound_pt.h5'), out)


def pytables_table(path, out):
    """A table as PyTables writes one: a bool column as an 8-bit bitfield, an array column
    (shape (3,), big-endian), a nested compound column, an int column; written with the file
    type as the memory type, so every byte is as given. OUT_DIR/compound_pt.pt.<member>.bin:
    the numeric members as h5py reads them."""
    rows = np.zeros(10, dtype=[('ok', 'u1'), ('vec', '>f4', (3,)),
                               ('pos', [('x', '<f4'), ('y', '<f4')]), ('n', '<i4')])
    rows['ok'] = np.arange(10) % 3 == 1
    rows['vec'] = np.arange(30).reshape(10, 3) * 0.5 - 4
    rows['pos']['x'] = np.arange(10)
    rows['n'] = np.arange(10) * -9
    tid = h5t.create(h5t.COMPOUND, rows.dtype.itemsize)
    pos = h5t.create(h5t.COMPOUND, 8)
    pos.insert(b'x', 0, h5t.IEEE_F32LE)
    pos.insert(b'y', 4, h5t.IEEE_F32LE)
    for name, file_type in [('ok', h5t.STD_B8LE), ('vec', h5t.array_create(h5t.IEEE_F32BE, (3,))),
                            ('pos', pos), ('n', h5t.STD_I32LE)]:
        tid.insert(name.encode(), rows.dtype.fields[name][1], file_type)
    with h5py.File(path, 'w') as f:
        space = h5s.create_simple((10,))
        dset = h5d.create(f.id, b'pt', tid, space)
        dset.write(h5s.ALL, h5s.ALL, rows, mtype=tid)
    with h5py.File(path, 'r') as f:
        for m in ['ok', 'vec', 'n']:
            mine = f['pt'][m]
            mine.astype(mine.dtype.newbyteorder('<')).tofile(
                os.path.join(out, f'compound_pt.pt.{m}.bin'))


HOSTILE = {
    'compact_size_zero': compact_size_zero,
    'compact_dataspace_larger': compact_dataspace_larger,
    'compact_v1_size_zero': compact_v1_size_zero,
}


def expected(path, dtype):
    """Dataset 'x' as libhdf5 converts it into the native `dtype` (and as h5py reads it, where
    h5py maps the file type to that dtype)."""
    with h5py.File(path, 'r') as f:
        d = f['x']
        out = np.empty(d.shape, dtype=dtype)
        d.id.read(h5s.ALL, h5s.ALL, out, mtype=h5t.py_create(np.dtype(dtype)))
        try:
            mine = d[()]
        except (OSError, TypeError, ValueError, KeyError):
            mine = None  # h5py has no dtype for the type (VAX order)
        if mine is not None and mine.dtype.kind == out.dtype.kind:
            assert np.array_equal(mine.astype(dtype), out), (path, mine, out)
    return out


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = {}
    for name, make in VALID.items():
        path = os.path.join(out, name + '.h5')
        made = make(path)
        dtype, want = made if isinstance(made, tuple) else (made, expected(path, made))
        want.astype(np.dtype(dtype).newbyteorder('<')).tofile(
            os.path.join(out, name + '.bin'))
        cases[name] = dtype
        print(name)
    mantissa_float(os.path.join(out, 'mantissa_float.h5'))
    bitfield_b8_not_bool(os.path.join(out, 'bitfield_b8_not_bool.h5'))
    compound(out)
    for name, make in HOSTILE.items():
        make(os.path.join(out, 'hostile_' + name + '.h5'))
        print('hostile_' + name)
    json.dump(cases, open(os.path.join(out, 'cases.json'), 'w'), indent=1)


if __name__ == '__main__':
    main()
