'use strict';
// A fault-injecting HTTP proxy in front of an S3-API server, for gpufeed's remote tests and
// benchmarks. Every request is forwarded unchanged (method, raw path and query, headers in
// their order and case, Host included, since clients sign Host with SigV4) except the
// hop-by-hop headers; bodies stream both ways. Prints one JSON line, {"port": N}, once it
// listens; exits when stdin reaches EOF or on SIGTERM.
//
//   node fault_proxy.js --upstream 127.0.0.1:PORT [--port 0]
//                       [--verify-sigv4 ACCESS_KEY:SECRET_KEY ...] [--region us-east-1]
//
// With --verify-sigv4, signed requests (Authorization header or presigned URL) are checked as
// S3 checks them (sigv4.js) and refused with 403 SignatureDoesNotMatch, whose XML carries the
// CanonicalRequest and StringToSign the proxy computed; unsigned requests pass (s3rver
// serves them anonymously, as a public bucket would).
//
// Where s3rver departs from S3, the proxy answers as S3 does: a suffix range (bytes=-N) is
// the last N bytes (s3rver would send the first N+1), a multi-range request gets the whole
// object with 200, and If-Match (GET/HEAD) with another ETag gets 412 PreconditionFailed.
// Every answer, forwarded or made here, carries x-amz-request-id and x-amz-id-2 (fresh ids
// per request, in an error's XML too), as S3's answers do.
//
// Control API on the same port, never forwarded:
//   POST /__proxy/rules   JSON body; replaces the rules (all fields optional):
//     latency_ms         delay before each request is answered or forwarded
//     fail_status        status of injected failures (default 503)
//     fail_count         how many of the next matching requests fail
//     fail_methods       methods that match (default: all)
//     retry_after        Retry-After header value sent with injected failures
//     reset_after_bytes  body bytes let through before a GET response is cut
//     reset_count        how many of the next GET responses with a longer body are cut
//     stall_after_bytes  body bytes let through before a GET response stops, its
//                        connection left open (a client's read timeout must fire)
//     stall_count        how many of the next GET responses with a longer body stall
//     short_after_bytes  body bytes let through before a GET response ends cleanly, its
//                        Content-Length dropped (the body is sent chunked and its last
//                        chunk comes early): a short body that no transport error reveals
//     short_count        how many of the next GET responses with a longer body end short
//     path_contains      only requests whose path contains this string match fail/reset/stall
//     record             true: keep the path and Range of every GET from now on (at most
//                        1,000,000), for a benchmark to replay them
//   An unknown field is refused (400), so a misspelt rule never passes as no fault.
//   GET  /__proxy/rules   the rules now in force (counts left included)
//   GET  /__proxy/counts  {"requests", "by_method", "listings", "ranged", "by_status", "bytes",
//                          "in_flight", "max_in_flight", "in_flight_seconds" (requests in
//                          flight integrated over time: over a wall time, the mean
//                          concurrency), "connections" (client connections accepted)}
//   GET  /__proxy/recorded  [[path, range or null], ...] of the GETs recorded
//   GET  /__proxy/answers  [{"method", "path", "status", "request_id", "host_id"}, ...] of the
//                          last 1,000 answers, oldest first: what a client's error must quote
//   POST /__proxy/reset   zeroes the counts and clears the rules, the record and the answers
//   GET  /__proxy/health  200 "ok"

const http = require('http');

const shims = require('./s3_shims');
const sigv4 = require('./sigv4');

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
  'expect',
]);
// Query parameters of a ListObjects(V2) call; any other one on a bucket GET names a
// subresource (?location, ?versioning, ...) that is not a listing.
const LIST_PARAMS = new Set([
  'list-type',
  'prefix',
  'delimiter',
  'max-keys',
  'continuation-token',
  'start-after',
  'marker',
  'encoding-type',
  'fetch-owner',
  'x-id',
]);
const RULE_FIELDS = new Set([
  'latency_ms', 'fail_status', 'fail_count', 'fail_methods', 'retry_after', 'reset_after_bytes',
  'reset_count', 'stall_after_bytes', 'stall_count', 'short_after_bytes', 'short_count',
  'path_contains', 'record',
]);
const ERROR_CODES = {
  400: ['BadRequest', 'Bad request.'],
  403: ['AccessDenied', 'Access Denied'],
  404: ['NoSuchKey', 'The specified key does not exist.'],
  408: [
    'RequestTimeout',
    'Your socket connection to the server was not read from or written to within the ' +
        'timeout period.'
  ],
  429: ['SlowDown', 'Please reduce your request rate.'],
  500: ['InternalError', 'We encountered an internal error. Please try again.'],
  502: ['BadGateway', 'Bad gateway.'],
  503: ['SlowDown', 'Please reduce your request rate.'],
  504: ['GatewayTimeout', 'Gateway timeout.'],
};

