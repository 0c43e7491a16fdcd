#!/usr/bin/python3
"""Writes crafted HDF5 files, one per class of hostile input gpufeed must refuse.

Each file starts as a small valid file written by h5py; then the bytes that carry the attack
are patched in place (a dataspace extent, the chunk shape in the layout message, a v1 B-tree
child pointer or key, a superblock address). Run with Debian's /usr/bin/python3 (h5py):

    make_hostile_hdf5.py OUT_DIR

Writes OUT_DIR/<case>.h5 for every case in CASES and prints their names. The C++ test
(hdf5_hostile_test.cc) asserts the error for each; fuzz/make_corpus_hdf5.py adds them to the
fuzz corpus as regression inputs.
"""
import os
import struct
import sys

import h5py
import numpy as np

# Marker extents: values h5py writes as 8-byte little-endian integers that occur nowhere else
# in a small file, patched afterwards into extents libhdf5 would not let us create.
MARK_A = 0x7A7A7A7A
MARK_B = 0x7B7B7B7B


def patch_u64(path, old, new):
    data = bytearray(open(path, 'rb').read())
    needle = struct.pack('<Q', old)
    count = data.count(needle)
    if count == 0:
        raise SystemExit(f'{path}: marker {old:#x} not found')
    data = data.replace(needle, struct.pack('<Q', new))
    open(path, 'wb').write(data)


def layout_v3(data, rank):
    """Offset of the chunk dims in the (only) version-3 chunked layout message."""
    needle = bytes([3, 2, rank + 1])
    at = data.find(needle)
    if at < 0 or data.find(needle, at + 1) >= 0:
        raise SystemExit('expected exactly one v3 chunked layout message')
    return at + 3 + 8  # version, class, dimensionality, B-tree address


def btree_nodes(data, rank):
    """The v1 chunk B-tree nodes: (offset, level, entries, children offsets, keys offsets)."""
    key = 8 + 8 * (rank + 1)
    nodes = []
    at = data.find(b'TREE')
    while at >= 0:
        if data[at + 4] == 1:  # node type 1: raw data chunks
            level = data[at + 5]
            entries = struct.unpack_from('<H', data, at + 6)[0]
            body = at + 8 + 16
            keys = [body + i * (key + 8) for i in range(entries + 1)]
            children = [k + key for k in keys[:-1]]
            nodes.append((at, level, entries, children, keys))
        at = data.find(b'TREE', at + 1)
    return nodes


def two_level_tree(path):
    """A 1-D chunked dataset with enough chunks for a two-level v1 B-tree."""
    with h5py.File(path, 'w', libver='earliest') as f:
        f.create_dataset('x', data=np.arange(400, dtype='u1'), chunks=(1,))
    data = bytearray(open(path, 'rb').read())
    nodes = btree_nodes(data, 1)
    roots = [n for n in nodes if n[1] == 1]
    leaves = [n for n in nodes if n[1] == 0]
    if len(roots) != 1 or len(leaves) < 2:
        raise SystemExit(f'{path}: expected a two-level chunk B-tree')
    return data, roots[0], leaves


def grid_overflow(path):
    # Item 1: (3, 0x5555555555555556) in chunks of (1, 1): the chunk counts' product wraps
    # 64 bits (to 2), and so does the element count.
    with h5py.File(path, 'w') as f:
        f.create_dataset('x', shape=(3, MARK_A), dtype='u1', chunks=(1, 1))
    patch_u64(path, MARK_A, 0x5555555555555556)


def grid_huge(path):
    # Item 1: a grid of 2^40 chunks that does not wrap: a table of terabytes.
    with h5py.File(path, 'w') as f:
        f.create_dataset('x', shape=(MARK_A, MARK_B), dtype='u1', chunks=(1, 1))
    patch_u64(path, MARK_A, 1 << 20)
    patch_u64(path, MARK_B, 1 << 20)


def chunk_wrap(path):
    # Item 2: chunk dims (2^31, 2^31, 4) of bytes: 2^64 bytes, which wraps to 0.
    with h5py.File(path, 'w', libver='earliest') as f:
        d = f.create_dataset('x', shape=(4, 8, 8), dtype='u1', chunks=(1, 8, 8), compression='gzip')
        d[0] = np.ones((8, 8), dtype='u1')
    data = bytearray(open(path, 'rb').read())
    at = layout_v3(data, 3)
    struct.pack_into('<III', data, at, 1 << 31, 1 << 31, 4)
    open(path, 'wb').write(data)


