// A self-signed certificate for the tests that need TLS (HTTPS, TURN over TLS): Chromium
// trusts it through --ignore-certificate-errors-spki-list=SPKI, no CA involved.

import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

/** A self-signed P-256 certificate for 127.0.0.1 and the base64 SHA-256 of its public key. */
export function makeCertificate(dir) {
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=127.0.0.1',
    '-addext', 'subjectAltName=IP:127.0.0.1',
  ], { stdio: 'ignore' });
  const spki = execFileSync('sh', ['-c',
    `openssl x509 -in ${cert} -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64`,
  ]).toString().trim();
  return { cert, key, spki };
}

