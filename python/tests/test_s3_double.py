"""The S3 test double itself (tests/remote/s3_server.py): s3rver behind the fault proxy.

Every remote test trusts these behaviours, so each one is checked here with boto3's signed
(SigV4) requests or raw HTTP through the proxy endpoint.
"""

import hashlib
import http.client
import json
import time
import urllib.parse

import pytest

botocore = pytest.importorskip("botocore")
from botocore.exceptions import ClientError  # noqa: E402


def _proxy(s3_server):
    return s3_server.client(endpoint=s3_server.endpoint)


def _raw(endpoint, method, path, headers=None, body=None):
    """One plain HTTP exchange: (status, headers as a lower-case dict, body)."""
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(endpoint).netloc, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@pytest.fixture
def payload():
    return bytes(range(256)) * 1024  # 256 KiB, every offset distinct modulo 256


def test_ranged_get_through_proxy_is_206_with_the_right_bytes(s3_server, payload):
    s3_server.create_bucket("ranged")
    s3_server.put("ranged", "dir/blob.bin", payload)
    resp = _proxy(s3_server).get_object(Bucket="ranged", Key="dir/blob.bin",
                                        Range="bytes=1000-4999")
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert resp["ContentRange"] == f"bytes 1000-4999/{len(payload)}"
    assert resp["Body"].read() == payload[1000:5000]
    counts = s3_server.counts()
    assert counts["ranged"] == 1
    assert counts["by_status"] == {"206": 1}
    assert counts["bytes"] == 4000


def test_head_gives_md5_etag_and_length(s3_server, payload):
    s3_server.create_bucket("head")
    s3_server.put("head", "blob", payload)
    resp = _proxy(s3_server).head_object(Bucket="head", Key="blob")
    assert resp["ETag"] == '"' + hashlib.md5(payload).hexdigest() + '"'
    assert resp["ContentLength"] == len(payload)
    assert s3_server.counts()["by_method"] == {"HEAD": 1}


def test_list_objects_v2_paginates_and_counts_as_listings(s3_server):
    s3_server.create_bucket("listing")
    keys = [f"train/part-{i:02d}.npy" for i in range(5)]
    for key in keys:
        s3_server.put("listing", key, key.encode())
    s3_server.put("listing", "other/x", b"x")
    pages = list(_proxy(s3_server).get_paginator("list_objects_v2").paginate(
        Bucket="listing", Prefix="train/", PaginationConfig={"PageSize": 2}))
    assert len(pages) == 3
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == keys
    assert [o["Size"] for p in pages for o in p["Contents"]] == [len(k) for k in keys]
    counts = s3_server.counts()
    assert counts["listings"] == 3
    assert counts["by_method"] == {"GET": 3}


def test_fail_rule_answers_503_with_retry_after_then_passes(s3_server):
    s3_server.create_bucket("flaky")
    s3_server.put("flaky", "k", b"payload")
    s3_server.set_rules(fail_status=503, fail_count=2, retry_after="1", fail_methods=["GET"])
    for _ in range(2):
        status, headers, body = _raw(s3_server.endpoint, "GET", "/flaky/k")
        assert status == 503
        assert headers["retry-after"] == "1"
        assert b"<Code>SlowDown</Code>" in body
    # HEAD is not in fail_methods: it passes while GET failures are being served.
    assert _raw(s3_server.endpoint, "HEAD", "/flaky/k")[0] == 200
    status, _, body = _raw(s3_server.endpoint, "GET", "/flaky/k")
    assert (status, body) == (200, b"payload")
    counts = s3_server.counts()
    assert counts["by_status"] == {"503": 2, "200": 2}
    assert counts["requests"] == 4


def test_boto3_sees_the_injected_503_as_slowdown(s3_server):
    s3_server.create_bucket("slowdown")
    s3_server.put("slowdown", "k", b"v")
    s3_server.set_rules(fail_status=503, fail_count=1)
    with pytest.raises(ClientError) as err:
        _proxy(s3_server).get_object(Bucket="slowdown", Key="k")
    assert err.value.response["Error"]["Code"] == "SlowDown"
    assert _proxy(s3_server).get_object(Bucket="slowdown", Key="k")["Body"].read() == b"v"