def shape_overflow(path):
    # Item 3: (0, 2^62, 2^62): zero samples, but a sample of 2^124 elements.
    with h5py.File(path, 'w') as f:
        f.create_dataset('x', shape=(0, MARK_A, MARK_B), dtype='f4', chunks=(1, 1, 1),
                         maxshape=(None, MARK_A, MARK_B))
    patch_u64(path, MARK_A, 1 << 62)
    patch_u64(path, MARK_B, 1 << 62)


def btree_cycle(path):
    # Items 4 and 5: the root's first child is the root itself (libhdf5 recurses forever).
    data, root, _ = two_level_tree(path)
    struct.pack_into('<Q', data, root[3][0], root[0])
    open(path, 'wb').write(data)


def btree_shared(path):
    # Item 4: every child of the root is the same leaf: a walk without a visited set reads it
    # once per parent entry (64^levels in deeper trees).
    data, root, leaves = two_level_tree(path)
    for child in root[3]:
        struct.pack_into('<Q', data, child, leaves[0][0])
    open(path, 'wb').write(data)


def btree_duplicate(path):
    # Item 4: a leaf lists the same chunk coordinates twice.
    data, _, leaves = two_level_tree(path)
    keys = leaves[0][4]
    data[keys[1] + 8:keys[1] + 16] = data[keys[0] + 8:keys[0] + 16]
    open(path, 'wb').write(data)


def root_past_eof(path):
    # Item 5: the superblock's root object header address lies far past the end of the file.
    with h5py.File(path, 'w', libver='earliest') as f:
        f['x'] = np.arange(10)
    data = bytearray(open(path, 'rb').read())
    # Version 0 superblock, 8-byte fields: the root symbol table entry starts at 24 + 4 * 8;
    # its object header address follows the 8-byte link name offset.
    struct.pack_into('<Q', data, 24 + 4 * 8 + 8, 1 << 40)
    open(path, 'wb').write(data)


def small_earliest(path):
    with h5py.File(path, 'w', libver='earliest') as f:
        f['x'] = np.arange(10)
    with h5py.File(path, 'r') as f:
        header = h5py.h5o.get_info(f['x'].id).addr
    return bytearray(open(path, 'rb').read()), header


def symbol_node_overflow(path):
    # Item 5: a symbol table node claiming 65535 entries where its node holds 2K = 8 (libhdf5
    # decodes them all into a buffer sized for 2K).
    data, _ = small_earliest(path)
    at = data.find(b'SNOD')
    struct.pack_into('<H', data, at + 6, 0xFFFF)
    open(path, 'wb').write(data)


def message_overrun(path):
    # Item 5: the dataset's first header message claims more bytes than its header holds.
    data, header = small_earliest(path)
    struct.pack_into('<H', data, header + 16 + 2, 0xFFF8)  # v1 message: type(2), size(2)
    open(path, 'wb').write(data)


def heap_free_list_loop(path):
    # Item 5: the root group's local heap free list points back at itself (libhdf5 follows it
    # forever).
    data, _ = small_earliest(path)
    at = data.find(b'HEAP')
    _, free, segment = struct.unpack_from('<QQQ', data, at + 8)
    if free == 1:
        raise SystemExit(f'{path}: the heap has no free block')
    struct.pack_into('<Q', data, segment + free, free)
    open(path, 'wb').write(data)


def lookup3(data):
    """libhdf5's metadata checksum (Bob Jenkins' lookup3 hashlittle, initval 0)."""
    M = 0xFFFFFFFF

    def rot(x, k):
        return ((x << k) | (x >> (32 - k))) & M

    length = len(data)
    a = b = c = (0xDEADBEEF + length) & M
    i = 0
    while length > 12:
        a = (a + int.from_bytes(data[i:i + 4], 'little')) & M
        b = (b + int.from_bytes(data[i + 4:i + 8], 'little')) & M
        c = (c + int.from_bytes(data[i + 8:i + 12], 'little')) & M
        a = (a - c) & M; a ^= rot(c, 4); c = (c + b) & M
        b = (b - a) & M; b ^= rot(a, 6); a = (a + c) & M
        c = (c - b) & M; c ^= rot(b, 8); b = (b + a) & M
        a = (a - c) & M; a ^= rot(c, 16); c = (c + b) & M
        b = (b - a) & M; b ^= rot(a, 19); a = (a + c) & M
        c = (c - b) & M; c ^= rot(b, 4); b = (b + a) & M
        i += 12
        length -= 12
    if length == 0:
        return c
    tail = bytes(data[i:i + length]) + bytes(12 - length)
    a = (a + int.from_bytes(tail[0:4], 'little')) & M
    b = (b + int.from_bytes(tail[4:8], 'little')) & M
    c = (c + int.from_bytes(tail[8:12], 'little')) & M
    c ^= b; c = (c - rot(b, 14)) & M
    a ^= c; a = (a - rot(c, 11)) & M
    b ^= a; b = (b - rot(a, 25)) & M
    c ^= b; c = (c - rot(b, 16)) & M
    a ^= c; a = (a - rot(c, 4)) & M
    b ^= a; b = (b - rot(a, 14)) & M
    c ^= b; c = (c - rot(b, 24)) & M
    return c