function parseArgs(argv) {
  const args = {upstream: null, port: 0, secrets: new Map(), region: 'us-east-1'};
  for (let i = 0; i < argv.length; i += 2) {
    const [name, value] = [argv[i], argv[i + 1]];
    if (name === '--upstream')
      args.upstream = value;
    else if (name === '--port')
      args.port = Number(value);
    else if (name === '--region')
      args.region = value;
    else if (name === '--verify-sigv4' && /^[^:]+:.+$/.test(value)) {
      const colon = value.indexOf(':');
      args.secrets.set(value.slice(0, colon), value.slice(colon + 1));
    } else
      throw new Error(`unknown argument ${name} ${value}`);
  }
  if (!args.upstream || !/^[^:]+:\d+$/.test(args.upstream)) {
    throw new Error('--upstream HOST:PORT is required');
  }
  const [host, port] = args.upstream.split(':');
  args.upstreamHost = host;
  args.upstreamPort = Number(port);
  return args;
}

function freshCounts() {
  const fresh = {requests: 0, by_method: {}, listings: 0, ranged: 0, by_status: {}, bytes: 0,
                 in_flight: 0, max_in_flight: 0, in_flight_seconds: 0, connections: 0};
  // When in_flight_seconds was last brought up to date: not enumerable, so not in the JSON.
  Object.defineProperty(fresh, 'since', {value: Date.now(), writable: true});
  return fresh;
}

// Adds the time since the last change times the requests then in flight to in_flight_seconds
// (their integral over time: over a wall time, the mean concurrency), then applies `delta`.
function changeInFlight(tally, delta) {
  const now = Date.now();
  tally.in_flight_seconds += tally.in_flight * (now - tally.since) / 1000;
  tally.since = now;
  tally.in_flight += delta;
}

let rules = {};
let counts = freshCounts();
let recorded = [];
const kMaxRecorded = 1000000;
let answers = [];
const kMaxAnswers = 1000;

function bump(map, key) {
  map[key] = (map[key] || 0) + 1;
}

function isListing(method, url) {
  if (method !== 'GET') return false;
  const query = url.searchParams;
  if (query.get('list-type') === '2') return true;
  const segments = url.pathname.split('/').filter((s) => s.length > 0);
  if (segments.length !== 1) return false;
  for (const name of query.keys()) {
    if (!LIST_PARAMS.has(name)) return false;
  }
  return true;
}

function matchesPath(url) {
  return !rules.path_contains || url.pathname.includes(rules.path_contains);
}

function takeFailure(method, url) {
  if (!(rules.fail_count > 0) || !matchesPath(url)) return false;
  if (Array.isArray(rules.fail_methods) && !rules.fail_methods.includes(method)) return false;
  rules.fail_count--;
  return true;
}

