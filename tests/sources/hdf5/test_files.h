// HDF5 files written by Debian's h5py at test time, with what h5py reads back from each
// dataset (little-endian, C order) dumped beside them as <case>.<dataset>.bin, and a
// manifest.json listing every case's datasets, dtypes and shapes.
// Thread-safety: one test thread.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

namespace gpufeed::testing {

inline constexpr const char* kPython = "/usr/bin/python3";

// Runs `script` with /usr/bin/python3 and `args`; true when it exits 0.
inline bool RunPython(const std::string& dir, const std::string& name, const std::string& script,
                      const std::string& args) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << script;
  return std::system(
             fmt::format("{} {} {} > {}/{}.log 2>&1", kPython, path, args, dir, name).c_str()) == 0;
}

inline std::string ReadWholeFile(const std::string& path);

// A folder of test files written once per build tree and shared by every test process after the
// first: ctest runs each test in its own process, and h5py's start-up alone costs a second, so
// writing the files per process cost CI minutes in each of its three build trees. The folder is
// <GPUFEED_TEST_FIXTURE_ROOT>/<name>-<hash of key>, where `key` is everything the files depend
// on (the script's text): an edited script writes a new folder. Concurrent test processes wait
// on a lock file for the first one to finish; a folder is used only once `make(dir)` returned
// true for it (a ".complete" mark). Returns the folder, or "" with `error` saying why. Tests that
// change a file copy it first: the folder is read by every later test.
inline std::string SharedFixtureDir(const std::string& name, const std::string& key,
                                    const std::function<bool(const std::string&)>& make,
                                    std::string* error) {
  namespace fs = std::filesystem;
#ifdef GPUFEED_TEST_FIXTURE_ROOT
  const fs::path root = GPUFEED_TEST_FIXTURE_ROOT;
#else
  const fs::path root = fs::temp_directory_path() / fmt::format("gpufeed-fixtures-{}", getuid());
#endif
  std::error_code ec;
  fs::create_directories(root, ec);
  const std::string dir =
      (root / fmt::format("{}-{:016x}", name, std::hash<std::string>{}(key))).string();
  const int lock = ::open((dir + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    *error = "cannot lock " + dir + ".lock";
    if (lock >= 0) ::close(lock);
    return "";
  }
  std::string result;
  if (fs::exists(dir + "/.complete")) {
    result = dir;
  } else {
    fs::remove_all(dir, ec);
    fs::create_directories(dir, ec);
    if (make(dir)) {
      std::ofstream(dir + "/.complete") << "done\n";
      result = dir;
    } else {
      *error = "could not write the test files in " + dir;
    }
  }
  ::close(lock);  // releases the lock
  return result;
}

// SharedFixtureDir for a Python script file run as `python3 SCRIPT DIR`; its text is the key.
// On failure `error` holds what the script printed.
inline std::string SharedScriptOutput(const std::string& name, const std::string& script_path,
                                      std::string* error) {
  const std::string text = ReadWholeFile(script_path);
  std::string log;
  std::string dir = SharedFixtureDir(
      name, script_path + "\n" + text,
      [&](const std::string& d) {
        log = d + "/make.log";
        return std::system(fmt::format("{} {} {} > {} 2>&1", kPython, script_path, d, log)
                               .c_str()) == 0;
      },
      error);
  if (dir.empty() && !log.empty()) *error += ": " + ReadWholeFile(log);
  return dir;
}

// SharedFixtureDir for an inline Python script run as `python3 script DIR`.
inline std::string SharedPythonOutput(const std::string& name, const std::string& script,
                                      std::string* error) {
  std::string log;
  std::string dir = SharedFixtureDir(
      name, script,
      [&](const std::string& d) {
        log = d + "/" + name + ".py.log";
        return RunPython(d, name + ".py", script, d);
      },
      error);
  if (dir.empty() && !log.empty()) *error += ": " + ReadWholeFile(log);
  return dir;
}

inline bool HaveH5py() {
  return std::system(fmt::format("{} -c 'import h5py, numpy' > /dev/null 2>&1", kPython).c_str()) ==
         0;
}

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The cases: each a file and its datasets. Sizes stay small so the suite runs in seconds.
inline constexpr const char* kMakeHdf5Cases = R"PY(
import sys, os, json, numpy as np, h5py
d = sys.argv[1]
rng = np.random.default_rng(7)
manifest = {}

def values(shape, dt):
    n = int(np.prod(shape))
    dt = np.dtype(dt)
    if dt == np.bool_: v = rng.integers(0, 2, n).astype(bool)
    elif dt.kind == 'f': v = (rng.standard_normal(n) * 100).astype(dt)
    elif dt.kind == 'u': v = rng.integers(0, min(2**(8*dt.itemsize), 2**62), n, dtype=np.uint64).astype(dt)
    else: v = rng.integers(-2**(8*dt.itemsize-1), 2**(8*dt.itemsize-1) - 1, n, dtype=np.int64).astype(dt)
    return v.reshape(shape)

def case(name, build, **file_kw):
    path = os.path.join(d, name + '.h5')
    with h5py.File(path, 'w', **file_kw) as f:
        names = build(f)
    entries = []
    with h5py.File(path, 'r') as f:
        for ds in names:
            a = f[ds][...]
            a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder('<')))
            dtname = 'bool' if a.dtype == np.bool_ else a.dtype.name
            a.view(np.uint8).tofile(os.path.join(d, name + '.' + ds.strip('/').replace('/', '_') + '.bin'))
            entries.append({'dataset': ds, 'dtype': dtname, 'shape': list(a.shape)})
    manifest[name] = entries