def reseal(data, start, end):
    """Rewrites the checksum at data[end:end + 4] over data[start:end]."""
    struct.pack_into('<I', data, end, lookup3(bytes(data[start:end])))


def latest_file(path, build):
    with h5py.File(path, 'w', libver='latest') as f:
        build(f)
    return bytearray(open(path, 'rb').read())


def only(data, sig):
    at = data.find(sig)
    if at < 0 or data.find(sig, at + 1) >= 0:
        raise SystemExit(f'expected exactly one {sig!r}')
    return at


def fa_checksum(path):
    # A fixed array data block whose bytes changed after its checksum: refused, not read.
    data = latest_file(path, lambda f: f.create_dataset('x', data=np.arange(100, dtype='u1'),
                                                        chunks=(1,)))
    at = only(data, b'FADB')
    data[at + 6 + 8 + 3 * 8] ^= 0x40  # the fourth chunk's address
    open(path, 'wb').write(data)


def fa_count(path):
    # A fixed array header (checksum intact) claiming 2^40 entries for a grid of 100 chunks.
    data = latest_file(path, lambda f: f.create_dataset('x', data=np.arange(100, dtype='u1'),
                                                        chunks=(1,)))
    at = only(data, b'FAHD')
    struct.pack_into('<Q', data, at + 8, 1 << 40)
    reseal(data, at, at + 8 + 8 + 8)
    open(path, 'wb').write(data)


def earray_shared(path):
    # Two data block pointers of an extensible array's index block name one block: a walk
    # without a visited set reads it twice (or, nested, exponentially often).
    data = latest_file(path, lambda f: f.create_dataset(
        'x', data=np.arange(100, dtype='u1'), chunks=(1,), maxshape=(None,)))
    head = only(data, b'EAHD')
    max_bits, index_elements, min_elements, min_pointers = data[head + 7:head + 11]
    at = only(data, b'EAIB')
    dblks = at + 6 + 8 + index_elements * 8
    data[dblks + 8:dblks + 16] = data[dblks:dblks + 8]
    direct = 2 * (min_pointers - 1)
    supers = 1 + max_bits - (min_elements.bit_length() - 1) - 2 * (min_pointers.bit_length() - 1)
    reseal(data, at, dblks + (direct + supers) * 8)
    open(path, 'wb').write(data)


def bt2_tree(path):
    data = latest_file(path, lambda f: f.create_dataset(
        'x', data=np.zeros((300, 4), dtype='u1'), chunks=(1, 1), maxshape=(None, None)))
    at = only(data, b'BTHD')
    rec_size, depth = struct.unpack_from('<HH', data, at + 10)
    root, root_nrec = struct.unpack_from('<QH', data, at + 16)
    if depth != 1:
        raise SystemExit(f'{path}: expected a chunk B-tree of depth 1, not {depth}')
    return data, root, root_nrec, rec_size


def bt2_cycle(path):
    # The v2 B-tree root's first child is the root itself (checksum intact).
    data, root, nrec, rec_size = bt2_tree(path)
    ptrs = root + 6 + nrec * rec_size
    struct.pack_into('<Q', data, ptrs, root)
    reseal(data, root, ptrs + (nrec + 1) * 9)  # a child pointer: address, 1-byte record count
    open(path, 'wb').write(data)


def leaf_records(data, leaf, rec_size):
    """The record count of the v2 B-tree leaf at `leaf`: where its checksum holds."""
    for nrec in range(1, 512):
        end = leaf + 6 + nrec * rec_size
        if lookup3(bytes(data[leaf:end])) == struct.unpack_from('<I', data, end)[0]:
            return nrec
    raise SystemExit('cannot find the leaf checksum')


