'use strict';
// Runs s3rver on 127.0.0.1 over a folder and prints one JSON line, {"port": N}, once it
// listens. Exits when stdin reaches EOF (its parent closed the pipe or died) or on SIGTERM,
// so a crashed test never leaves a server behind.
//
//   node start_s3rver.js --directory DIR [--port 0]
//
// Credentials: access key S3RVER, secret S3RVER. s3rver checks that the access key exists
// and that SigV4 requests carry x-amz-content-sha256, but not the signature itself (the
// fault proxy can: see fault_proxy.js --verify-sigv4).

const crypto = require('crypto');

// s3rver seals ListObjectsV2 continuation tokens with single DES, which OpenSSL 3 leaves to
// its legacy provider: without it every truncated listing fails with InternalError. The
// token only has to round-trip through the client, so DES becomes the identity here (the
// token stays opaque base64, as S3's are to clients).
function identityCipher() {
  return {update: (data) => Buffer.from(data), final: () => Buffer.alloc(0)};
}
for (const name of ['createCipheriv', 'createDecipheriv']) {
  const original = crypto[name];
  crypto[name] = (algorithm, ...rest) =>
      algorithm === 'des' ? identityCipher() : original.call(crypto, algorithm, ...rest);
}

const S3rver = require('s3rver');

function parseArgs(argv) {
  const args = {directory: null, port: 0};
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i];
    const value = argv[i + 1];
    if (name === '--directory') args.directory = value;
    else if (name === '--port') args.port = Number(value);
    else throw new Error(`unknown argument ${name}`);
    i++;
  }
  if (!args.directory) throw new Error('--directory DIR is required');
  return args;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const server = new S3rver({
    address: '127.0.0.1',
    port: args.port,
    directory: args.directory,
    silent: true,
    // Buckets come from the path: a client that names 127.0.0.1 or any other host reaches
    // the same bucket, and no Host header is ever taken for a bucket name.
    vhostBuckets: false,
  });
  const address = await server.run();
  const stop = () => {
    server.close().finally(() => process.exit(0));
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdin.on('end', stop);
  process.stdin.on('error', stop);
  process.stdin.resume();
  process.stdout.write(JSON.stringify({port: address.port}) + '\n');
}

main().catch((err) => {
  process.stderr.write(`start_s3rver: ${err.stack || err}\n`);
  process.exit(1);
});
