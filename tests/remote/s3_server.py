#!/usr/bin/python3
"""An S3-API server (s3rver) and a fault proxy in front of it, on 127.0.0.1, for tests.

As a library (stdlib; boto3 only for client() and the upload helpers):

    with S3Server() as s3:
        s3.create_bucket("data")
        s3.put("data", "train/x.npy", payload)
        s3.set_rules(fail_status=503, fail_count=2, retry_after="1")
        run_client(s3.endpoint, s3.env())   # clients go through the proxy
        print(s3.counts()["by_status"])

As a program, for C++ tests and shell scripts:

    /usr/bin/python3 tests/remote/s3_server.py --bucket data --upload ./dir=data/train

prints one JSON line ({"endpoint", "direct_endpoint", "access_key", "secret_key",
"region"}) and serves until stdin reaches EOF or SIGTERM. Each further stdin line may be a
JSON command, answered by one JSON line on stdout:
    {"op": "put", "bucket": B, "key": K, "data_b64": "..."}   -> {"ok": true}
    {"op": "create_bucket", "bucket": B}                       -> {"ok": true}
"""

import argparse
import base64
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SERVER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server")
ACCESS_KEY = "S3RVER"
SECRET_KEY = "S3RVER"
REGION = "us-east-1"
START_TIMEOUT_S = 30


def unavailable_reason():
    """Why the double cannot run here (None when it can): node or the npm packages missing."""
    if shutil.which("node") is None:
        return "node is not installed (scripts/setup installs it)"
    if not os.path.isdir(os.path.join(SERVER_DIR, "node_modules", "s3rver")):
        return f"{SERVER_DIR}/node_modules is missing: run scripts/setup"
    return None


class _NodeChild:
    """A node script that prints {"port": N} once it listens and exits when stdin closes."""

    def __init__(self, script, args, log_path):
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            ["node", os.path.join(SERVER_DIR, script), *args], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, cwd=SERVER_DIR)
        self.port = self._read_port(script)

    def _read_port(self, script):
        deadline = time.monotonic() + START_TIMEOUT_S
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not ready:
                self.stop()
                raise RuntimeError(f"{script} did not start in {START_TIMEOUT_S} s: {self._tail()}")
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                self.stop()
                raise RuntimeError(f"{script} exited before listening: {self._tail()}")
            line += chunk
        return int(json.loads(line)["port"])

    def _tail(self):
        self._log.flush()
        with open(self.log_path, "rb") as f:
            return f.read()[-2000:].decode("utf-8", "replace") or "(no output)"

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream and not stream.closed:
                stream.close()
        self._log.close()


