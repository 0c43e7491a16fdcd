#!/usr/bin/python3
"""Writes crafted HDF5 files, one per class of hostile input gpufeed must refuse (issue 14).

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


def dense_links(path):
    # Item 5: a group of 10 links in a libver="latest" file keeps them in a fractal heap,
    # which gpufeed does not read and libhdf5 walks blindly: refused (not damaged, though).
    with h5py.File(path, 'w', libver='latest') as f:
        g = f.create_group('g')
        for i in range(10):
            g[f'd{i}'] = np.arange(3)
        f['x'] = np.arange(3)


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
    'dense_links': dense_links,
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, make in CASES.items():
        make(os.path.join(out, name + '.h5'))
        print(name)


if __name__ == '__main__':
    main()
