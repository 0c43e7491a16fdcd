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
    s3_server.set_rules(latency_ms=1, fail_count=3)
    status, _, body = _raw(s3_server.endpoint, "GET", "/__proxy/rules")
    assert json.loads(body) == {"latency_ms": 1, "fail_count": 3}
    assert s3_server.counts()["requests"] == 0
    _raw(s3_server.endpoint, "GET", "/any-bucket/k")
    assert s3_server.counts()["by_status"] == {"503": 1}
    s3_server.reset_proxy()
    assert s3_server.counts() == {"requests": 0, "by_method": {}, "listings": 0, "ranged": 0,
                                  "by_status": {}, "bytes": 0}
    assert json.loads(_raw(s3_server.endpoint, "GET", "/__proxy/rules")[2]) == {}
