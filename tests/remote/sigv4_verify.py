"""Checks the SigV4 signature of one HTTP request head, computed independently of libcurl
from AWS's Signature Version 4 description (S3 flavour: the path is signed as sent, the
payload hash is the x-amz-content-sha256 header).

    sigv4_verify.py HEAD_FILE SECRET   prints "ok" or "mismatch <details>"
"""
import hashlib
import hmac
import sys
from urllib.parse import urlsplit


def main():
    head = open(sys.argv[1], "rb").read().decode("latin-1")
    secret = sys.argv[2]
    lines = head.split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = " ".join(value.split())
    auth = headers["authorization"]
    algorithm, rest = auth.split(" ", 1)
    fields = dict(part.strip().split("=", 1) for part in rest.split(","))
    key_id, date, region, service, _ = fields["Credential"].split("/")
    signed = fields["SignedHeaders"].split(";")
    url = urlsplit(target)
    query = "&".join(sorted(url.query.split("&"))) if url.query else ""
    canonical = "\n".join(
        [method, url.path, query] + [f"{n}:{headers[n]}" for n in signed] +
        ["", ";".join(signed), headers["x-amz-content-sha256"]])
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join([algorithm, headers["x-amz-date"], scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    want = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if want == fields["Signature"]:
        print("ok", key_id, ";".join(signed))
    else:
        print("mismatch", fields["Signature"], want, repr(canonical))


if __name__ == "__main__":
    main()
