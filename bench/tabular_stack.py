#!/usr/bin/python3
"""A table of an id key, 35 real feature columns and a label, read into batches of 256 as a
training loop gets them: the 35-field form (one [B] tensor per column, torch.stack'ed by the
loop into x: float32[B, 35]) against the stacked form (fields={"x": "f*", "y": "label"}: the
workers write x: float32[B, 35] straight into the batch). SQLite, and PostgreSQL when
scripts/pg-test-server can start a private server.

    PYTHONPATH=python:build/python /usr/bin/python3 bench/tabular_stack.py [--rows 200000]

Both forms read the same loaded table (the load is not timed), as float32 (SQLite's REAL is
declared float32 in the 35-field form, converted with dtype= in the stacked one), with the
same workers, on the CPU. The forms alternate over --rounds rounds of --epochs epochs; the
median samples/s of each and their ratio are printed.
"""
import argparse
import glob
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import gpufeed

K = 35
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_sqlite(path, rows):
    rng = np.random.default_rng(0)
    values = rng.standard_normal((rows, K))
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE wide (id INTEGER, {}, label INTEGER)".format(
            ", ".join(f"f{k} REAL" for k in range(K))))
        db.executemany("INSERT INTO wide VALUES ({})".format(", ".join("?" * (K + 2))),
                       ((i, *map(float, values[i]), i % 10) for i in range(rows)))


def start_postgres(folder, rows):
    """The private server's URI with the table made, or None when it cannot start."""
    script = os.path.join(REPO, "scripts", "pg-test-server")
    try:
        conninfo = subprocess.run([script, "start", folder, "--watch", str(os.getpid())],
                                  check=True, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"postgresql: no server ({e})", file=sys.stderr)
        return None
    parts = dict(p.split("=", 1) for p in conninfo.split())
    columns = ", ".join(f"random()::real AS f{k}" for k in range(K))
    sql = (f"CREATE TABLE wide AS SELECT g::int8 AS id, {columns}, (g % 10)::int8 AS label "
           f"FROM generate_series(0, {rows - 1}) g;")
    # psql as the script finds the server binaries: PATH, then the newest Debian folder.
    psql = shutil.which("psql") or sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"),
                                          key=lambda p: int(p.split("/")[4]))[-1]
    subprocess.run([psql, conninfo, "-q", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True)
    return (f"postgresql:///{parts['dbname']}?host={parts['host']}&port={parts['port']}"
            f"&user={parts['user']}&table=wide&key=id")


def per_column_epoch(loader):
    samples = 0
    for batch in loader:
        x = torch.stack([batch[f"f{k}"] for k in range(K)], dim=1)
        samples += x.shape[0]
    return samples


def stacked_epoch(loader):
    samples = 0
    for batch in loader:
        x = batch["x"]
        samples += x.shape[0]
    return samples


def measure(name, uri, declare, args):
    fields = "".join(f"{',' if k else ''}f{k}:float32[]" for k in range(K)) if declare else ""
    per_column = gpufeed.Loader(uri + (f"&fields={fields}" if declare else ""), batch_size=args.batch,
                                shuffle=True, device="cpu", workers=args.workers, autotune=False)
    assert len(per_column.schema) == K + 1  # f0..f34 and label: the key is no field
    stacked = gpufeed.Loader(uri, fields={"x": "f*", "y": "label"}, dtype={"x": "float32"},
                             batch_size=args.batch, shuffle=True, device="cpu",
                             workers=args.workers, autotune=False)
    assert stacked.schema[0] == ("x", "float32", (K,))
    rates = {"35 fields + torch.stack": [], "stacked x: float32[B, 35]": []}
    for _ in range(args.rounds):
        for label, loader, epoch in (("35 fields + torch.stack", per_column, per_column_epoch),
                                     ("stacked x: float32[B, 35]", stacked, stacked_epoch)):
            start = time.perf_counter()
            samples = sum(epoch(loader) for _ in range(args.epochs))
            rates[label].append(samples / (time.perf_counter() - start))
    medians = {label: statistics.median(r) for label, r in rates.items()}
    for label, rate in medians.items():
        spread = f"{min(rates[label]):,.0f}-{max(rates[label]):,.0f}"
        print(f"{name:10s} {label:28s} {rate:12,.0f} samples/s  (rounds: {spread})")
    ratio = medians["stacked x: float32[B, 35]"] / medians["35 fields + torch.stack"]
    print(f"{name:10s} stacked / 35 fields: {ratio:.1f}x")
    per_column.close()
    stacked.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=2, help="epochs per round and form")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    print(f"{args.rows:,} rows x {K} real columns, batch {args.batch}, {args.workers} workers, "
          f"{args.epochs} epochs x {args.rounds} rounds per form, torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as folder:
        db = os.path.join(folder, "wide.db")
        make_sqlite(db, args.rows)
        measure("sqlite", f"sqlite://{db}?table=wide&key=id", True, args)
    if not args.no_postgres:
        # A folder of its own: the script hands it to the postgres user when run as root.
        pg = tempfile.mkdtemp(prefix="gpufeed-pg-")
        uri = start_postgres(pg, args.rows)
        if uri is not None:
            try:
                measure("postgresql", uri, False, args)
            finally:
                subprocess.run([os.path.join(REPO, "scripts", "pg-test-server"), "stop", pg],
                               capture_output=True)


if __name__ == "__main__":
    main()