class S3Server:
    """s3rver over a temporary folder plus the fault proxy; a context manager.

    `endpoint` is the proxy (what clients under test use): it checks SigV4 signatures as S3
    does and answers suffix ranges, multi-range requests and If-Match as S3 does, where
    s3rver does not. `direct_endpoint` is s3rver itself (what fixtures use to seed data, so
    setup never meets injected faults).
    """

    access_key = ACCESS_KEY
    secret_key = SECRET_KEY
    region = REGION

    def __init__(self):
        self._dir = None
        self._s3rver = None
        self._proxy = None
        self._client = None
        self.endpoint = None
        self.direct_endpoint = None

    def start(self):
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        self._dir = tempfile.mkdtemp(prefix="gpufeed-s3-")
        try:
            data = os.path.join(self._dir, "data")
            os.mkdir(data)
            self._s3rver = _NodeChild("start_s3rver.js", ["--directory", data],
                                      os.path.join(self._dir, "s3rver.log"))
            self.direct_endpoint = f"http://127.0.0.1:{self._s3rver.port}"
            self._proxy = _NodeChild(
                "fault_proxy.js",
                ["--upstream", f"127.0.0.1:{self._s3rver.port}", "--region", self.region,
                 "--verify-sigv4", f"{self.access_key}:{self.secret_key}"],
                os.path.join(self._dir, "proxy.log"))
            self.endpoint = f"http://127.0.0.1:{self._proxy.port}"
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        for url in (self.direct_endpoint + "/", self.endpoint + "/__proxy/health"):
            while True:
                try:
                    with urllib.request.urlopen(url, timeout=5) as r:
                        r.read()
                    break
                except (urllib.error.URLError, OSError) as err:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{url} does not answer: {err}") from err
                    time.sleep(0.05)

    def stop(self):
        for child in (self._proxy, self._s3rver):
            if child is not None:
                child.stop()
        self._proxy = self._s3rver = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def env(self):
        """Environment variables that point an AWS-style client at the proxy."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_REGION": self.region,
        }

    def client(self, endpoint=None):
        """A boto3 S3 client, path-style, on the direct endpoint unless told otherwise."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=endpoint or self.direct_endpoint,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))

    def _direct(self):
        if self._client is None:
            self._client = self.client()
        return self._client

    def create_bucket(self, name):
        self._direct().create_bucket(Bucket=name)

    def put(self, bucket, key, data):
        """Writes (or replaces) one object; a later read sees the new body and ETag."""
        self._direct().put_object(Bucket=bucket, Key=key, Body=bytes(data))

    def upload_tree(self, local_dir, bucket, prefix=""):
        """Uploads every file under local_dir to bucket/prefix/<relative path>."""
        prefix = prefix.strip("/")
        for root, _, files in os.walk(local_dir):
            for name in sorted(files):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, local_dir).replace(os.sep, "/")
                key = f"{prefix}/{rel}" if prefix else rel
                self._direct().upload_file(path, bucket, key)

    def _control(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.endpoint + "/__proxy/" + path, data=data,
                                     method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"{}")

    def set_rules(self, **rules):
        """Replaces the proxy's fault rules (see fault_proxy.js for the fields)."""
        return self._control("POST", "rules", rules)

    def counts(self):
        return self._control("GET", "counts")

    def answers(self):
        """The proxy's last answers, oldest first: dicts of method, path, status, request_id
        and host_id."""
        return self._control("GET", "answers")

    def recorded(self):
        """[(path, Range header or None)] of the GETs since set_rules(record=True)."""
        return [tuple(entry) for entry in self._control("GET", "recorded")]

    def reset_proxy(self):
        """Zeroes the proxy's counts and clears its rules."""
        self._control("POST", "reset", {})


def _serve_commands(s3):
    """Answers JSON commands from stdin until EOF."""
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            cmd = json.loads(line)
            if cmd["op"] == "put":
                s3.put(cmd["bucket"], cmd["key"], base64.b64decode(cmd.get("data_b64", "")))
            elif cmd["op"] == "create_bucket":
                s3.create_bucket(cmd["bucket"])
            else:
                raise ValueError(f"unknown op {cmd['op']!r}")
            reply = {"ok": True}
        except Exception as err:  # noqa: BLE001 - the caller reads the reason
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        print(json.dumps(reply), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bucket", action="append", default=[], help="create this bucket")
    parser.add_argument("--upload", action="append", default=[], metavar="LOCAL=BUCKET/PREFIX",
                        help="upload a folder (its bucket is created when missing)")
    args = parser.parse_args(argv)
    uploads = []
    for spec in args.upload:
        local, sep, target = spec.partition("=")
        if not sep or not target:
            parser.error(f"--upload wants LOCAL=BUCKET/PREFIX, got {spec!r}")
        bucket, _, prefix = target.partition("/")
        uploads.append((local, bucket, prefix))

    def on_term(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    with S3Server() as s3:
        buckets = list(dict.fromkeys(args.bucket + [b for _, b, _ in uploads]))
        for bucket in buckets:
            s3.create_bucket(bucket)
        for local, bucket, prefix in uploads:
            s3.upload_tree(local, bucket, prefix)
        print(json.dumps({"endpoint": s3.endpoint, "direct_endpoint": s3.direct_endpoint,
                          "access_key": s3.access_key, "secret_key": s3.secret_key,
                          "region": s3.region}), flush=True)
        _serve_commands(s3)


if __name__ == "__main__":
    main()