def plain(f):
    f['mel'] = values((1000, 1, 64, 32), 'f4')
    f['label'] = np.arange(1000, dtype='i8')
    return ['mel', 'label']
case('plain', plain)

def gzip(f):
    f.create_dataset('mel', data=values((1000, 1, 64, 32), 'f4'), chunks=(256, 1, 64, 32),
                     compression='gzip', compression_opts=1)
    f.create_dataset('label', data=np.arange(1000, dtype='i8'), chunks=(256,),
                     compression='gzip', compression_opts=1)
    return ['mel', 'label']
case('gzip', gzip)

def h5py_defaults(f):
    f.create_dataset('mel', data=values((700, 3, 40, 33), 'f2'), chunks=True,
                     compression='gzip', shuffle=True)
    f.create_dataset('label', data=np.arange(700, dtype='i4'), chunks=True, compression='gzip',
                     shuffle=True)
    f.create_dataset('plain_chunks', data=values((700, 3, 40, 33), 'f2'), chunks=True)
    return ['mel', 'label', 'plain_chunks']
case('h5py_defaults', h5py_defaults)

def multi_axis(f):
    f.create_dataset('x', data=values((101, 5, 13), 'i2'), chunks=(7, 2, 5))
    f.create_dataset('y', data=values((101, 5, 13), 'f8'), chunks=(7, 2, 5), compression='gzip',
                     shuffle=True)
    f.create_dataset('z', data=values((101, 4, 6), 'u1'), chunks=(3, 4, 2))
    f.create_dataset('w', data=values((101, 4, 6), 'i4'), chunks=(200, 8, 6),
                     maxshape=(None, 8, 6), compression='gzip')
    return ['x', 'y', 'z', 'w']
case('multi_axis', multi_axis)

def dtypes(f):
    names = []
    for i, dt in enumerate(['bool', 'i1', 'u1', 'i2', 'u2', 'u4', 'u8', 'i4', 'f8', '>f4', '>i8']):
        shape = (50,) if i % 2 else (50, 3)
        n = 'd%d' % i
        f[n] = values(shape, dt)
        names.append(n)
        c = 'c%d' % i
        f.create_dataset(c, data=values(shape, dt), chunks=(8,) + shape[1:], compression='gzip',
                         shuffle=True)
        names.append(c)
    return names
case('dtypes', dtypes)

def fill(f):
    a = f.create_dataset('part', shape=(100, 8), dtype='i4', chunks=(10, 8), fillvalue=7)
    a[0:30] = values((30, 8), 'i4')
    a[60:65] = values((5, 8), 'i4')
    b = f.create_dataset('partz', shape=(100, 3), dtype='f4', chunks=(16, 3), fillvalue=-1.5,
                         compression='gzip', shuffle=True)
    b[20:40] = values((20, 3), 'f4')
    f.create_dataset('never', shape=(100,), dtype='f4', fillvalue=2.5)
    f.create_dataset('neverchunked', shape=(100, 2), dtype='i2', chunks=(9, 1), fillvalue=-3)
    return ['part', 'partz', 'never', 'neverchunked']
case('fill', fill)

def fletcher(f):
    f.create_dataset('a', data=values((300, 10), 'f4'), chunks=(32, 10), fletcher32=True,
                     compression='gzip', shuffle=True)
    f.create_dataset('b', data=values((300,), 'i8'), chunks=(64,), fletcher32=True)
    return ['a', 'b']
case('fletcher', fletcher)

def compact(f):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple((20, 3))
    dsid = h5py.h5d.create(f.id, b'small', h5py.h5t.STD_I32LE, space, dcpl=dcpl)
    v = values((20, 3), 'i4')
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, v)
    f['other'] = values((20,), 'f4')
    return ['small', 'other']
case('compact', compact)

def latest(f):
    f.create_dataset('fixed', data=values((500, 6), 'f4'), chunks=(10, 6), compression='gzip')
    f.create_dataset('ext', data=values((500, 6), 'f4'), chunks=(10, 6), maxshape=(None, 6))
    f.create_dataset('v2', data=values((500, 6), 'u2'), chunks=(10, 2), maxshape=(None, None),
                     compression='gzip', shuffle=True)
    f.create_dataset('one', data=values((500, 6), 'u2'), chunks=(500, 6), compression='gzip')
    f.create_dataset('implicit', data=values((500, 6), 'u2'), chunks=(10, 6))
    return ['fixed', 'ext', 'v2', 'one', 'implicit']
