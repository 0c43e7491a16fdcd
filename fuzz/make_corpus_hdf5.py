#!/usr/bin/python3
"""Seed corpus for hdf5_fuzz: small valid files of every layout gpufeed reads, plus the
crafted regression files of tests/sources/make_hostile_hdf5.py. Run with Debian's
/usr/bin/python3 (h5py):

    make_corpus_hdf5.py OUT_DIR
"""
import os
import shutil
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'tests', 'sources'))
import make_hostile_hdf5  # noqa: E402


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
    for name, make in make_hostile_hdf5.CASES.items():
        make(os.path.join(out, 'hostile_' + name + '.h5'))
    # Inputs the fuzzer found, kept in git (small): corpus/hdf5_fuzz/.
    kept = os.path.join(HERE, 'corpus', 'hdf5_fuzz')
    for name in sorted(os.listdir(kept)) if os.path.isdir(kept) else []:
        shutil.copy(os.path.join(kept, name), os.path.join(out, 'found_' + name))
    print(f'{len(os.listdir(out))} files in {out}')


if __name__ == '__main__':
    main()
