//! Signed tokens: an app's keys (an HS256 secret, a public key from a PEM file, or an identity
//! provider's JWKS) and the check of one token against them.
//!
//! Which algorithm a token may use is decided by the key, never by the token: a secret takes
//! HS256 alone; an RSA key RS256/384/512 and PS256/384/512; an EC key the ES algorithm of its
//! curve (P-256: ES256, P-384: ES384); an Ed25519 key EdDSA; a JWK's own `alg`, when it has
//! one, narrows that to it. So `alg: none` (no such algorithm here) and an HMAC token made
//! with a public key as its secret (the key-confusion attack) are both refused. A JWKS never
//! gives an HMAC key (`kty: oct`): a published set is public.
//!
//! The JWKS ([`Jwks`]) is fetched when the server starts, every `jwt_jwks_refresh_s`, and at
//! once when a token names a `kid` the set lacks, at most every [`UNKNOWN_KID_EVERY`]; a fetch
//! that fails (unreachable, not a set, no usable key) keeps the set there was and is logged
//! and counted (`tern_jwks_fetches_total{result="failed"}`). All of it runs on the HTTP
//! runtime, where admission runs; the media threads never wait for it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use crate::metrics::{Expose, Exposition, Kind};
use crate::outbound::HttpsClient;

/// A token naming a `kid` the set lacks fetches the set again at once, but no more often
/// than this: a stream of made-up `kid`s costs the provider one request per 10 s per app.
pub const UNKNOWN_KID_EVERY: Duration = Duration::from_secs(10);
/// Time allowed for one JWKS fetch (connect, TLS, answer).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest JWKS read: a provider's set is a few kB (Auth0's two RSA keys: 3 kB).
const MAX_JWKS: usize = 256 * 1024;

const RSA_ALGS: [Algorithm; 6] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
];

/// The claims tern reads from a token.
#[derive(Debug, Serialize, Deserialize)]
pub struct Claims {
    /// `app/stream`.
    pub sub: String,
    /// `publish` or `play`.
    pub act: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
}

/// What a token must say: `sub` = `app/stream`, `act` = the action.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    /// The app.
    pub app: &'a str,
    /// The stream.
    pub stream: &'a str,
    /// `publish` or `play`.
    pub act: &'a str,
}

/// A refused token: the HTTP status (401: none, bad or unknown; 403: valid but for another
/// stream or action) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// 401 or 403.
    pub status: u16,
    /// Why, for the client.
    pub reason: String,
}

/// A public key and the algorithms a token signed with it may name (one family).
#[derive(Clone)]
pub struct PublicKey {
    key: DecodingKey,
    algs: Vec<Algorithm>,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicKey")
            .field("algs", &self.algs)
            .finish_non_exhaustive()
    }
}

impl PublicKey {
    /// The key of a PEM text: `PUBLIC KEY` (SPKI), `RSA PUBLIC KEY` (PKCS#1) or
    /// `CERTIFICATE`, of an RSA, EC (P-256, P-384) or Ed25519 key.
    pub fn from_pem(pem: &[u8]) -> Result<PublicKey, String> {
        if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
            return Ok(PublicKey {
                key,
                algs: RSA_ALGS.to_vec(),
            });
        }
        if let Ok(key) = DecodingKey::from_ec_pem(pem) {
            // The curve is not told by the decoder: a token of the other curve's algorithm
            // fails its signature check.
            return Ok(PublicKey {
                key,
                algs: vec![Algorithm::ES256, Algorithm::ES384],
            });
        }
        if let Ok(key) = DecodingKey::from_ed_pem(pem) {
            return Ok(PublicKey {
                key,
                algs: vec![Algorithm::EdDSA],
            });
        }
        Err(
            "not a PEM public key or certificate of an RSA, EC (P-256, P-384) or Ed25519 key"
                .into(),
        )
    }

    /// The key of one JWK, `None` when it is not a signing key tern can use: an encryption
    /// key (`use: enc`), an HMAC key (`kty: oct`), another curve, or an `alg` that is not
    /// one of the key's.
    pub fn from_jwk(jwk: &Jwk) -> Option<PublicKey> {
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            return None;
        }
        let family: Vec<Algorithm> = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => RSA_ALGS.to_vec(),
            AlgorithmParameters::EllipticCurve(p) => match p.curve {
                EllipticCurve::P256 => vec![Algorithm::ES256],
                EllipticCurve::P384 => vec![Algorithm::ES384],
                _ => return None,
            },
            AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
                vec![Algorithm::EdDSA]
            }
            _ => return None,
        };
        let algs = match jwk.common.key_algorithm {
            None => family,
            Some(a) => {
                let a = a.to_string().parse::<Algorithm>().ok()?;
                if !family.contains(&a) {
                    return None;
                }
                vec![a]
            }
        };
        let key = DecodingKey::from_jwk(jwk).ok()?;
        Some(PublicKey { key, algs })
    }
}