case('latest', latest, libver='latest')

def latest_index(f):
    # Every chunk index of layout version 4, read by gpufeed itself: each with partial edge
    # chunks, gzip and plain, and chunks never written (fill value). Nine datasets: the root
    # group keeps its links densely too.
    a = f.create_dataset('fa_paged', shape=(301, 40), dtype='f4', chunks=(1, 3),
                         compression='gzip', shuffle=True, fillvalue=-2)
    a[0:100] = values((100, 40), 'f4')  # pages of the fixed array never written
    a[250:301] = values((51, 40), 'f4')
    f.create_dataset('fa_small', data=values((301, 7), 'u2'), chunks=(40, 3))
    f.create_dataset('ea_axis0', data=values((301, 50), 'f8'), chunks=(1, 7),
                     maxshape=(None, 50), compression='gzip')
    f.create_dataset('ea_axis1', data=values((301, 9), 'i4'), chunks=(4, 2), maxshape=(301, None))
    f.create_dataset('bt2', data=values((301, 33), 'u1'), chunks=(4, 4), maxshape=(None, None),
                     compression='gzip')
    b = f.create_dataset('bt2_plain', shape=(301, 9), dtype='i8', chunks=(3, 2),
                         maxshape=(None, None), fillvalue=5)
    b[10:290] = values((280, 9), 'i8')
    f.create_dataset('single_gzip', data=values((301, 6), 'f4'), chunks=(301, 6),
                     compression='gzip')
    f.create_dataset('single_plain', data=values((301, 6), 'i2'), chunks=(301, 6))
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((7, 3))
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    space = h5py.h5s.create_simple((301, 8))
    h5py.h5d.create(f.id, b'implicit', h5py.h5t.STD_I16LE, space, dcpl=dcpl)
    f['implicit'][0:295] = values((295, 8), 'i2')
    return ['fa_paged', 'fa_small', 'ea_axis0', 'ea_axis1', 'bt2', 'bt2_plain', 'single_gzip',
            'single_plain', 'implicit']
case('latest_index', latest_index, libver='latest')

def dense_groups(f):
    # Groups of more than 8 links in a libver="latest" file keep them in a fractal heap with a
    # v2 B-tree name index; track_order adds a creation-order index.
    g = f.create_group('g')
    for i in range(24):
        g.create_dataset('d%02d' % i, data=values((30, i % 3 + 1), 'i4'))
    h = f.create_group('h', track_order=True)
    for i in range(12):
        h.create_dataset('e%02d' % i, data=values((30,), 'f4'), chunks=(7,), compression='gzip')
    inner = g.create_group('inner')
    for i in range(10):
        inner['x%d' % i] = values((30, 2), 'u1')
    return ['/g/d00', '/g/d07', '/g/d23', '/h/e00', '/h/e11', '/g/inner/x9']
case('dense_groups', dense_groups, libver='latest')

def userblock(f):
    f['a'] = values((100, 4), 'f4')
    f.create_dataset('b', data=values((100, 4), 'f4'), chunks=(8, 4), compression='gzip')
    f.create_dataset('c', data=values((100, 4), 'f4'), chunks=(8, 4))
    return ['a', 'b', 'c']
case('userblock', userblock, userblock_size=512)

def btree(f):
    f.create_dataset('one', data=np.arange(5000, dtype='i8'), chunks=(1,))
    f.create_dataset('pairs', data=values((5000, 2), 'f4'), chunks=(2, 1), compression='gzip')
    return ['one', 'pairs']
case('btree', btree)

def scaleoffset(f):
    f.create_dataset('s', data=values((200, 4), 'i4'), chunks=(20, 4), scaleoffset=0)
    f['t'] = values((200,), 'f4')
    return ['s', 't']
case('scaleoffset', scaleoffset)

def groups(f):
    g = f.create_group('train')
    g.create_dataset('mel', data=values((64, 2, 3), 'f4'), chunks=(16, 2, 3), compression='gzip')
    g['label'] = np.arange(64, dtype='i8')
    return ['/train/mel', '/train/label']
case('groups', groups)

def second(f):
    f.create_dataset('mel', data=values((333, 1, 64, 32), 'f4'), chunks=(100, 1, 64, 32),
                     compression='gzip', compression_opts=1)
    f.create_dataset('label', data=np.arange(1000, 1333, dtype='i8'))
    return ['mel', 'label']
case('second', second)

json.dump(manifest, open(os.path.join(d, 'manifest.json'), 'w'), indent=1)
)PY";

}  // namespace gpufeed::testing