def bt2_duplicate(path):
    # A v2 B-tree leaf listing one chunk twice (checksum intact).
    data, _, _, rec_size = bt2_tree(path)
    leaf = data.find(b'BTLF')
    nrec = leaf_records(data, leaf, rec_size)
    first, second = leaf + 6, leaf + 6 + rec_size
    data[second + 8:second + rec_size] = data[first + 8:first + rec_size]
    reseal(data, leaf, leaf + 6 + nrec * rec_size)
    open(path, 'wb').write(data)


def dense_file(path):
    def build(f):
        g = f.create_group('g')
        for i in range(10):
            g[f'd{i}'] = np.arange(3)
        f['x'] = np.arange(3)
    data = latest_file(path, build)
    heap = only(data, b'FRHP')
    leaf = only(data, b'BTLF')  # the name index fits in one leaf
    return data, heap, leaf, leaf_records(data, leaf, 11)  # 4-byte hash, 7-byte heap ID


def dense_hash(path):
    # A link name index record whose hash is not its link's name's (checksum intact).
    data, _, leaf, nrec = dense_file(path)
    data[leaf + 6] ^= 0x01
    reseal(data, leaf, leaf + 6 + nrec * 11)  # records: 4-byte hash, 7-byte heap ID
    open(path, 'wb').write(data)


def dense_heap_id(path):
    # A heap ID naming bytes past its direct block (checksum of the index intact).
    data, _, leaf, nrec = dense_file(path)
    data[leaf + 6 + 4 + 1:leaf + 6 + 4 + 5] = struct.pack('<I', 0xFFFF00)
    reseal(data, leaf, leaf + 6 + nrec * 11)
    open(path, 'wb').write(data)


def dense_heap_checksum(path):
    # A link in the fractal heap rewritten after the direct block's checksum.
    data, _, _, _ = dense_file(path)
    block = only(data, b'FHDB')
    at = data.find(b'd3', block)
    data[at + 1] = ord('9')
    open(path, 'wb').write(data)


def v1_message(path, dataset, kind):
    """The file's bytes and the offset of the body of `dataset`'s first header message of type
    `kind`, in the version-1 object header libver='earliest' writes."""
    with h5py.File(path, 'r') as f:
        header = h5py.h5o.get_info(f[dataset].id).addr
    data = bytearray(open(path, 'rb').read())
    pos = header + 16  # v1 header prefix, then messages: type(2) size(2) flags(1) reserved(3)
    for _ in range(struct.unpack_from('<H', data, header + 2)[0]):
        mtype, size = struct.unpack_from('<HH', data, pos)
        if mtype == kind:
            return data, pos + 8
        pos += 8 + size
    raise SystemExit(f'{path}: dataset {dataset} has no header message of type {kind}')


def enum_base_size(path):
    # An enumeration of 1-byte values over a base type claiming 1.5 GB: libhdf5 allocates
    # members x base size for the values (3 GB here) before it reads them (found by hdf5_fuzz).
    with h5py.File(path, 'w', libver='earliest') as f:
        f.create_dataset('x', data=np.array([0, 1, 1], dtype=np.int8),
                         dtype=h5py.enum_dtype({'FALSE': 0, 'TRUE': 1}, basetype='i1'))
    data, body = v1_message(path, 'x', 3)  # the datatype message
    assert data[body] & 0x0f == 8  # an enumeration; its base type follows its 8-byte head
    struct.pack_into('<I', data, body + 8 + 4, 0x60000001)  # the base type's size
    open(path, 'wb').write(data)


def external_heap_size(path):
    # A dataset stored in an external file whose file-name heap claims 0x31313131313131 bytes:
    # libhdf5 allocates the heap's stated size when it opens the dataset (found by hdf5_fuzz).
    folder = os.path.dirname(path)
    with open(os.path.join(folder, 'external_heap_size.bin'), 'wb') as ext:
        ext.write(np.arange(3, dtype=np.int32).tobytes())
    with h5py.File(path, 'w', libver='earliest') as f:
        f.create_dataset('x', shape=(3,), dtype='<i4',
                         external=[('external_heap_size.bin', 0, 12)])
    # The external file list: version, reserved(3), slots(2 + 2), its heap's address.
    data, body = v1_message(path, 'x', 7)
    heap = struct.unpack_from('<Q', data, body + 8)[0]
    struct.pack_into('<Q', data, heap + 8, 0x31313131313131)  # the heap's data size
    open(path, 'wb').write(data)


