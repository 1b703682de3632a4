//! Long-term credentials (RFC 8489 §9.2): configured users and coturn-style REST secrets,
//! and the stateless nonces (an expiry plus an HMAC over it and the client's IP).

use std::net::IpAddr;
use std::time::Instant;

use aws_lc_rs::{constant_time, hmac};
use base64::Engine as _;
use tern_proto::stun::{self, Message};

use super::driver::ClientAddr;
use super::reply::Code;
use super::table::{Secs, TurnServer};

/// Credentials a request proved.
pub(super) struct Auth<'m> {
    pub(super) user: &'m [u8],
    pub(super) key: [u8; 16],
}

/// REST credentials in coturn's `use-auth-secret` format: username `expires:user` (or just
/// `expires` when `user` is empty), password `base64(HMAC-SHA1(secret, username))`.
pub fn rest_credentials(secret: &str, user: &str, expires_unix: u64) -> (String, String) {
    let username = if user.is_empty() {
        expires_unix.to_string()
    } else {
        format!("{expires_unix}:{user}")
    };
    let password = rest_password(secret.as_bytes(), username.as_bytes());
    (username, password)
}

fn rest_password(secret: &[u8], username: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret);
    base64::engine::general_purpose::STANDARD.encode(hmac::sign(&key, username).as_ref())
}

impl TurnServer {
    pub(super) fn authenticate<'m>(
        &mut self,
        now: Instant,
        from: ClientAddr,
        m: &Message<'m>,
    ) -> Result<Auth<'m>, Code> {
        if m.attr(stun::MESSAGE_INTEGRITY).is_none() {
            self.stats.unauthorized += 1;
            return Err(Code::Unauthorized);
        }
        let (Some(user), Some(realm), Some(nonce)) =
            (m.username(), m.attr(stun::REALM), m.attr(stun::NONCE))
        else {
            return Err(Code::BadRequest);
        };
        if !self.nonce_valid(now, from, nonce) {
            self.stats.stale_nonces += 1;
            return Err(Code::StaleNonce);
        }
        let key = self.key_for(now, user, realm);
        match key {
            Some(key) if m.check_integrity(&key) => Ok(Auth { user, key }),
            _ => {
                self.stats.unauthorized += 1;
                Err(Code::Unauthorized)
            }
        }
    }

    pub(super) fn key_for(&self, now: Instant, user: &[u8], realm: &[u8]) -> Option<[u8; 16]> {
        if realm != self.cfg.realm.as_bytes() {
            return None;
        }
        if let Some(k) = std::str::from_utf8(user)
            .ok()
            .and_then(|u| self.users.get(u))
        {
            return Some(*k);
        }
        let rest = self.rest.as_ref()?;
        // `expiry[:user]`: expiry in Unix seconds, valid while in the future.
        let text = std::str::from_utf8(user).ok()?;
        let expiry: u64 = text.split(':').next()?.parse().ok()?;
        let unix_now = self.unix_at_epoch + now.saturating_duration_since(self.epoch).as_secs();
        if expiry <= unix_now {
            return None;
        }
        let pwd = base64::engine::general_purpose::STANDARD.encode(hmac::sign(rest, user).as_ref());
        Some(stun::long_term_key(user, realm, pwd.as_bytes()))
    }

    /// A nonce: 8 hex digits of expiry (server seconds) + 16 hex digits of
    /// HMAC-SHA256(nonce key, expiry || client IP), truncated.
    pub(super) fn make_nonce(&self, now: Instant, from: ClientAddr) -> [u8; 24] {
        let expiry = self.secs(now).saturating_add(self.cfg.nonce_lifetime);
        let mut out = [0u8; 24];
        hex_into(&mut out[..8], &expiry.to_be_bytes());
        let tag = self.nonce_tag(expiry, from.addr.ip());
        hex_into(&mut out[8..], &tag);
        out
    }

    pub(super) fn nonce_tag(&self, expiry: Secs, ip: IpAddr) -> [u8; 8] {
        let mut ctx = hmac::Context::with_key(&self.nonce_key);
        ctx.update(&expiry.to_be_bytes());
        match ip.to_canonical() {
            IpAddr::V4(v) => ctx.update(&v.octets()),
            IpAddr::V6(v) => ctx.update(&v.octets()),
        }
        let tag = ctx.sign();
        let mut t = [0u8; 8];
        t.copy_from_slice(&tag.as_ref()[..8]);
        t
    }

    pub(super) fn nonce_valid(&self, now: Instant, from: ClientAddr, nonce: &[u8]) -> bool {
        if nonce.len() != 24 {
            return false;
        }
        let mut e = [0u8; 4];
        if !unhex_into(&mut e, &nonce[..8]) {
            return false;
        }
        let expiry = u32::from_be_bytes(e);
        if expiry <= self.secs(now) {
            return false;
        }
        let mut want = [0u8; 16];
        hex_into(&mut want, &self.nonce_tag(expiry, from.addr.ip()));
        constant_time::verify_slices_are_equal(&want, &nonce[8..]).is_ok()
    }
}

pub(super) fn hex_into(out: &mut [u8], bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (o, b) in out.chunks_exact_mut(2).zip(bytes) {
        o[0] = HEX[usize::from(b >> 4)];
        o[1] = HEX[usize::from(b & 15)];
    }
}

pub(super) fn unhex_into(out: &mut [u8], hex: &[u8]) -> bool {
    let val = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    for (o, p) in out.iter_mut().zip(hex.chunks_exact(2)) {
        match (val(p[0]), val(p[1])) {
            (Some(h), Some(l)) => *o = h << 4 | l,
            _ => return false,
        }
    }
    hex.len() == out.len() * 2
}