/// Where an app's token keys come from (`jwt_secret`, `jwt_public_key`, `jwt_jwks_url`).
pub enum Keys {
    /// An HS256 secret.
    Secret(DecodingKey),
    /// One public key.
    Public(PublicKey),
    /// An identity provider's set.
    Jwks(Arc<Jwks>),
}

/// One app's token check.
pub struct Jwt {
    /// Its keys.
    pub keys: Keys,
    /// End the session at the token's `exp`.
    pub end_at_exp: bool,
    /// The `iss` required, if any.
    pub issuer: Option<String>,
    /// The `aud` required, if any.
    pub audience: Option<String>,
}

fn deny(status: u16, reason: impl Into<String>) -> Refused {
    Refused {
        status,
        reason: reason.into(),
    }
}

impl Jwt {
    /// Checks `token` for `want`: Ok(time left until its `exp`). Fetches the JWKS first when
    /// the token names a key the set lacks (see [`Jwks::key`]).
    pub async fn check(
        &self,
        token: Option<&str>,
        want: Wanted<'_>,
        client: &HttpsClient,
    ) -> Result<Duration, Refused> {
        let Some(token) = token else {
            return Err(deny(401, "a signed token (JWT) is required"));
        };
        let hs256 = [Algorithm::HS256];
        let held;
        let (key, algs): (&DecodingKey, &[Algorithm]) = match &self.keys {
            Keys::Secret(k) => (k, &hs256),
            Keys::Public(p) => (&p.key, &p.algs),
            Keys::Jwks(j) => {
                held = j.key(token, client).await?;
                (&held.key, &held.algs)
            }
        };
        self.verify(token, key, algs, want)
    }

    /// The signature, `exp`, `iss` and `aud` (when required), then `sub` and `act`.
    fn verify(
        &self,
        token: &str,
        key: &DecodingKey,
        algs: &[Algorithm],
        want: Wanted<'_>,
    ) -> Result<Duration, Refused> {
        let mut v = jsonwebtoken::Validation::new(algs[0]);
        v.algorithms = algs.to_vec();
        v.leeway = 0;
        let mut required = vec!["exp", "sub"];
        if let Some(iss) = &self.issuer {
            v.set_issuer(&[iss]);
            required.push("iss");
        }
        match &self.audience {
            Some(aud) => {
                v.set_audience(&[aud]);
                required.push("aud");
            }
            // An identity provider's tokens carry an `aud` (Auth0 always): without
            // `jwt_audience` it is not looked at.
            None => v.validate_aud = false,
        }
        v.set_required_spec_claims(&required);
        let data = jsonwebtoken::decode::<Claims>(token, key, &v).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            match e.kind() {
                K::ExpiredSignature => deny(401, "token expired"),
                K::InvalidSignature => deny(401, "token signature does not verify"),
                K::InvalidAlgorithm => deny(
                    401,
                    format!(
                        "token algorithm not accepted: this app takes {}",
                        names(algs)
                    ),
                ),
                K::InvalidIssuer => deny(401, "token issuer (iss) is not the one required"),
                K::InvalidAudience => deny(401, "token audience (aud) is not the one required"),
                K::MissingRequiredClaim(c) => deny(401, format!("token has no `{c}` claim")),
                _ => deny(401, format!("token not valid: {e}")),
            }
        })?;
        let c = data.claims;
        let sub = format!("{}/{}", want.app, want.stream);
        if c.sub != sub {
            return Err(deny(
                403,
                format!("token is for stream {}, not {sub}", c.sub),
            ));
        }
        if c.act != want.act {
            return Err(deny(
                403,
                format!("token allows {}, not {}", c.act, want.act),
            ));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Duration::from_secs(c.exp.saturating_sub(now)))
    }
}