function sendJson(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(
      status, {'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body)});
  res.end(body);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

async function control(req, res, url) {
  const route = `${req.method} ${url.pathname}`;
  const body = await readBody(req);
  if (route === 'POST /__proxy/rules') {
    let parsed;
    try {
      parsed = body.trim() === '' ? {} : JSON.parse(body);
    } catch (err) {
      return sendJson(res, 400, {error: `rules are not JSON: ${err.message}`});
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      return sendJson(res, 400, {error: 'rules must be a JSON object'});
    }
    const unknown = Object.keys(parsed).filter((k) => !RULE_FIELDS.has(k));
    if (unknown.length > 0) {
      return sendJson(res, 400, {error: `unknown rule fields: ${unknown.join(', ')}`});
    }
    rules = parsed;
    return sendJson(res, 200, rules);
  }
  if (route === 'GET /__proxy/rules') return sendJson(res, 200, rules);
  if (route === 'GET /__proxy/counts') {
    changeInFlight(counts, 0);  // brings in_flight_seconds up to now
    return sendJson(res, 200, counts);
  }
  if (route === 'GET /__proxy/recorded') return sendJson(res, 200, recorded);
  if (route === 'GET /__proxy/answers') return sendJson(res, 200, answers);
  if (route === 'POST /__proxy/reset') {
    rules = {};
    counts = freshCounts();
    recorded = [];
    answers = [];
    return sendJson(res, 200, {});
  }
  if (route === 'GET /__proxy/health') {
    res.writeHead(200, {'Content-Type': 'text/plain', 'Content-Length': 2});
    return res.end('ok');
  }
  return sendJson(res, 404, {error: `no control route ${route}`});
}

// The headers of `raw` (name, value, name, value, ...) less the hop-by-hop ones and `drop`.
function forwardHeaders(raw, drop = null) {
  const out = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    if (!HOP_BY_HOP.has(name) && name !== drop) out.push(raw[i], raw[i + 1]);
  }
  return out;
}

// An S3 error response. The request body (a PUT's) is drained so the connection stays
// usable for keep-alive.
function sendError(req, res, status, code, message, extra = {}, headers = {}) {
  bump(counts.by_status, String(status));
  const body = shims.errorXml(code, message, extra, req.s3Ids);
  req.resume();
  res.writeHead(status, {
    'Content-Type': 'application/xml',
    'Content-Length': Buffer.byteLength(body),
    ...shims.idHeaders(req.s3Ids),
    ...headers
  });
  res.end(req.method === 'HEAD' ? undefined : body);
}

function injectFailure(req, res, url) {
  const status = Number(rules.fail_status) || 503;
  const [code, message] = ERROR_CODES[status] || ['InternalError', 'Injected failure.'];
  const headers = rules.retry_after === undefined ? {} : {'Retry-After': String(rules.retry_after)};
  sendError(req, res, status, code, message, {Resource: url.pathname}, headers);
}

// Streams the upstream response to the client with backpressure, counting body bytes. With
// a `fault` ({kind, after}) it stops after `after` bytes: the client socket is destroyed
// (reset), left open with nothing more to come (stall), or the body ends cleanly (short).
function relayBody(upRes, res, fault) {
  let sent = 0;
  upRes.on('data', (chunk) => {
    if (fault !== null && sent + chunk.length >= fault.after) {
      const part = chunk.subarray(0, fault.after - sent);
      counts.bytes += part.length;
      sent += part.length;
      upRes.destroy();
      if (fault.kind === 'short') return res.end(part);
      res.write(part, () => fault.kind === 'stall' || (res.socket && res.socket.destroy()));
      return;
    }
    sent += chunk.length;
    counts.bytes += chunk.length;
    if (!res.write(chunk)) upRes.pause();
  });
  res.on('drain', () => upRes.resume());
  upRes.on('end', () => res.end());
  upRes.on('error', () => res.destroy());
}

// The body fault (reset before stall before short) this response takes, or null.
function bodyFault(req, url, upRes) {
  if (req.method !== 'GET' || !matchesPath(url)) return null;
  if (upRes.statusCode !== 200 && upRes.statusCode !== 206) return null;
  const length = upRes.headers['content-length'];
  for (const kind of ['reset', 'stall', 'short']) {
    if (!(rules[`${kind}_count`] > 0)) continue;
    const after = Math.max(0, Number(rules[`${kind}_after_bytes`]) || 0);
    // A body no longer than the limit would pass whole; it does not use up a fault.
    if (length !== undefined && Number(length) <= after) continue;
    rules[`${kind}_count`]--;
    return {kind, after};
  }
  return null;
}

function onUpstreamResponse(req, res, url, upRes) {
  if (shims.preconditionFailed(
          req.method, req.headers['if-match'], upRes.statusCode, upRes.headers['etag'])) {
    upRes.destroy();
    return sendError(
        req, res, 412, 'PreconditionFailed',
        'At least one of the pre-conditions you specified did not hold', {Condition: 'If-Match'});
  }
  bump(counts.by_status, String(upRes.statusCode));
  const fault = bodyFault(req, url, upRes);
  // Ids the upstream sent itself are kept.
  req.s3Ids = {
    requestId: upRes.headers['x-amz-request-id'] || req.s3Ids.requestId,
    hostId: upRes.headers['x-amz-id-2'] || req.s3Ids.hostId,
  };
  // A short body goes chunked, so that its early end is a clean one.
  const drop = fault !== null && fault.kind === 'short' ? 'content-length' : null;
  const headers = forwardHeaders(upRes.rawHeaders, drop);
  for (const [name, value] of Object.entries(shims.idHeaders(req.s3Ids))) {
    if (upRes.headers[name] === undefined) headers.push(name, value);
  }
  res.writeHead(upRes.statusCode, upRes.statusMessage, headers);
  relayBody(upRes, res, fault);
}

async function forward(args, agent, req, res, url) {
  const target = {agent, host: args.upstreamHost, port: args.upstreamPort, path: req.url};
  let headers = forwardHeaders(req.rawHeaders);
  if (req.method === 'GET' || req.method === 'HEAD') {
    const range =
        await shims.upstreamRange(req.headers['range'], () => shims.headSize(target, headers));
    if (range.error) {
      const e = range.error;
      return sendError(req, res, e.status, e.code, e.message, e.extra);
    }
    if (range.range !== undefined) headers = shims.withRange(headers, range.range);
  }
  const upReq = http.request({...target, method: req.method, headers});
  upReq.on('response', (upRes) => onUpstreamResponse(req, res, url, upRes));
  upReq.on('error', (err) => {
    if (res.headersSent) return res.destroy();
    sendError(req, res, 502, 'BadGateway', `upstream: ${err.message}`, {Resource: url.pathname});
  });
  // A client that goes away mid-transfer takes the upstream exchange with it.
  res.on('close', () => {
    if (!res.writableFinished) upReq.destroy();
  });
  req.pipe(upReq);
}

function handle(args, agent, req, res) {
  const url = new URL(req.url, 'http://proxy.invalid');
  if (url.pathname.startsWith('/__proxy/')) {
    control(req, res, url).catch((err) => sendJson(res, 500, {error: String(err)}));
    return;
  }
  counts.requests++;
  req.s3Ids = shims.requestIds();
  res.once('finish', () => {
    if (answers.length === kMaxAnswers) answers.shift();
    answers.push({
      method: req.method,
      path: url.pathname,
      status: res.statusCode,
      request_id: req.s3Ids.requestId,
      host_id: req.s3Ids.hostId,
    });
  });
  // Requests between their arrival and the end of their answer: the client's concurrency.
  const tally = counts;
  changeInFlight(tally, 1);
  tally.max_in_flight = Math.max(tally.max_in_flight, tally.in_flight);
  res.once('close', () => changeInFlight(tally, -1));
  bump(counts.by_method, req.method);
  if (isListing(req.method, url)) counts.listings++;
  if (req.headers['range'] !== undefined) counts.ranged++;
  if (rules.record && req.method === 'GET' && recorded.length < kMaxRecorded) {
    recorded.push([url.pathname, req.headers['range'] === undefined ? null : req.headers['range']]);
  }
  const go = () => {
    if (args.secrets.size > 0) {
      const q = req.url.indexOf('?');
      const bad = sigv4.verify(
          req, url, q < 0 ? req.url : req.url.slice(0, q), q < 0 ? '' : req.url.slice(q + 1),
          args.secrets, args.region);
      if (bad) return sendError(req, res, bad.status, bad.code, bad.message, bad.extra);
    }
    if (takeFailure(req.method, url)) return injectFailure(req, res, url);
    forward(args, agent, req, res, url).catch((err) => {
      if (res.headersSent) return res.destroy();
      sendError(req, res, 500, 'InternalError', `proxy: ${err.message}`);
    });
  };
  const latency = Number(rules.latency_ms) || 0;
  if (latency > 0)
    setTimeout(go, latency);
  else
    go();
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const agent = new http.Agent({keepAlive: true, maxSockets: Infinity, maxFreeSockets: 256});
  const server = http.createServer(
      {keepAliveTimeout: 60000, requestTimeout: 0, headersTimeout: 60000},
      (req, res) => handle(args, agent, req, res));
  server.maxHeadersCount = 0;
  server.on('connection', () => { counts.connections += 1; });
  server.listen(args.port, '127.0.0.1', () => {
    process.stdout.write(JSON.stringify({port: server.address().port}) + '\n');
  });
  const stop = () => {
    server.close();
    server.closeAllConnections();
    agent.destroy();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdin.on('end', stop);
  process.stdin.on('error', stop);
  process.stdin.resume();
}

try {
  main();
} catch (err) {
  process.stderr.write(`fault_proxy: ${err.stack || err}\n`);
  process.exit(1);
}
