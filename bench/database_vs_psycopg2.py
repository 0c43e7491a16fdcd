#!/usr/bin/python3
"""A per-batch psycopg2 query loop against gpufeed's bulk load, on the same table, in one run.

    /usr/bin/python3 bench/database_vs_psycopg2.py [--build build] [--rows 100000]
                                                   [--dsn "host=... dbname=..."]

The table: `rows` samples of 7 receivers x 5 float32 features (a real[7][5] column) and an
int8 label, keyed by id. Without --dsn a private server is started with scripts/pg-test-server
and stopped at the end.

(a) psycopg2 as users write it: shuffled ids, batch 256, one
    `SELECT id, features, label FROM samples WHERE id = ANY(%s)` per batch, rows turned into
    NumPy arrays -- one epoch.
(b) gpufeed (build/bench/bench_database_load): the table loaded once over binary COPY, then
    epochs from memory through the loader, batch 256.
Prints the load time, samples/s per epoch of each, and the ratio of gpufeed's epoch to (a).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import psycopg2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_table(dsn, rows):
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS samples")
        cur.execute(
            """CREATE TABLE samples AS
               SELECT g::int8 AS id,
                      ARRAY(SELECT ARRAY(SELECT (random() * 2 - 1)::real
                                         FROM generate_series(1, 5) j WHERE g > -j)
                            FROM generate_series(1, 7) i WHERE g > -i) AS features,
                      (g %% 10)::int8 AS label
               FROM generate_series(0, %s) g""", (rows - 1,))
        cur.execute("ALTER TABLE samples ADD PRIMARY KEY (id)")
        cur.execute("ANALYZE samples")


def psycopg2_epoch(dsn, rows, batch):
    ids = np.random.default_rng(0).permutation(rows)
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    start = time.perf_counter()
    seen = 0
    for at in range(0, rows, batch):
        chunk = ids[at:at + batch].tolist()
        cur.execute("SELECT id, features, label FROM samples WHERE id = ANY(%s)", (chunk,))
        got = cur.fetchall()
        features = np.asarray([r[1] for r in got], dtype=np.float32)
        labels = np.asarray([r[2] for r in got], dtype=np.int64)
        assert features.shape == (len(chunk), 7, 5) and labels.shape == (len(chunk),)
        seen += len(got)
    seconds = time.perf_counter() - start
    conn.close()
    assert seen == rows
    return rows / seconds, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--rows", type=int, default=100000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dsn", help="libpq connection string of a server to use")
    args = parser.parse_args()
    program = os.path.join(args.build, "bench", "bench_database_load")
    if not os.path.exists(program):
        sys.exit(f"{program} is missing: build it (ninja -C {args.build} bench_database_load)")

    server_dir = None
    dsn = args.dsn
    if dsn is None:
        server_dir = tempfile.mkdtemp(prefix="gpufeed-bench-pg-")  # stop removes it
        out = subprocess.run([os.path.join(ROOT, "scripts", "pg-test-server"), "start",
                              server_dir, "--watch", str(os.getpid())],
                             check=True, capture_output=True, text=True)
        dsn = out.stdout.strip().splitlines()[-1]
    try:
        make_table(dsn, args.rows)
        print(f"table: {args.rows} rows of features real[7][5] + label int8; batch {args.batch}")
        a_rate, a_seconds = psycopg2_epoch(dsn, args.rows, args.batch)
        print(f"(a) psycopg2, one query per batch: {a_rate:12,.0f} samples/s "
              f"(epoch {a_seconds:.2f} s)")
        params = "table=samples&columns=id,features,label&key=id&connections=4"
        if dsn.startswith(("postgresql:", "postgres:")):
            uri = dsn + ("&" if "?" in dsn else "?") + params
        else:  # key=value pairs (without spaces inside values) become URI parameters
            uri = "postgresql://?" + "&".join(
                f"{k}={v}" for k, v in (p.split("=", 1) for p in dsn.split())) + "&" + params
        out = subprocess.run([program, uri, "--batch", str(args.batch), "--epochs",
                              str(args.epochs)], check=True, capture_output=True, text=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["rows"] == args.rows
        rates = result["samples_per_s"]
        print(f"(b) gpufeed load (binary COPY, 4 connections): {result['load_s']:.3f} s")
        for i, r in enumerate(rates):
            print(f"(b) gpufeed epoch {i} from memory:    {r:12,.0f} samples/s "
                  f"({r / a_rate:,.0f}x (a))")
        best = max(rates)
        median = sorted(rates)[len(rates) // 2]
        print(f"ratio gpufeed epoch / psycopg2 epoch: {median / a_rate:,.0f}x (median), "
              f"{best / a_rate:,.0f}x (best); target >= 100x")
        first_epoch = args.rows / (result["load_s"] + args.rows / rates[0])
        print(f"including the load, gpufeed's first epoch: {first_epoch:,.0f} samples/s "
              f"({first_epoch / a_rate:,.1f}x (a))")
    finally:
        if server_dir is not None:
            subprocess.run([os.path.join(ROOT, "scripts", "pg-test-server"), "stop", server_dir],
                           check=False)


if __name__ == "__main__":
    main()