fn names(algs: &[Algorithm]) -> String {
    algs.iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A fetched key set: by `kid`, and the keys without one.
#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Arc<PublicKey>>,
    unnamed: Vec<Arc<PublicKey>>,
}

impl KeySet {
    fn len(&self) -> usize {
        self.by_kid.len() + self.unnamed.len()
    }

    /// The key for a token naming `kid`; a token naming none takes the set's only key.
    fn find(&self, kid: Option<&str>) -> Option<Arc<PublicKey>> {
        match kid {
            Some(k) => self.by_kid.get(k).cloned(),
            None if self.len() == 1 => self.by_kid.values().chain(&self.unnamed).next().cloned(),
            None => None,
        }
    }
}

/// The usable keys of a JWKS document, or why there are none. A key tern cannot use (another
/// type, curve or purpose) is skipped, not an error: providers publish encryption keys too.
fn parse_set(bytes: &[u8]) -> Result<(KeySet, usize), String> {
    #[derive(Deserialize)]
    struct Doc {
        keys: Vec<serde_json::Value>,
    }
    let doc: Doc =
        serde_json::from_slice(bytes).map_err(|e| format!("not a JWKS (`keys` list): {e}"))?;
    let mut set = KeySet::default();
    let mut skipped = 0;
    for v in doc.keys {
        let Some((jwk, key)) = serde_json::from_value::<Jwk>(v)
            .ok()
            .and_then(|j| PublicKey::from_jwk(&j).map(|k| (j, k)))
        else {
            skipped += 1;
            continue;
        };
        match jwk.common.key_id {
            Some(kid) => {
                set.by_kid.insert(kid, Arc::new(key));
            }
            None => set.unnamed.push(Arc::new(key)),
        }
    }
    if set.len() == 0 {
        return Err(format!("no usable signing key ({skipped} skipped)"));
    }
    Ok((set, skipped))
}

/// One app's JWKS: the set last fetched, and its fetches.
pub struct Jwks {
    app: String,
    uri: hyper::Uri,
    /// `jwt_jwks_refresh_s`.
    pub refresh: Duration,
    set: RwLock<Arc<KeySet>>,
    /// Held while a fetch runs: one at a time per app.
    fetching: tokio::sync::Mutex<()>,
    /// Fetches finished (either way): a caller that waited for the lock sees whether one
    /// ran meanwhile.
    done: AtomicU64,
    /// When a token's unknown `kid` last fetched.
    last_unknown: Mutex<Option<Instant>>,
    fetched: AtomicU64,
    failed: AtomicU64,
}

impl Jwks {
    /// The JWKS of app `app` at `url` (checked by the config), not fetched yet.
    pub fn new(app: &str, url: &str, refresh: Duration) -> Option<Jwks> {
        Some(Jwks {
            app: app.to_string(),
            uri: url.parse().ok()?,
            refresh,
            set: RwLock::new(Arc::new(KeySet::default())),
            fetching: tokio::sync::Mutex::new(()),
            done: AtomicU64::new(0),
            last_unknown: Mutex::new(None),
            fetched: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        })
    }