def test_reset_rule_cuts_the_body_once(s3_server, payload):
    s3_server.create_bucket("cut")
    s3_server.put("cut", "blob", payload)
    s3_server.set_rules(reset_after_bytes=65536, reset_count=1)
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(s3_server.endpoint).netloc,
                                      timeout=30)
    conn.request("GET", "/cut/blob")
    resp = conn.getresponse()
    assert resp.status == 200
    with pytest.raises(http.client.IncompleteRead) as short:
        resp.read()
    assert short.value.partial == payload[:65536]
    conn.close()
    # boto3 either raises or hands back fewer bytes: never the whole object.
    s3_server.set_rules(reset_after_bytes=1000, reset_count=1)
    try:
        got = _proxy(s3_server).get_object(Bucket="cut", Key="blob")["Body"].read()
        assert len(got) < len(payload)
    except Exception:  # noqa: BLE001 - botocore's error classes differ between versions
        pass
    # The rule is used up: the next read is whole.
    assert _proxy(s3_server).get_object(Bucket="cut", Key="blob")["Body"].read() == payload


def test_stall_rule_holds_the_connection_until_the_client_gives_up(s3_server, payload):
    import socket

    s3_server.create_bucket("stall")
    s3_server.put("stall", "blob", payload)
    s3_server.set_rules(stall_after_bytes=1000, stall_count=1)
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(s3_server.endpoint).netloc,
                                      timeout=1)
    conn.request("GET", "/stall/blob")
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.read(1000) == payload[:1000]
    with pytest.raises(socket.timeout):
        resp.read(1)
    conn.close()
    assert _raw(s3_server.endpoint, "GET", "/stall/blob")[2] == payload


def test_latency_rule_delays_each_request(s3_server):
    s3_server.create_bucket("latency")
    s3_server.put("latency", "k", b"v")
    s3_server.set_rules(latency_ms=150)
    start = time.monotonic()
    status, _, _ = _raw(s3_server.endpoint, "GET", "/latency/k")
    assert status == 200
    assert time.monotonic() - start >= 0.15


def test_a_new_put_changes_what_the_next_read_sees(s3_server):
    s3_server.create_bucket("mutable")
    s3_server.put("mutable", "k", b"first body")
    client = _proxy(s3_server)
    first = client.get_object(Bucket="mutable", Key="k")
    assert first["Body"].read() == b"first body"
    s3_server.put("mutable", "k", b"second, longer body")
    second = client.get_object(Bucket="mutable", Key="k")
    assert second["Body"].read() == b"second, longer body"
    assert second["ETag"] != first["ETag"]


def test_s3rver_error_codes(s3_server):
    s3_server.create_bucket("errors")
    s3_server.put("errors", "k", b"0123456789")
    client = _proxy(s3_server)
    cases = [
        (lambda: client.get_object(Bucket="no-such-bucket", Key="k"), "NoSuchBucket", 404),
        (lambda: client.get_object(Bucket="errors", Key="missing"), "NoSuchKey", 404),
        (lambda: client.get_object(Bucket="errors", Key="k", Range="bytes=100-200"),
         "InvalidRange", 416),
    ]
    for call, code, status in cases:
        with pytest.raises(ClientError) as err:
            call()
        assert err.value.response["Error"]["Code"] == code
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    import boto3

    stranger = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1",
                            aws_access_key_id="NOBODY", aws_secret_access_key="x")
    with pytest.raises(ClientError) as err:
        stranger.get_object(Bucket="errors", Key="k")
    assert err.value.response["Error"]["Code"] == "InvalidAccessKeyId"


