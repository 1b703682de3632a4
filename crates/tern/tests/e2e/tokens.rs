//! Public-key tokens (issue 56): an app whose keys come from an identity provider's JWKS
//! (served here by a small HTTP server the test rotates) or from a PEM file, against a real
//! server. Tokens of RS256, PS256, ES256 and EdDSA play; a rotation needs no restart; `alg:
//! none`, an HS256 token made with the public key as its secret (key confusion), a key not in
//! the set, another issuer or audience get 401.

use crate::common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use common::hook::Hook;
use common::{Server, config_file, http_get, http_request_with, whep_offer};
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rcgen::PublicKeyData;
use serde_json::{Value, json};

const ISSUER: &str = "https://idp.test/";
const AUDIENCE: &str = "tern";

/// A signing key of the test's identity provider.
struct Key {
    kid: &'static str,
    alg: Algorithm,
    signer: EncodingKey,
    /// Its public key as a JWK (with `kid` and `alg`).
    jwk: Value,
    /// Its public key as SPKI PEM (what `jwt_public_key` names, and the key-confusion
    /// attacker's HMAC secret).
    public_pem: String,
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

impl Key {
    fn new(kid: &'static str, alg: Algorithm) -> Key {
        let rcgen_alg = match alg {
            Algorithm::RS256 | Algorithm::PS256 => &rcgen::PKCS_RSA_SHA256,
            Algorithm::ES256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            Algorithm::ES384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            Algorithm::EdDSA => &rcgen::PKCS_ED25519,
            other => panic!("no test key for {other:?}"),
        };
        let kp = rcgen::KeyPair::generate_for(rcgen_alg).expect("key pair");
        let private = pem::encode(&pem::Pem::new("PRIVATE KEY", kp.serialize_der()));
        let public_pem = pem::encode(&pem::Pem::new("PUBLIC KEY", kp.subject_public_key_info()));
        let signer = match alg {
            Algorithm::EdDSA => EncodingKey::from_ed_pem(private.as_bytes()),
            Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(private.as_bytes()),
            _ => EncodingKey::from_rsa_pem(private.as_bytes()),
        }
        .expect("signing key");
        let mut jwk = match alg {
            // jsonwebtoken makes no Ed25519 JWK: its `x` is the raw public key.
            Algorithm::EdDSA => {
                json!({"kty": "OKP", "crv": "Ed25519", "x": b64(kp.public_key_raw()), "alg": "EdDSA"})
            }
            _ => {
                let j = Jwk::from_encoding_key(&signer, alg).expect("JWK");
                assert!(!matches!(j.algorithm, AlgorithmParameters::OctetKey(_)));
                serde_json::to_value(j).expect("JWK JSON")
            }
        };
        jwk["kid"] = json!(kid);
        jwk["use"] = json!("sig");
        Key {
            kid,
            alg,
            signer,
            jwk,
            public_pem,
        }
    }

    /// A token for `claims` signed with this key, its header naming the key.
    fn sign(&self, claims: &Value) -> String {
        let mut h = Header::new(self.alg);
        h.kid = Some(self.kid.into());
        jsonwebtoken::encode(&h, claims, &self.signer).expect("sign")
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// The claims of a viewer of `live/demo` from the test's provider.
fn play_claims() -> Value {
    json!({"sub": "live/demo", "act": "play", "exp": now() + 60, "iss": ISSUER, "aud": AUDIENCE})
}

/// `alg: none`: no signature at all.
fn unsigned(kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "none", "typ": "JWT", "kid": kid});
    format!(
        "{}.{}.",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

/// HS256 with `secret` (the attack passes a public key's PEM as the HMAC secret).
fn hs256(kid: Option<&str>, secret: &[u8], claims: &Value) -> String {
    let mut h = Header::new(Algorithm::HS256);
    h.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&h, claims, &EncodingKey::from_secret(secret)).expect("sign")
}

/// A WHEP POST with `token` as its Bearer: the status and body.
fn play(http: SocketAddr, path: &str, token: &str) -> (u16, String) {
    let auth = format!("Bearer {token}");
    let r = http_request_with(
        http,
        "POST",
        path,
        &[("Authorization", &auth)],
        Some("application/sdp"),
        whep_offer().as_bytes(),
    )
    .expect("WHEP POST");
    (r.status, r.text().trim().to_string())
}

fn jwks_of(keys: &[&Key]) -> Value {
    json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()})
}

/// A JWKS server the test changes: every GET answers the set in `set` now.
fn jwks_server(set: Value) -> (Hook, Arc<Mutex<Value>>) {
    let set = Arc::new(Mutex::new(set));
    let s = set.clone();
    let hook = Hook::start(move |_| s.lock().expect("set").clone());
    (hook, set)
}