    fn current(&self) -> Arc<KeySet> {
        self.set
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// The key `token` names. Not in the set: the set is fetched again (unless a fetch for an
    /// unknown `kid` ran less than [`UNKNOWN_KID_EVERY`] ago) and looked in once more.
    /// Before the first fetch has finished, a token waits for it.
    async fn key(&self, token: &str, client: &HttpsClient) -> Result<Arc<PublicKey>, Refused> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| deny(401, format!("token not valid: {e}")))?;
        let kid = header.kid.as_deref();
        let set = self.current();
        if let Some(k) = set.find(kid) {
            return Ok(k);
        }
        // A token naming no key can match a set of one key only: fetching cannot help it,
        // unless there is no set yet.
        if (kid.is_some() || set.len() == 0)
            && self.fetch_for_unknown(client).await
            && let Some(k) = self.current().find(kid)
        {
            return Ok(k);
        }
        Err(deny(
            401,
            match kid {
                Some(k) => format!("token key (kid {k:?}) is not in the app's JWKS"),
                None => "token names no key (kid) and the app's JWKS has not exactly one".into(),
            },
        ))
    }

    /// A token named a key the set lacks: fetches now if allowed, or waits for a fetch under
    /// way. Whether the set may have changed. The first fetch of all (a token that came
    /// before the start's fetch got going) does not count against [`UNKNOWN_KID_EVERY`].
    async fn fetch_for_unknown(&self, client: &HttpsClient) -> bool {
        let before = self.done.load(Ordering::Acquire);
        let _one = self.fetching.lock().await;
        if self.done.load(Ordering::Acquire) != before {
            return true;
        }
        if before > 0 {
            let Ok(mut last) = self.last_unknown.lock() else {
                return false;
            };
            if last.is_some_and(|t| t.elapsed() < UNKNOWN_KID_EVERY) {
                return false;
            }
            *last = Some(Instant::now());
        }
        self.fetch_locked(client).await;
        true
    }

    /// Fetches the set (after any fetch under way).
    pub async fn fetch(&self, client: &HttpsClient) {
        let _one = self.fetching.lock().await;
        self.fetch_locked(client).await;
    }

    /// Fetches the set, the caller holding `fetching`: a good one replaces the set, a bad
    /// one is logged and counted and the set kept.
    async fn fetch_locked(&self, client: &HttpsClient) {
        let got = tokio::time::timeout(FETCH_TIMEOUT, get(client, &self.uri))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {FETCH_TIMEOUT:?}")))
            .and_then(|b| parse_set(&b));
        match got {
            Ok((set, skipped)) => {
                self.fetched.fetch_add(1, Ordering::Relaxed);
                let mut kids: Vec<&str> = set.by_kid.keys().map(String::as_str).collect();
                kids.sort_unstable();
                let old = self.current();
                let changed =
                    old.len() != set.len() || kids.iter().any(|k| !old.by_kid.contains_key(*k));
                if changed {
                    info!(app = %self.app, url = %self.uri, ?kids, unnamed = set.unnamed.len(), skipped, "JWKS: key set loaded");
                } else {
                    debug!(app = %self.app, "JWKS: key set unchanged");
                }
                if let Ok(mut s) = self.set.write() {
                    *s = Arc::new(set);
                }
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                warn!(app = %self.app, url = %self.uri, "JWKS fetch failed, keeping the {} key(s) there were: {e}", self.current().len());
            }
        }
        self.done.fetch_add(1, Ordering::Release);
    }

    /// Fetches now, then every `refresh`, for as long as the runtime runs.
    pub async fn refresh_forever(this: std::sync::Weak<Self>, client: HttpsClient) {
        // Until a reload drops the set (no gate holds it).
        while let Some(j) = this.upgrade() {
            j.fetch(&client).await;
            let every = j.refresh;
            drop(j);
            tokio::time::sleep(every).await;
        }
    }

    /// Whether this is the set of app `app` at `url`, fetched every `refresh`.
    pub fn is(&self, app: &str, url: &str, refresh: Duration) -> bool {
        self.app == app && self.uri == url && self.refresh == refresh
    }

    /// Keys in the set now.
    pub fn keys(&self) -> usize {
        self.current().len()
    }
}

/// GETs `uri`: the body of a 200 answer.
async fn get(client: &HttpsClient, uri: &hyper::Uri) -> Result<Bytes, String> {
    let mut req = hyper::Request::new(Full::new(Bytes::new()));
    *req.uri_mut() = uri.clone();
    req.headers_mut().insert(
        hyper::header::ACCEPT,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    let r = client
        .request(req)
        .await
        .map_err(|e| format!("unreachable: {}", crate::outbound::error_chain(&e)))?;
    if r.status() != hyper::StatusCode::OK {
        return Err(format!("answered {}", r.status()));
    }
    Limited::new(r.into_body(), MAX_JWKS)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| format!("reading the answer: {e}"))
}

