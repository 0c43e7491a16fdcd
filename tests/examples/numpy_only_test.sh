#!/bin/bash
# examples/numpy_only links none of the optional parts' libraries, reads a NumPy folder, and
# refuses an HDF5 file and an s3:// URI naming the build option it lacks.
# Usage: numpy_only_test.sh NUMPY_ONLY_BINARY PYTHON
set -euo pipefail
bin=$1
python=$2

needed=$(readelf -d "$bin" | grep NEEDED || true)
for lib in libhdf5 libsqlite3 libpq libcurl libjpeg libturbojpeg libpng; do
  if grep -q "\[$lib[.-]" <<<"$needed"; then
    echo "FAIL: $bin links $lib:"; echo "$needed"; exit 1
  fi
done

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" - "$dir" <<'PY'
import sys, numpy as np, h5py
d = sys.argv[1]
import os
os.mkdir(f"{d}/data")
np.save(f"{d}/data/x.npy", np.arange(1000 * 4, dtype=np.float32).reshape(1000, 4))
np.save(f"{d}/data/y.npy", np.arange(1000, dtype=np.int64))
with h5py.File(f"{d}/d.h5", "w") as f:
    f["x"] = np.zeros((10, 4), np.float32)
PY

out=$("$bin" "$dir/data" 64)
[ "$out" = "16 batches, 1000 rows" ] || { echo "FAIL: read gave '$out'"; exit 1; }

expect_refusal() {
  local path=$1 option=$2 err
  if err=$("$bin" "$path" 2>&1); then echo "FAIL: $path was read: $err"; exit 1; fi
  grep -q -- "-D$option=OFF" <<<"$err" || { echo "FAIL: $path: '$err' names no $option"; exit 1; }
}
expect_refusal "$dir/d.h5" GPUFEED_WITH_HDF5
expect_refusal "s3://bucket/data" GPUFEED_WITH_REMOTE
echo "ok: no optional library linked; NumPy read; HDF5 and s3:// refused by name"