/// The same over TLS with a self-signed certificate, and that certificate's PEM.
fn jwks_server_tls(set: Value) -> (Hook, Arc<Mutex<Value>>, String) {
    let (tls, pem) = common::hook::self_signed_tls();
    let set = Arc::new(Mutex::new(set));
    let s = set.clone();
    let hook = Hook::start_tls(tls, move |_| s.lock().expect("set").clone());
    (hook, set, pem)
}

fn metric(http: SocketAddr, line: &str) -> bool {
    http_get(http, "/metrics")
        .expect("metrics")
        .text()
        .lines()
        .any(|l| l == line)
}

/// RS256 from the JWKS plays, and ES256 and EdDSA beside it; `alg: none` and HS256 made with
/// the RSA key's public PEM get 401, as do another issuer or audience. The set rotates to a
/// new key (the old one leaves): the new `kid` plays at once (an unknown `kid` fetches the
/// set), the old key's token is refused; made-up `kid`s fetch at most once per 10 s.
#[test]
fn a_jwks_admits_its_keys_and_follows_a_rotation() {
    let _slot = crate::common::slot();
    let k1 = Key::new("k1", Algorithm::RS256);
    let k2 = Key::new("k2", Algorithm::RS256);
    let ec = Key::new("ec", Algorithm::ES256);
    let ed = Key::new("ed", Algorithm::EdDSA);
    let (jwks, set) = jwks_server(jwks_of(&[&k1, &ec, &ed]));
    let cfg = config_file(
        "jwks",
        &format!(
            "[[app]]\nname = \"live\"\njwt_jwks_url = \"{}\"\njwt_issuer = \"{ISSUER}\"\njwt_audience = \"{AUDIENCE}\"\n",
            jwks.url()
        ),
    );
    let server = Server::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);
    let path = "/live/demo/whep";
    let claims = play_claims();
    for key in [&k1, &ec, &ed] {
        let (s, body) = play(server.http, path, &key.sign(&claims));
        assert_eq!(s, 201, "{:?} token: {body}", key.alg);
    }
    let fetches = jwks.seen().len();
    assert!(
        (1..=2).contains(&fetches),
        "fetched at start (and maybe once more for the first token): {fetches}"
    );
    let refused = [
        ("alg: none", unsigned("k1", &claims)),
        (
            "HS256 with the RSA public key as secret",
            hs256(Some("k1"), k1.public_pem.as_bytes(), &claims),
        ),
        (
            "HS256 with the public key, no kid",
            hs256(None, k1.public_pem.as_bytes(), &claims),
        ),
        (
            "another issuer",
            k1.sign(&json!({"sub": "live/demo", "act": "play", "exp": now() + 60, "iss": "https://evil.test/", "aud": AUDIENCE})),
        ),
        (
            "another audience",
            k1.sign(&json!({"sub": "live/demo", "act": "play", "exp": now() + 60, "iss": ISSUER, "aud": "other"})),
        ),
        (
            "no issuer",
            k1.sign(&json!({"sub": "live/demo", "act": "play", "exp": now() + 60, "aud": AUDIENCE})),
        ),
        (
            "expired",
            k1.sign(&json!({"sub": "live/demo", "act": "play", "exp": now() - 5, "iss": ISSUER, "aud": AUDIENCE})),
        ),
    ];
    for (what, token) in &refused {
        let (s, body) = play(server.http, path, token);
        assert_eq!(s, 401, "{what}: {body}");
    }
    // The signature of another key under k1's kid does not verify.
    let mut forged = Header::new(Algorithm::RS256);
    forged.kid = Some("k1".into());
    let forged = jsonwebtoken::encode(&forged, &claims, &k2.signer).expect("sign");
    let (s, body) = play(server.http, path, &forged);
    assert_eq!((s, body.as_str()), (401, "token signature does not verify"));

    // Rotation: k2 in, k1 out.
    *set.lock().expect("set") = jwks_of(&[&k2, &ec, &ed]);
    let rotated = Instant::now();
    let token = k2.sign(&claims);
    loop {
        let (s, body) = play(server.http, path, &token);
        if s == 201 {
            break;
        }
        assert_eq!(s, 401, "{body}");
        assert!(
            rotated.elapsed() < Duration::from_secs(10),
            "the new key's token still refused 10 s after the rotation: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (s, body) = play(server.http, path, &k1.sign(&claims));
    assert_eq!(
        (s, body.as_str()),
        (401, "token key (kid \"k1\") is not in the app's JWKS")
    );
    // Made-up kids: the one fetch for k2 was less than 10 s ago, so none fetches again.
    let fetched = jwks.seen().len();
    for i in 0..5 {
        let mut h = Header::new(Algorithm::RS256);
        h.kid = Some(format!("nope{i}"));
        let t = jsonwebtoken::encode(&h, &claims, &k2.signer).expect("sign");
        assert_eq!(play(server.http, path, &t).0, 401);
    }
    assert_eq!(jwks.seen().len(), fetched, "made-up kids fetched the set");
    assert!(metric(server.http, "tern_jwks_keys{app=\"live\"} 3"));
    assert!(metric(
        server.http,
        "tern_jwks_fetches_total{app=\"live\",result=\"failed\"} 0"
    ));
    server.stop();
}

/// A JWKS on `https://` (its self-signed certificate in `server.ca_file`) that stops
/// answering a set keeps the keys there were (each failed refresh counted), and a refresh
/// every `jwt_jwks_refresh_s` brings a new key in without any token asking.
#[test]
fn a_failed_refresh_keeps_the_keys_and_a_refresh_brings_new_ones() {
    let _slot = crate::common::slot();
    let k1 = Key::new("k1", Algorithm::PS256);
    let k2 = Key::new("k2", Algorithm::ES256);
    let (jwks, set, pem) = jwks_server_tls(jwks_of(&[&k1]));
    assert!(jwks.url().starts_with("https://"));
    let ca = std::env::temp_dir().join(format!("tern-test-{}-jwks-ca.pem", std::process::id()));
    std::fs::write(&ca, pem).expect("write ca");
    let cfg = config_file(
        "jwks-refresh",
        &format!(
            "[server]\nca_file = \"{}\"\n\n[[app]]\nname = \"live\"\njwt_jwks_url = \"{}\"\njwt_jwks_refresh_s = 1\n",
            ca.display(),
            jwks.url()
        ),
    );
    let server = Server::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);
    let path = "/live/demo/whep";
    let claims = json!({"sub": "live/demo", "act": "play", "exp": now() + 60});
    assert_eq!(play(server.http, path, &k1.sign(&claims)).0, 201);
    *set.lock().expect("set") = json!({"not": "a set"});
    let end = Instant::now() + Duration::from_secs(5);
    while !metric(
        server.http,
        "tern_jwks_fetches_total{app=\"live\",result=\"failed\"} 2",
    ) {
        assert!(Instant::now() < end, "no failed refreshes counted");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (s, body) = play(server.http, path, &k1.sign(&claims));
    assert_eq!(s, 201, "the old set is kept: {body}");
    // The new key arrives by the periodic refresh: seen before any token names it.
    *set.lock().expect("set") = jwks_of(&[&k1, &k2]);
    let end = Instant::now() + Duration::from_secs(5);
    while !metric(server.http, "tern_jwks_keys{app=\"live\"} 2") {
        assert!(Instant::now() < end, "the refresh did not bring k2");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(play(server.http, path, &k2.sign(&claims)).0, 201);
    server.stop();
    let _ = std::fs::remove_file(&ca);
}

/// `jwt_public_key`: a PEM file's RSA key takes RS256 and PS256 tokens (no `kid` needed) and
/// refuses `alg: none`, HS256 with that PEM as the secret, and an EC key's token; a file
/// that is not a key stops the start naming the key.
#[test]
fn a_pem_public_key_admits_its_family_and_refuses_key_confusion() {
    let _slot = crate::common::slot();
    let rsa = Key::new("unused", Algorithm::RS256);
    let ec = Key::new("unused", Algorithm::ES256);
    let dir = std::env::temp_dir().join(format!("tern-test-{}-pem-key", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let pem_path = dir.join("jwt.pem");
    std::fs::write(&pem_path, &rsa.public_pem).expect("write key");
    let cfg = config_file(
        "jwt-pem",
        &format!(
            "[[app]]\nname = \"live\"\njwt_public_key = \"{}\"\n",
            pem_path.display()
        ),
    );
    let server = Server::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);
    let path = "/live/demo/whep";
    let claims = json!({"sub": "live/demo", "act": "play", "exp": now() + 60});
    let ps256 =
        jsonwebtoken::encode(&Header::new(Algorithm::PS256), &claims, &rsa.signer).expect("sign");
    let rs256 =
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &rsa.signer).expect("sign");
    for t in [rs256, ps256] {
        let (s, body) = play(server.http, path, &t);
        assert_eq!(s, 201, "{body}");
    }
    for (what, t) in [
        ("alg: none", unsigned("x", &claims)),
        (
            "HS256 with the public PEM as secret",
            hs256(None, rsa.public_pem.as_bytes(), &claims),
        ),
        (
            "ES256",
            jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &ec.signer)
                .expect("sign"),
        ),
    ] {
        let (s, body) = play(server.http, path, &t);
        assert_eq!(s, 401, "{what}: {body}");
    }
    server.stop();

    // Not a key: the start fails naming the key, before anything runs.
    std::fs::write(
        &pem_path,
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
    )
    .expect("write");
    let e = Server::start_error(&cfg);
    assert!(e.starts_with("config key `app[0].jwt_public_key`: "), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