def test_control_api_is_never_forwarded_and_reset_zeroes(s3_server):
    status, _, body = _raw(s3_server.endpoint, "POST", "/__proxy/rules", body=b"not json")
    assert status == 400
    status, _, body = _raw(s3_server.endpoint, "POST", "/__proxy/rules",
                           body=b'{"fail_cuont": 3}')
    assert (status, json.loads(body)) == (400, {"error": "unknown rule fields: fail_cuont"})
    s3_server.set_rules(latency_ms=1, fail_count=3)
    status, _, body = _raw(s3_server.endpoint, "GET", "/__proxy/rules")
    assert json.loads(body) == {"latency_ms": 1, "fail_count": 3}
    assert s3_server.counts()["requests"] == 0
    _raw(s3_server.endpoint, "GET", "/any-bucket/k")
    assert s3_server.counts()["by_status"] == {"503": 1}
    s3_server.reset_proxy()
    # One connection: the one that asked for the counts.
    assert s3_server.counts() == {"requests": 0, "by_method": {}, "listings": 0, "ranged": 0,
                                  "by_status": {}, "bytes": 0, "in_flight": 0,
                                  "max_in_flight": 0, "in_flight_seconds": 0, "connections": 1}
    assert json.loads(_raw(s3_server.endpoint, "GET", "/__proxy/rules")[2]) == {}


def test_proxy_checks_sigv4_like_s3(s3_server):
    import boto3

    s3_server.create_bucket("signed")
    s3_server.put("signed", "k", b"v")
    forger = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1",
                          aws_access_key_id=s3_server.access_key,
                          aws_secret_access_key="not-the-secret")
    with pytest.raises(ClientError) as err:
        forger.get_object(Bucket="signed", Key="k")
    assert err.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert "CanonicalRequest" in err.value.response["Error"]
    elsewhere = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="eu-west-1",
                             aws_access_key_id=s3_server.access_key,
                             aws_secret_access_key=s3_server.secret_key)
    with pytest.raises(ClientError) as err:
        elsewhere.get_object(Bucket="signed", Key="k")
    assert err.value.response["Error"]["Code"] == "AuthorizationHeaderMalformed"
    # Unsigned requests pass: s3rver serves them as a public bucket would.
    assert _raw(s3_server.endpoint, "GET", "/signed/k")[0] == 200


def test_signed_keys_with_reserved_characters_and_presigned_urls(s3_server):
    s3_server.create_bucket("chars")
    client = _proxy(s3_server)
    keys = ["a b/c+d.bin", "ümlaut/é~x", "q?x=1&y", "percent%20literal"]
    for key in keys:
        client.put_object(Bucket="chars", Key=key, Body=key.encode())
        assert client.get_object(Bucket="chars", Key=key)["Body"].read() == key.encode()
    listed = client.list_objects_v2(Bucket="chars", Prefix="a b/")["Contents"]
    assert [o["Key"] for o in listed] == ["a b/c+d.bin"]
    import boto3
    from botocore.config import Config

    presigner = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1",
                             aws_access_key_id=s3_server.access_key,
                             aws_secret_access_key=s3_server.secret_key,
                             config=Config(signature_version="s3v4"))
    url = presigner.generate_presigned_url("get_object",
                                           Params={"Bucket": "chars", "Key": keys[0]},
                                           ExpiresIn=600)
    parts = urllib.parse.urlsplit(url)
    assert "X-Amz-Signature=" in parts.query
    status, _, body = _raw(s3_server.endpoint, "GET", f"{parts.path}?{parts.query}")
    assert (status, body) == (200, keys[0].encode())
    tampered = parts.query.replace("X-Amz-Expires=600", "X-Amz-Expires=601")
    assert _raw(s3_server.endpoint, "GET", f"{parts.path}?{tampered}")[0] == 403