/// The JWKS counters of every app, for `/metrics`.
pub struct JwksMetrics(pub Box<dyn Fn() -> Vec<Arc<Jwks>> + Send + Sync>);

impl Expose for JwksMetrics {
    /// `tern_jwks_fetches_total{app,result}` and `tern_jwks_keys{app}`.
    fn write_metrics(&self, o: &mut Exposition) {
        let mut f = o.family(
            "tern_jwks_fetches_total",
            "JWKS fetches by app and result (a failed one keeps the keys there were).",
            Kind::Counter,
        );
        let sets = (self.0)();
        for j in &sets {
            for (result, n) in [("ok", &j.fetched), ("failed", &j.failed)] {
                f.sample(
                    &[("app", &j.app.as_str()), ("result", &result)],
                    n.load(Ordering::Relaxed),
                );
            }
        }
        let mut f = o.family(
            "tern_jwks_keys",
            "Usable signing keys in the app's JWKS as last fetched.",
            Kind::Gauge,
        );
        for j in &sets {
            f.sample(&[("app", &j.app.as_str())], j.keys() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token for `live/STREAM` and action `act`.
    struct Ask {
        token: Option<String>,
        stream: &'static str,
        act: &'static str,
    }

    fn ask(token: Option<String>, stream: &'static str, act: &'static str) -> Ask {
        Ask { token, stream, act }
    }

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs()
    }

    fn token(
        header: jsonwebtoken::Header,
        key: &jsonwebtoken::EncodingKey,
        extra: serde_json::Value,
    ) -> String {
        let mut claims = serde_json::json!({"sub": "live/cam", "act": "play", "exp": now() + 60});
        if let (Some(c), Some(e)) = (claims.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        jsonwebtoken::encode(&header, &claims, key).expect("encode")
    }

    fn hs(secret: &str, extra: serde_json::Value) -> String {
        token(
            jsonwebtoken::Header::new(Algorithm::HS256),
            &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
            extra,
        )
    }

    fn status(r: Result<Duration, Refused>) -> (u16, String) {
        match r {
            Err(Refused { status, reason }) => (status, reason),
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    fn secret_jwt(secret: &str) -> Jwt {
        Jwt {
            keys: Keys::Secret(DecodingKey::from_secret(secret.as_bytes())),
            end_at_exp: true,
            issuer: None,
            audience: None,
        }
    }

    fn check(jwt: &Jwt, ask: &Ask) -> Result<Duration, Refused> {
        let (key, algs): (&DecodingKey, &[Algorithm]) = match &jwt.keys {
            Keys::Secret(k) => (k, &[Algorithm::HS256]),
            Keys::Public(p) => (&p.key, &p.algs),
            Keys::Jwks(_) => unreachable!("not here"),
        };
        let Some(t) = ask.token.as_deref() else {
            return Err(deny(401, "a signed token (JWT) is required"));
        };
        let want = Wanted {
            app: "live",
            stream: ask.stream,
            act: ask.act,
        };
        jwt.verify(t, key, algs, want)
    }

    #[test]
    fn signature_expiry_stream_and_action() {
        let jwt = secret_jwt("s3cret");
        let good = hs("s3cret", serde_json::json!({}));
        let left = check(&jwt, &ask(Some(good.clone()), "cam", "play")).expect("valid");
        assert!(left <= Duration::from_secs(60) && left >= Duration::from_secs(58));
        let (s, r) = status(check(&jwt, &ask(None, "cam", "play")));
        assert_eq!((s, r.as_str()), (401, "a signed token (JWT) is required"));
        let (s, r) = status(check(&jwt, &ask(Some(good.clone()), "desk", "play")));
        assert_eq!(s, 403);
        assert!(r.contains("live/cam"), "{r}");
        let (s, r) = status(check(&jwt, &ask(Some(good), "cam", "publish")));
        assert_eq!(s, 403);
        assert!(r.contains("allows play"), "{r}");
        let old = hs("s3cret", serde_json::json!({"exp": now() - 10}));
        let (s, r) = status(check(&jwt, &ask(Some(old), "cam", "play")));
        assert_eq!((s, r.as_str()), (401, "token expired"));
        let forged = hs("other", serde_json::json!({}));
        let (s, r) = status(check(&jwt, &ask(Some(forged), "cam", "play")));
        assert_eq!((s, r.as_str()), (401, "token signature does not verify"));
        let (s, _) = status(check(&jwt, &ask(Some("not.a.jwt".into()), "cam", "play")));
        assert_eq!(s, 401);
        // An `aud` is not looked at unless one is required.
        let aud = hs("s3cret", serde_json::json!({"aud": "someone"}));
        assert!(check(&jwt, &ask(Some(aud), "cam", "play")).is_ok());
    }

    #[test]
    fn issuer_and_audience_when_required() {
        let jwt = Jwt {
            issuer: Some("https://idp.example/".into()),
            audience: Some("tern".into()),
            ..secret_jwt("s3cret")
        };
        let a = |extra| ask(Some(hs("s3cret", extra)), "cam", "play");
        let ok = serde_json::json!({"iss": "https://idp.example/", "aud": "tern"});
        assert!(check(&jwt, &a(ok)).is_ok());
        let both = serde_json::json!({"iss": "https://idp.example/", "aud": ["x", "tern"]});
        assert!(check(&jwt, &a(both)).is_ok());
        for (extra, reason) in [
            (
                serde_json::json!({"aud": "tern"}),
                "token has no `iss` claim",
            ),
            (
                serde_json::json!({"iss": "https://idp.example/"}),
                "token has no `aud` claim",
            ),
            (
                serde_json::json!({"iss": "https://evil.example/", "aud": "tern"}),
                "token issuer (iss) is not the one required",
            ),
            (
                serde_json::json!({"iss": "https://idp.example/", "aud": "other"}),
                "token audience (aud) is not the one required",
            ),
        ] {
            let (s, r) = status(check(&jwt, &a(extra)));
            assert_eq!((s, r.as_str()), (401, reason));
        }
    }

    /// An Ed25519 key pair: (PKCS#8 private PEM, SPKI public PEM, raw public key).
    fn ed25519() -> (String, String, Vec<u8>) {
        use rcgen::PublicKeyData;
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("ed25519");
        let private = pem::encode(&pem::Pem::new("PRIVATE KEY", kp.serialize_der()));
        let public = pem::encode(&pem::Pem::new("PUBLIC KEY", kp.subject_public_key_info()));
        (private, public, kp.public_key_raw().to_vec())
    }

    #[test]
    fn public_keys_from_pem_take_their_family_only() {
        let (private, public, _) = ed25519();
        let key = PublicKey::from_pem(public.as_bytes()).expect("an Ed25519 key");
        assert_eq!(key.algs, [Algorithm::EdDSA]);
        let jwt = Jwt {
            keys: Keys::Public(key),
            end_at_exp: false,
            issuer: None,
            audience: None,
        };
        let signer =
            jsonwebtoken::EncodingKey::from_ed_pem(private.as_bytes()).expect("private key");
        let good = token(
            jsonwebtoken::Header::new(Algorithm::EdDSA),
            &signer,
            serde_json::json!({}),
        );
        assert!(check(&jwt, &ask(Some(good), "cam", "play")).is_ok());
        // HS256 with the public key's PEM as the secret: refused for its algorithm.
        let confused = hs(&public, serde_json::json!({}));
        let (s, r) = status(check(&jwt, &ask(Some(confused), "cam", "play")));
        assert_eq!(s, 401);
        assert!(r.contains("algorithm not accepted"), "{r}");
        // `alg: none`: no signature, refused.
        let none = format!(
            "{}.{}.",
            b64(br#"{"alg":"none","typ":"JWT"}"#),
            b64(format!(r#"{{"sub":"live/cam","act":"play","exp":{}}}"#, now() + 60).as_bytes())
        );
        let (s, _) = status(check(&jwt, &ask(Some(none), "cam", "play")));
        assert_eq!(s, 401);
        assert!(
            PublicKey::from_pem(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
                .is_err()
        );
        assert!(PublicKey::from_pem(b"not pem").is_err());
    }

    /// Every algorithm of each key type verifies with the key's PEM; another family's
    /// algorithm and HS256 with the PEM as secret are refused.
    #[test]
    fn every_public_key_algorithm() {
        use rcgen::PublicKeyData;
        let cases: [(&rcgen::SignatureAlgorithm, &[Algorithm]); 3] = [
            (
                &rcgen::PKCS_RSA_SHA256,
                &[
                    Algorithm::RS256,
                    Algorithm::RS384,
                    Algorithm::RS512,
                    Algorithm::PS256,
                    Algorithm::PS384,
                    Algorithm::PS512,
                ],
            ),
            (&rcgen::PKCS_ECDSA_P256_SHA256, &[Algorithm::ES256]),
            (&rcgen::PKCS_ECDSA_P384_SHA384, &[Algorithm::ES384]),
        ];
        for (kind, algs) in cases {
            let kp = rcgen::KeyPair::generate_for(kind).expect("key pair");
            let private = pem::encode(&pem::Pem::new("PRIVATE KEY", kp.serialize_der()));
            let public = pem::encode(&pem::Pem::new("PUBLIC KEY", kp.subject_public_key_info()));
            let signer = if algs[0] == Algorithm::RS256 {
                jsonwebtoken::EncodingKey::from_rsa_pem(private.as_bytes())
            } else {
                jsonwebtoken::EncodingKey::from_ec_pem(private.as_bytes())
            }
            .expect("signing key");
            let jwt = Jwt {
                keys: Keys::Public(PublicKey::from_pem(public.as_bytes()).expect("public key")),
                end_at_exp: false,
                issuer: None,
                audience: None,
            };
            for alg in algs {
                let t = token(
                    jsonwebtoken::Header::new(*alg),
                    &signer,
                    serde_json::json!({}),
                );
                assert!(check(&jwt, &ask(Some(t), "cam", "play")).is_ok(), "{alg:?}");
            }
            let confused = hs(&public, serde_json::json!({}));
            assert_eq!(
                status(check(&jwt, &ask(Some(confused), "cam", "play"))).0,
                401
            );
        }
        // ES384 against a P-256 key: the other curve's algorithm does not verify.
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).expect("P-384");
        let p384 = jsonwebtoken::EncodingKey::from_ec_pem(
            pem::encode(&pem::Pem::new("PRIVATE KEY", kp.serialize_der())).as_bytes(),
        )
        .expect("signing key");
        let p256 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("P-256");
        let jwt = Jwt {
            keys: Keys::Public(
                PublicKey::from_pem(
                    pem::encode(&pem::Pem::new("PUBLIC KEY", p256.subject_public_key_info()))
                        .as_bytes(),
                )
                .expect("public key"),
            ),
            end_at_exp: false,
            issuer: None,
            audience: None,
        };
        let t = token(
            jsonwebtoken::Header::new(Algorithm::ES384),
            &p384,
            serde_json::json!({}),
        );
        assert_eq!(status(check(&jwt, &ask(Some(t), "cam", "play"))).0, 401);
    }

    fn b64(b: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    }

    #[test]
    fn a_jwks_gives_signing_keys_only() {
        let (_, _, raw) = ed25519();
        let x = b64(&raw);
        let doc = serde_json::json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "ed"},
            {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "enc", "use": "enc"},
            {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "wrong-alg", "alg": "RS256"},
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac", "alg": "HS256"},
            {"kty": "EC", "crv": "P-521", "x": x, "y": x, "kid": "p521"},
            {"kty": "weird", "kid": "w"},
            {"kty": "OKP", "crv": "Ed25519", "x": x},
        ]});
        let (set, skipped) = parse_set(doc.to_string().as_bytes()).expect("a set");
        assert_eq!(skipped, 5);
        assert_eq!(set.by_kid.keys().collect::<Vec<_>>(), ["ed"]);
        assert_eq!(set.unnamed.len(), 1);
        assert!(set.find(Some("ed")).is_some());
        assert!(set.find(Some("hmac")).is_none());
        // Two keys: a token without `kid` matches none.
        assert!(set.find(None).is_none());
        assert!(parse_set(br#"{"keys": []}"#).is_err());
        assert!(parse_set(br#"{"kids": []}"#).is_err());
        assert!(parse_set(b"\xff").is_err());
    }
}
