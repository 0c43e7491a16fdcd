'use strict';
// A fault-injecting HTTP proxy in front of an S3-API server, for gpufeed's remote tests and
// benchmarks. Every request is forwarded unchanged (method, raw path and query, headers in
// their order and case, Host included, since clients sign Host with SigV4) except the
// hop-by-hop headers; bodies stream both ways. Prints one JSON line, {"port": N}, once it
// listens; exits when stdin reaches EOF or on SIGTERM.
//
//   node fault_proxy.js --upstream 127.0.0.1:PORT [--port 0]
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
//     path_contains      only requests whose path contains this string match fail/reset
//   GET  /__proxy/rules   the rules now in force (counts left included)
//   GET  /__proxy/counts  {"requests", "by_method", "listings", "ranged", "by_status", "bytes"}
//   POST /__proxy/reset   zeroes the counts and clears the rules
//   GET  /__proxy/health  200 "ok"

const http = require('http');

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate',
  'proxy-authorization', 'te', 'trailer', 'upgrade', 'expect',
]);
// Query parameters of a ListObjects(V2) call; any other one on a bucket GET names a
// subresource (?location, ?versioning, ...) that is not a listing.
const LIST_PARAMS = new Set([
  'list-type', 'prefix', 'delimiter', 'max-keys', 'continuation-token', 'start-after',
  'marker', 'encoding-type', 'fetch-owner', 'x-id',
]);
const ERROR_CODES = {
  400: ['BadRequest', 'Bad request.'],
  403: ['AccessDenied', 'Access Denied'],
  404: ['NoSuchKey', 'The specified key does not exist.'],
  408: ['RequestTimeout', 'Your socket connection to the server was not read from or written to within the timeout period.'],
  429: ['SlowDown', 'Please reduce your request rate.'],
  500: ['InternalError', 'We encountered an internal error. Please try again.'],
  502: ['BadGateway', 'Bad gateway.'],
  503: ['SlowDown', 'Please reduce your request rate.'],
  504: ['GatewayTimeout', 'Gateway timeout.'],
};

function parseArgs(argv) {
  const args = {upstream: null, port: 0};
  for (let i = 0; i < argv.length; i += 2) {
    const [name, value] = [argv[i], argv[i + 1]];
    if (name === '--upstream') args.upstream = value;
    else if (name === '--port') args.port = Number(value);
    else throw new Error(`unknown argument ${name}`);
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
  return {requests: 0, by_method: {}, listings: 0, ranged: 0, by_status: {}, bytes: 0};
}

let rules = {};
let counts = freshCounts();

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

function xmlError(status, resource) {
  const [code, message] = ERROR_CODES[status] || ['InternalError', 'Injected failure.'];
  const escaped = resource.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  return '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>' + code + '</Code><Message>' +
      message + '</Message><Resource>' + escaped +
      '</Resource><RequestId>0000000000000000</RequestId></Error>';
}

function sendJson(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, {'Content-Type': 'application/json', 'Content-Length':
      Buffer.byteLength(body)});
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
    rules = parsed;
    return sendJson(res, 200, rules);
  }
  if (route === 'GET /__proxy/rules') return sendJson(res, 200, rules);
  if (route === 'GET /__proxy/counts') return sendJson(res, 200, counts);
  if (route === 'POST /__proxy/reset') {
    rules = {};
    counts = freshCounts();
    return sendJson(res, 200, {});
  }
  if (route === 'GET /__proxy/health') {
    res.writeHead(200, {'Content-Type': 'text/plain', 'Content-Length': 2});
    return res.end('ok');
  }
  return sendJson(res, 404, {error: `no control route ${route}`});
}

function forwardHeaders(raw) {
  const out = [];
  for (let i = 0; i < raw.length; i += 2) {
    if (!HOP_BY_HOP.has(raw[i].toLowerCase())) out.push(raw[i], raw[i + 1]);
  }
  return out;
}

function fail(req, res, url, status) {
  bump(counts.by_status, String(status));
  const body = xmlError(status, url.pathname);
  const headers = {'Content-Type': 'application/xml', 'Content-Length': Buffer.byteLength(body)};
  if (rules.retry_after !== undefined) headers['Retry-After'] = String(rules.retry_after);
  // The request body (a PUT's) is drained so the connection stays usable for keep-alive.
  req.resume();
  res.writeHead(status, headers);
  res.end(req.method === 'HEAD' ? undefined : body);
}

// Streams the upstream response to the client with backpressure, counting body bytes, and
// cuts it (destroys the client socket) after `cutAfter` bytes when that is not null.
function relayBody(upRes, res, cutAfter) {
  let sent = 0;
  upRes.on('data', (chunk) => {
    if (cutAfter !== null && sent + chunk.length >= cutAfter) {
      const part = chunk.subarray(0, cutAfter - sent);
      counts.bytes += part.length;
      sent += part.length;
      upRes.destroy();
      res.write(part, () => res.socket && res.socket.destroy());
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

function shouldCut(req, url, upRes) {
  if (req.method !== 'GET' || !(rules.reset_count > 0) || !matchesPath(url)) return null;
  if (upRes.statusCode !== 200 && upRes.statusCode !== 206) return null;
  const limit = Math.max(0, Number(rules.reset_after_bytes) || 0);
  const length = upRes.headers['content-length'];
  // A body no longer than the limit would pass whole; it does not use up a reset.
  if (length !== undefined && Number(length) <= limit) return null;
  rules.reset_count--;
  return limit;
}

function forward(args, agent, req, res, url) {
  const upReq = http.request({
    agent, host: args.upstreamHost, port: args.upstreamPort, method: req.method,
    path: req.url, headers: forwardHeaders(req.rawHeaders),
  });
  upReq.on('response', (upRes) => {
    bump(counts.by_status, String(upRes.statusCode));
    const cutAfter = shouldCut(req, url, upRes);
    res.writeHead(upRes.statusCode, upRes.statusMessage, forwardHeaders(upRes.rawHeaders));
    relayBody(upRes, res, cutAfter);
  });
  upReq.on('error', (err) => {
    if (res.headersSent) return res.destroy();
    bump(counts.by_status, '502');
    const body = xmlError(502, `${url.pathname}: ${err.message}`);
    res.writeHead(502, {'Content-Type': 'application/xml', 'Content-Length':
        Buffer.byteLength(body)});
    res.end(body);
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
  bump(counts.by_method, req.method);
  if (isListing(req.method, url)) counts.listings++;
  if (req.headers['range'] !== undefined) counts.ranged++;
  const go = () => {
    if (takeFailure(req.method, url)) return fail(req, res, url, rules.fail_status || 503);
    forward(args, agent, req, res, url);
  };
  const latency = Number(rules.latency_ms) || 0;
  if (latency > 0) setTimeout(go, latency);
  else go();
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const agent = new http.Agent({keepAlive: true, maxSockets: Infinity, maxFreeSockets: 256});
  const server = http.createServer({keepAliveTimeout: 60000, requestTimeout: 0,
    headersTimeout: 60000}, (req, res) => handle(args, agent, req, res));
  server.maxHeadersCount = 0;
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
