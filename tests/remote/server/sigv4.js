'use strict';
// Checks AWS Signature Version 4 on S3 requests the way S3 does, for the fault proxy:
// s3rver only looks up the access key, so without this a client that signs wrongly would
// pass every test and fail against S3. Covers the Authorization header form and presigned
// URLs (X-Amz-* query parameters). The payload hash is taken from x-amz-content-sha256 as
// sent (UNSIGNED-PAYLOAD or hex); the body itself is not hashed.

const crypto = require('crypto');

const MAX_SKEW_MS = 15 * 60 * 1000;

// RFC 3986 percent-encoding, as SigV4 wants it: everything but A-Z a-z 0-9 - _ . ~ encoded.
function encode(text, keepSlash) {
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    const c = String.fromCharCode(byte);
    if (/[A-Za-z0-9\-_.~]/.test(c) || (keepSlash && c === '/'))
      out += c;
    else
      out += '%' + byte.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

function decode(text) {
  try {
    return decodeURIComponent(text);
  } catch (err) {
    return text;
  }
}

// S3 decodes the path and encodes it again (no double encoding, '/' kept), so a client must
// sign the canonical form of the key it sent.
function canonicalUri(rawPath) {
  return encode(decode(rawPath), true) || '/';
}

function canonicalQuery(rawQuery, skip) {
  if (!rawQuery) return '';
  const pairs = [];
  for (const part of rawQuery.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const name = decode((eq < 0 ? part : part.slice(0, eq)).replace(/\+/g, ' '));
    const value = eq < 0 ? '' : decode(part.slice(eq + 1).replace(/\+/g, ' '));
    if (name === skip) continue;
    pairs.push([encode(name, false), encode(value, false)]);
  }
  pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1]));
  return pairs.map(([n, v]) => `${n}=${v}`).join('&');
}

function headerValues(rawHeaders) {
  const values = new Map();
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i].toLowerCase();
    const value = rawHeaders[i + 1].trim().replace(/\s+/g, ' ');
    values.set(name, values.has(name) ? `${values.get(name)},${value}` : value);
  }
  return values;
}

function hmac(key, data) {
  return crypto.createHmac('sha256', key).update(data, 'utf8').digest();
}

function parseAmzDate(text) {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(text || '');
  if (!m) return null;
  return Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]);
}

function failure(status, code, message, extra = {}) {
  return {status, code, message, extra};
}

// The signature's parts, from the Authorization header or a presigned URL's query.
function signatureParts(req, url, headers) {
  const auth = headers.get('authorization');
  if (auth !== undefined) {
    const m =
        new RegExp('^AWS4-HMAC-SHA256\\s+Credential=([^,\\s]+)\\s*,\\s*SignedHeaders=([^,\\s]+)' +
                   '\\s*,\\s*Signature=([0-9a-f]+)\\s*$')
            .exec(auth);
    if (!m)
      return failure(400, 'AuthorizationHeaderMalformed', 'The authorization header is malformed.');
    return {
      credential: m[1],
      signedHeaders: m[2],
      signature: m[3],
      amzDate: headers.get('x-amz-date'),
      payloadHash: headers.get('x-amz-content-sha256'),
      presigned: false
    };
  }
  const q = url.searchParams;
  if (q.get('X-Amz-Algorithm') !== 'AWS4-HMAC-SHA256') {
    return failure(
        400, 'AuthorizationQueryParametersError',
        'X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"');
  }
  const expires = Number(q.get('X-Amz-Expires'));
  const start = parseAmzDate(q.get('X-Amz-Date'));
  if (start !== null && Number.isFinite(expires) && Date.now() > start + expires * 1000) {
    return failure(403, 'AccessDenied', 'Request has expired');
  }
  return {
    credential: q.get('X-Amz-Credential') || '',
    signedHeaders: q.get('X-Amz-SignedHeaders') || '',
    signature: q.get('X-Amz-Signature') || '',
    amzDate: q.get('X-Amz-Date'),
    payloadHash: 'UNSIGNED-PAYLOAD',
    presigned: true
  };
}

// What S3 checks before the signature: a known key, the scope, the date and the headers.
function checkCredential(parts, secrets, region) {
  const [accessKey, date, scopeRegion, service, terminator] = parts.credential.split('/');
  if (!secrets.has(accessKey)) {
    return failure(403, 'InvalidAccessKeyId',
                   'The AWS Access Key Id you provided does not exist in our records.',
                   {AWSAccessKeyId: accessKey});
  }
  if (service !== 's3' || terminator !== 'aws4_request' || scopeRegion !== region) {
    return failure(400, 'AuthorizationHeaderMalformed',
                   `The authorization header is malformed; the credential scope ` +
                       `'${parts.credential}' is wrong; expecting region '${region}'`);
  }
  const when = parseAmzDate(parts.amzDate);
  if (when === null || parts.amzDate.slice(0, 8) !== date) {
    return failure(403, 'AccessDenied',
                   'AWS authentication requires a valid x-amz-date matching the scope date');
  }
  if (!parts.presigned && Math.abs(Date.now() - when) > MAX_SKEW_MS) {
    return failure(403, 'RequestTimeTooSkewed',
                   'The difference between the request time and the current time is too large.');
  }
  if (!parts.signedHeaders.split(';').includes('host')) {
    return failure(403, 'AccessDenied', 'Host must be a signed header');
  }
  if (!parts.presigned && parts.payloadHash === undefined) {
    return failure(400, 'InvalidRequest',
                   'Missing required header for this request: x-amz-content-sha256');
  }
  return null;
}

// Returns null when the request carries no SigV4 signature (anonymous) or a good one, else
// {status, code, message, extra} for an S3 error response.
function verify(req, url, rawPath, rawQuery, secrets, region) {
  const headers = headerValues(req.rawHeaders);
  const presigned = url.searchParams.has('X-Amz-Signature');
  const auth = headers.get('authorization');
  if (auth === undefined && !presigned) return null;
  if (auth !== undefined && !auth.startsWith('AWS4-HMAC-SHA256')) return null;  // left to s3rver
  const parts = signatureParts(req, url, headers);
  if (parts.status) return parts;
  const bad = checkCredential(parts, secrets, region);
  if (bad) return bad;
  const [accessKey, date, scopeRegion] = parts.credential.split('/');
  const signed = parts.signedHeaders.split(';');
  const canonicalRequest = [
    req.method,
    canonicalUri(rawPath),
    canonicalQuery(rawQuery, parts.presigned ? 'X-Amz-Signature' : null),
    signed.map((h) => `${h}:${headers.get(h) ?? ''}\n`).join(''),
    parts.signedHeaders,
    parts.payloadHash,
  ].join('\n');
  const stringToSign = [
    'AWS4-HMAC-SHA256',
    parts.amzDate,
    `${date}/${scopeRegion}/s3/aws4_request`,
    crypto.createHash('sha256').update(canonicalRequest, 'utf8').digest('hex'),
  ].join('\n');
  let key = hmac('AWS4' + secrets.get(accessKey), date);
  for (const part of [scopeRegion, 's3', 'aws4_request']) key = hmac(key, part);
  if (hmac(key, stringToSign).toString('hex') !== parts.signature) {
    return failure(403, 'SignatureDoesNotMatch',
                   'The request signature we calculated does not match the signature you ' +
                       'provided. Check your key and signing method.',
                   {AWSAccessKeyId: accessKey, StringToSign: stringToSign,
                    CanonicalRequest: canonicalRequest});
  }
  return null;
}

module.exports = {verify, canonicalUri, canonicalQuery};