def group_cycle(path):
    # A group holding a hard link to itself whose reference count says one link: libhdf5's
    # H5Ovisit2 tracks only objects counted as linked more than once, so it recurses around
    # the cycle until the stack overflows (found by hdf5_fuzz).
    with h5py.File(path, 'w', libver='earliest') as f:
        f['x'] = np.arange(10)
        g = f.create_group('g')
        g['again'] = g  # a second hard link: the group's count becomes 2
    with h5py.File(path, 'r') as f:
        header = h5py.h5o.get_info(f['g'].id).addr
    data = bytearray(open(path, 'rb').read())
    assert struct.unpack_from('<I', data, header + 4)[0] == 2
    struct.pack_into('<I', data, header + 4, 1)  # v1 header: version, reserved, count(2), rc(4)
    open(path, 'wb').write(data)


def v2_header_messages(data, at):
    """The messages of the version-2 object header at `at` (its first chunk):
    [(type, offset of the message's body, body size)], and the offset of the chunk's checksum.
    """
    assert data[at:at + 5] == b'OHDR\x02'
    flags = data[at + 5]
    pos = at + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
    width = 1 << (flags & 3)
    size = int.from_bytes(data[pos:pos + width], 'little')
    pos += width
    end = pos + size
    messages = []
    while pos + 4 <= end:
        kind, body = data[pos], struct.unpack_from('<H', data, pos + 1)[0]
        pos += 4 + (2 if flags & 0x04 else 0)
        messages.append((kind, pos, body))
        pos += body
    return messages, end


def layout_v5(path):
    # HDF5 2.0's data layout message (version 5: version 4's bytes with a fixed-width chunk
    # size in the index), as h5py on HDF5 2.x writes under libver='latest': libhdf5 1.10.8
    # cannot read it, so it is refused as unsupported, naming the version (not "damaged").
    data = latest_file(path, lambda f: f.create_dataset('x', data=np.arange(100, dtype='u1'),
                                                        chunks=(10,), maxshape=(None,)))
    patched = 0
    at = data.find(b'OHDR')
    while at >= 0:
        messages, end = v2_header_messages(data, at)
        for kind, body, _ in messages:
            if kind == 8 and data[body] == 4:  # the layout message, version 4
                data[body] = 5
                reseal(data, at, end)
                patched += 1
        at = data.find(b'OHDR', at + 1)
    assert patched == 1, patched
    open(path, 'wb').write(data)


def link_name_slash(path):
    # A group entry whose name holds a '/': libhdf5 resolves it as a path (a name of '/' is
    # the root, and its visit recursed until the stack overflowed; found by hdf5_fuzz).
    with h5py.File(path, 'w', libver='earliest') as f:
        f['x'] = np.arange(10)
        f.create_group('zz')
    data = bytearray(open(path, 'rb').read())
    at = data.find(b'zz\x00')
    assert at > 0
    data[at + 1] = ord('/')
    open(path, 'wb').write(data)


CASES = {
    'grid_overflow': grid_overflow,
    'grid_huge': grid_huge,
    'chunk_wrap': chunk_wrap,
    'shape_overflow': shape_overflow,
    'btree_cycle': btree_cycle,
    'btree_shared': btree_shared,
    'btree_duplicate': btree_duplicate,
    'root_past_eof': root_past_eof,
    'symbol_node_overflow': symbol_node_overflow,
    'message_overrun': message_overrun,
    'heap_free_list_loop': heap_free_list_loop,
    'enum_base_size': enum_base_size,
    'external_heap_size': external_heap_size,
    'group_cycle': group_cycle,
    'link_name_slash': link_name_slash,
    'layout_v5': layout_v5,
    'fa_checksum': fa_checksum,
    'fa_count': fa_count,
    'earray_shared': earray_shared,
    'bt2_cycle': bt2_cycle,
    'bt2_duplicate': bt2_duplicate,
    'dense_hash': dense_hash,
    'dense_heap_id': dense_heap_id,
    'dense_heap_checksum': dense_heap_checksum,
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, make in CASES.items():
        make(os.path.join(out, name + '.h5'))
        print(name)


if __name__ == '__main__':
    main()
