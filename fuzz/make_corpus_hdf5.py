#!/usr/bin/python3
"""Seed corpus for hdf5_fuzz: small valid files of every layout gpufeed reads, plus the
crafted regression files of tests/sources/hdf5/make_hostile_hdf5.py, and the unusual layouts
of tests/sources/hdf5/make_unusual_hdf5.py (data layout messages of versions 1 and 2, N-bit and
VAX elements, compact layouts that do not hold their dataset), and compound (table) datasets
as h5py, pandas and PyTables write them. Run with Debian's
/usr/bin/python3 (h5py):

    make_corpus_hdf5.py OUT_DIR
"""
import os
import shutil
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'tests', 'sources', 'hdf5'))
import make_hostile_hdf5  # noqa: E402
import make_unusual_hdf5  # noqa: E402


def seeds(out):
    rng = np.random.default_rng(3)
    for libver in ('earliest', 'latest'):
        def make(name, build):
            with h5py.File(os.path.join(out, f'{name}_{libver}.h5'), 'w', libver=libver) as f:
                build(f)
        make('contiguous', lambda f: f.create_dataset('x', data=np.arange(24, dtype='<f4')
                                                      .reshape(6, 4)))
        make('big_endian', lambda f: f.create_dataset('x', data=np.arange(8, dtype='>i2')))
        make('chunked', lambda f: f.create_dataset('x', data=rng.integers(0, 9, (20, 3, 2),
                                                   dtype='u1'), chunks=(4, 2, 2)))
        make('gzip_shuffle', lambda f: f.create_dataset(
            'x', data=np.arange(40, dtype='<i4').reshape(10, 4), chunks=(3, 4),
            compression='gzip', shuffle=True, fletcher32=True))
        make('fill', lambda f: f.create_dataset('x', shape=(5, 2), dtype='f8', fillvalue=1.5,
                                                chunks=(2, 2)))
        make('groups', lambda f: (f.create_group('g').create_dataset('a', data=[1, 2, 3]),
                                  f.create_dataset('b', data=[True, False, True])))
        make('many_chunks', lambda f: f.create_dataset('x', data=np.arange(200, dtype='u1'),
                                                       chunks=(1,)))
        make('features', _features)
        # Compact layout (data inside the object header) through the low-level API: h5py
        # has no keyword for it.
        with h5py.File(os.path.join(out, f'compact_{libver}.h5'), 'w', libver=libver) as f:
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            d = h5py.h5d.create(f.id, b'x', h5py.h5t.STD_U16LE, h5py.h5s.create_simple((6,)),
                                dcpl=dcpl)
            d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.arange(6, dtype='<u2'))


def latest_seeds(out):
    """The structures gpufeed reads itself in libver="latest" files, one small file each: every
    chunk index of layout version 4 (fixed array, paged too; extensible array past its index
    block; v2 B-tree of depth 1, filtered and not; single chunk, filtered; implicit), groups
    in dense link storage (name index, creation-order index, nested), external storage."""
    def make(name, build):
        with h5py.File(os.path.join(out, f'v4_{name}.h5'), 'w', libver='latest') as f:
            build(f)
    u1 = lambda n: np.arange(n, dtype='u1')
    make('fixed_array', lambda f: f.create_dataset('x', data=u1(60).reshape(20, 3), chunks=(3, 2),
                                                   compression='gzip'))
    make('fixed_array_paged', lambda f: f.create_dataset('x', data=u1(1100), chunks=(1,)))
    make('earray', lambda f: f.create_dataset('x', data=u1(200), chunks=(1,), maxshape=(None,),
                                              compression='gzip'))
    make('earray_axis1', lambda f: f.create_dataset('x', data=u1(60).reshape(3, 20),
                                                    chunks=(2, 1), maxshape=(3, None)))
    make('btree2', lambda f: f.create_dataset('x', data=np.zeros((300, 4), 'u1'), chunks=(1, 1),
                                              maxshape=(None, None)))
    make('btree2_gzip', lambda f: f.create_dataset('x', data=u1(120).reshape(30, 4),
                                                   chunks=(2, 2), maxshape=(None, None),
                                                   compression='gzip', shuffle=True))
    make('single_gzip', lambda f: f.create_dataset('x', data=u1(12).reshape(4, 3), chunks=(4, 3),
                                                   compression='gzip'))

    def implicit(f):
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((3, 2))
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        h5py.h5d.create(f.id, b'x', h5py.h5t.STD_U8LE, h5py.h5s.create_simple((10, 3)), dcpl=dcpl)
        f['x'][0:8] = u1(24).reshape(8, 3)
    make('implicit', implicit)

    def dense(f):
        g = f.create_group('g')
        for i in range(12):
            g[f'd{i}'] = u1(i + 1)
        h = g.create_group('inner', track_order=True)
        for i in range(9):
            h[f'e{i}'] = u1(3)
        f['x'] = u1(5)
    make('dense_groups', dense)

    def external(f):
        np.arange(8, dtype='<f4').tofile(os.path.join(out, 'raw.bin'))
        f.create_dataset('x', shape=(8,), dtype='<f4', external=[('raw.bin', 0, 32)])
        f['link'] = h5py.ExternalLink('v4_fixed_array.h5', '/x')
    make('external', external)
    os.remove(os.path.join(out, 'raw.bin'))  # not an HDF5 seed


