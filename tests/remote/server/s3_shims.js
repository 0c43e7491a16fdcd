'use strict';
// Where s3rver answers differently from S3 on reads, the fault proxy answers as S3 does, so a
// client tested against the double behaves the same against S3:
//   - Range: bytes=-N (a suffix) is the last N bytes; s3rver sends bytes 0..N.
//   - A multi-range request is served whole with 200 (S3 ignores it); s3rver says 206.
//   - If-Match on GET/HEAD with a different ETag is 412 PreconditionFailed; s3rver ignores it.
//   - Every answer carries a request id and a host id (x-amz-request-id, x-amz-id-2), as
//     S3's do, repeated in an error's XML; s3rver sends neither.

const crypto = require('crypto');
const http = require('http');

// A fresh pair of S3-style ids: 16 upper-case hex digits, and a base64 host id.
function requestIds() {
  return {
    requestId: crypto.randomBytes(8).toString('hex').toUpperCase(),
    hostId: crypto.randomBytes(36).toString('base64'),
  };
}

// The id headers of an answer.
function idHeaders(ids) {
  return {'x-amz-request-id': ids.requestId, 'x-amz-id-2': ids.hostId};
}

function escapeXml(text) {
  return String(text).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function errorXml(code, message, extra, ids) {
  let fields = '';
  for (const [name, value] of Object.entries(extra)) {
    fields += `<${name}>${escapeXml(value)}</${name}>`;
  }
  return '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>' + code + '</Code><Message>' +
      escapeXml(message) + '</Message>' + fields + '<RequestId>' + ids.requestId +
      '</RequestId><HostId>' + escapeXml(ids.hostId) + '</HostId></Error>';
}

// The Range header to send upstream: {range} (null = drop it), or {error} when S3 would
// refuse it. `headSize` is called only for a suffix range; it resolves to the object's size
// or null when HEAD did not answer 200 (the GET then meets the same error upstream).
async function upstreamRange(range, headSize) {
  if (range === undefined) return {range: undefined};
  const value = range.trim();
  if (value.includes(',')) return {range: null};
  const suffix = /^bytes=-(\d+)$/.exec(value);
  if (!suffix) return {range: value};
  const n = Number(suffix[1]);
  const size = await headSize();
  if (size === null) return {range: undefined};
  if (n === 0 || size === 0) {
    return {
      error: {
        status: 416,
        code: 'InvalidRange',
        message: 'The requested range is not satisfiable',
        extra: {RangeRequested: value, ActualObjectSize: size}
      }
    };
  }
  return {range: `bytes=${Math.max(0, size - n)}-${size - 1}`};
}

// The object's size from a HEAD upstream with the client's headers (Range left out).
function headSize(options, rawHeaders) {
  const headers = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (!/^(range|content-length|transfer-encoding)$/i.test(rawHeaders[i])) {
      headers.push(rawHeaders[i], rawHeaders[i + 1]);
    }
  }
  return new Promise((resolve) => {
    const req = http.request({...options, method: 'HEAD', headers}, (res) => {
      res.resume();
      const length = Number(res.headers['content-length']);
      resolve(res.statusCode === 200 && Number.isFinite(length) ? length : null);
    });
    req.on('error', () => resolve(null));
    req.end();
  });
}

// Replaces (or drops, with null) the Range entry of a raw header list.
function withRange(rawHeaders, range) {
  const out = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i].toLowerCase() !== 'range') out.push(rawHeaders[i], rawHeaders[i + 1]);
  }
  if (range) out.push('Range', range);
  return out;
}

// 412 when If-Match names another ETag than the one upstream answered with.
function preconditionFailed(method, ifMatch, status, etag) {
  if (ifMatch === undefined || (method !== 'GET' && method !== 'HEAD')) return false;
  if (status !== 200 && status !== 206) return false;
  const wanted = ifMatch.split(',').map((t) => t.trim().replace(/^W\//, ''));
  return !wanted.includes('*') && !wanted.includes(etag);
}

module.exports = {
  requestIds,
  idHeaders,
  errorXml,
  upstreamRange,
  headSize,
  withRange,
  preconditionFailed
};