def test_ranges_and_if_match_answer_as_s3_does(s3_server, payload):
    s3_server.create_bucket("semantics")
    s3_server.put("semantics", "blob", payload)
    client = _proxy(s3_server)
    tail = client.get_object(Bucket="semantics", Key="blob", Range="bytes=-100")
    assert tail["ContentRange"] == f"bytes {len(payload) - 100}-{len(payload) - 1}/{len(payload)}"
    assert tail["Body"].read() == payload[-100:]
    status, _, body = _raw(s3_server.endpoint, "GET", "/semantics/blob",
                           {"Range": "bytes=0-1,5-6"})
    assert (status, body) == (200, payload)
    etag = tail["ETag"]
    assert client.get_object(Bucket="semantics", Key="blob", IfMatch=etag,
                             Range="bytes=0-9")["Body"].read() == payload[:10]
    s3_server.put("semantics", "blob", b"changed")
    with pytest.raises(ClientError) as err:
        client.get_object(Bucket="semantics", Key="blob", IfMatch=etag, Range="bytes=0-9")
    assert err.value.response["Error"]["Code"] == "PreconditionFailed"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412


def test_many_concurrent_keep_alive_clients(s3_server, payload):
    from concurrent.futures import ThreadPoolExecutor

    from botocore.config import Config

    s3_server.create_bucket("busy")
    s3_server.put("busy", "blob", payload)
    import boto3

    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1",
                          aws_access_key_id=s3_server.access_key,
                          aws_secret_access_key=s3_server.secret_key,
                          config=Config(max_pool_connections=16))

    def read(i):
        start = (i * 4099) % (len(payload) - 5000)
        body = client.get_object(Bucket="busy", Key="blob",
                                 Range=f"bytes={start}-{start + 4999}")["Body"].read()
        return body == payload[start:start + 5000]

    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(read, range(160)))
    counts = s3_server.counts()
    assert counts["by_status"] == {"206": 160}
    assert counts["bytes"] == 160 * 5000
    assert 1 < counts["max_in_flight"] <= 16 and counts["in_flight"] == 0


def test_rules_can_target_one_path(s3_server):
    s3_server.create_bucket("targeted")
    s3_server.put("targeted", "hit/k", b"h")
    s3_server.put("targeted", "miss/k", b"m")
    s3_server.set_rules(fail_status=500, fail_count=5, path_contains="/hit/")
    assert _raw(s3_server.endpoint, "GET", "/targeted/miss/k")[:3:2] == (200, b"m")
    status, _, body = _raw(s3_server.endpoint, "GET", "/targeted/hit/k")
    assert status == 500
    assert b"<Code>InternalError</Code>" in body
    assert json.loads(_raw(s3_server.endpoint, "GET", "/__proxy/rules")[2])["fail_count"] == 4


def test_cli_prints_its_endpoint_serves_commands_and_stops_at_eof(tmp_path):
    import base64
    import os
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "remote",
                          "s3_server.py")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"tree file")
    proc = subprocess.Popen([sys.executable, script, "--upload", f"{tmp_path}=cli/pre"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert set(info) == {"endpoint", "direct_endpoint", "access_key", "secret_key", "region"}
        assert _raw(info["endpoint"], "GET", "/cli/pre/sub/b.bin")[2] == b"tree file"
        data = base64.b64encode(b"via stdin").decode()
        proc.stdin.write(json.dumps({"op": "put", "bucket": "cli", "key": "k",
                                     "data_b64": data}) + "\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline()) == {"ok": True}
        assert _raw(info["endpoint"], "GET", "/cli/k")[2] == b"via stdin"
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        with pytest.raises(OSError):
            _raw(info["endpoint"], "GET", "/__proxy/health")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_recorded_gets_are_the_ones_sent(s3_server):
    s3_server.create_bucket("recorded")
    s3_server.put("recorded", "k", b"0123456789")
    s3_server.set_rules(record=True)
    _raw(s3_server.endpoint, "GET", "/recorded/k", headers={"Range": "bytes=2-5"})
    _raw(s3_server.endpoint, "GET", "/recorded/k")
    assert s3_server.recorded() == [("/recorded/k", "bytes=2-5"), ("/recorded/k", None)]
    s3_server.reset_proxy()
    assert s3_server.recorded() == []