def compound_seeds(out):
    """Compound datasets: make_unusual_hdf5.py's (big-endian, bool, string, variable-length,
    bitfield, array and nested members; contiguous and chunked with gzip), one in a compact
    layout and one chunked under an extensible array in a libver="latest" file."""
    with tempfile.TemporaryDirectory() as tmp:
        make_unusual_hdf5.compound(tmp)
        for name in ('compound.h5', 'compound_pt.h5'):
            shutil.copy(os.path.join(tmp, name), os.path.join(out, 'table_' + name))
    rows = np.zeros(6, dtype=[('a', '>i4'), ('b', '<f2'), ('c', 'u1', (2,))])
    rows['a'] = np.arange(6) - 3
    rows['c'] = np.arange(12).reshape(6, 2)
    with h5py.File(os.path.join(out, 'table_compact.h5'), 'w') as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        d = h5py.h5d.create(f.id, b't', h5py.h5t.py_create(rows.dtype),
                            h5py.h5s.create_simple((6,)), dcpl=dcpl)
        d.write(h5py.h5s.ALL, h5py.h5s.ALL, rows)
    with h5py.File(os.path.join(out, 'table_earray.h5'), 'w', libver='latest') as f:
        f.create_dataset('t', data=rows, chunks=(2,), maxshape=(None,), compression='gzip')


def _features(f):
    """What real files hold besides plain numeric datasets: attributes, links of every kind,
    committed and unsupported types, groups with creation order, a resizable dataset."""
    g = f.create_group('g', track_order=True)
    for i in range(10):  # more than 8 links: dense storage in libver="latest" files
        g.create_dataset(f'd{i}', data=np.arange(i + 1, dtype='i2'))
    for i in range(10):
        f.attrs[f'a{i}'] = i
    f['soft'] = h5py.SoftLink('/g/d1')
    f['external'] = h5py.ExternalLink('other.h5', '/x')
    f['named_type'] = np.dtype('<f4')
    f.create_dataset('typed', data=np.arange(3, dtype='<f4'), dtype=f['named_type'])
    f['compound'] = np.zeros(2, dtype=[('a', '<i4'), ('b', '<f8')])
    f.create_dataset('strings', data=['a', 'bc'], dtype=h5py.string_dtype())
    f['scalar'] = 1.0
    f.create_dataset('resizable', data=np.arange(6, dtype='u1'), maxshape=(None,), chunks=(4,))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds(out)
    latest_seeds(out)
    compound_seeds(out)
    for name, make in make_hostile_hdf5.CASES.items():
        make(os.path.join(out, 'hostile_' + name + '.h5'))
    for name, make in make_unusual_hdf5.VALID.items():
        make(os.path.join(out, 'unusual_' + name + '.h5'))
    for name, make in make_unusual_hdf5.HOSTILE.items():
        make(os.path.join(out, 'hostile_' + name + '.h5'))
    # Inputs the fuzzer found, kept in git (small): corpus/hdf5_fuzz/.
    kept = os.path.join(HERE, 'corpus', 'hdf5_fuzz')
    for name in sorted(os.listdir(kept)) if os.path.isdir(kept) else []:
        shutil.copy(os.path.join(kept, name), os.path.join(out, 'found_' + name))
    print(f'{len(os.listdir(out))} files in {out}')


if __name__ == '__main__':
    main()
