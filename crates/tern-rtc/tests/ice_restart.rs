//! ICE restart (RFC 8445 §9, WHEP's PATCH): new credentials on the viewer
//! ([`Viewer::restart_ice`]), checks with them nominate the path again and refresh consent,
//! media keeps flowing on the same DTLS association and SRTP keys (no DTLS record is sent
//! either way), and checks with the old credentials are refused from then on: they neither
//! answer, nor move the path, nor keep consent.
//!
//! The lean client has no ICE restart: `Client` cannot change its credentials, and its
//! consent checks keep using the ones of the offer/answer. So the client's half of the
//! restart is played by the pair's `IceAgent` (binding requests with the new credentials,
//! with USE-CANDIDATE, every `CONSENT_INTERVAL`, as a restarting browser's agent sends),
//! while the lean `Client` keeps doing everything else: it receives and decrypts the
//! media, NACKs, and sends its receiver reports, and its own checks (old credentials) go on
//! arriving at the viewer, which must ignore them.
//!
//! [`Viewer::restart_ice`]: tern_rtc::viewer::Viewer::restart_ice

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{CLIENT, IceAgent, LayerPlan, Pair, continuous};
use tern_proto::stun;
use tern_rtc::client::{CONSENT_INTERVAL, ClientState};
use tern_rtc::viewer::{CloseReason, ViewerState};

const VIDEO: [LayerPlan; 1] = [LayerPlan::new(0, 30, 0)];
/// The viewer's consent lifetime (default, RFC 7675).
const CONSENT: Duration = Duration::from_secs(30);

/// The new credentials of a restart: the viewer's ufrag and password, and the client's
/// new ufrag.
struct Restart {
    server_ufrag: String,
    server_pwd: String,
    client_ufrag: String,
}

impl Restart {
    fn user(&self) -> String {
        format!("{}:{}", self.server_ufrag, self.client_ufrag)
    }
}

/// Restarts ICE on the viewer as tern-server does on a WHEP PATCH: new local credentials,
/// the client's new ufrag.
fn restart(p: &mut Pair) -> Restart {
    let (uf, pw) = p.mint_credentials();
    let (client_uf, _) = p.mint_credentials();
    let r = Restart {
        server_ufrag: String::from_utf8(uf.to_vec()).unwrap(),
        server_pwd: String::from_utf8(pw.to_vec()).unwrap(),
        client_ufrag: String::from_utf8(client_uf.to_vec()).unwrap(),
    };
    assert_ne!(r.server_ufrag, p.creds.server_ufrag);
    p.viewer
        .restart_ice(uf, pw, r.client_ufrag.clone().into_boxed_str());
    r
}

/// The client's agent checks with the new credentials from `from`.
fn agent(p: &Pair, r: &Restart, from: SocketAddr) -> IceAgent {
    IceAgent::new(
        r.user(),
        r.server_pwd.clone(),
        from,
        CONSENT_INTERVAL,
        p.now,
    )
}

#[test]
fn an_ice_restart_keeps_media_flowing_without_a_new_dtls_handshake() {
    let mut p = Pair::connected(31);
    p.play(30, &VIDEO);
    let dtls = (p.dtls_to_viewer, p.dtls_to_client);
    let keys_at = p.client.times().dtls;
    let profile = p.viewer.srtp_profile();
    let before = p.got_video().len();

    let r = restart(&mut p);
    let restarted_at = p.now;
    p.agent = Some(agent(&p, &r, CLIENT));
    // Past a consent lifetime: only the new credentials can have kept it.
    p.play(40 * 30, &VIDEO);

    // The new checks were answered, signed with the new password.
    let a = p.agent.as_ref().unwrap();
    assert!(a.answered >= 7, "{} answered", a.answered);
    assert_eq!(a.bad, 0);
    // The client's own checks (old credentials) were refused all along.
    let refused: Vec<_> = p
        .refused
        .iter()
        .filter(|(t, _)| *t > restarted_at)
        .collect();
    assert!(refused.len() >= 7, "{} refused", refused.len());
    assert!(
        refused
            .iter()
            .all(|(_, why)| why.contains("USERNAME does not match"))
    );
    // Same DTLS association and keys: no record either way, no handshake state.
    assert_eq!((p.dtls_to_viewer, p.dtls_to_client), dtls);
    assert!(!p.viewer.has_handshake());
    assert_eq!(p.client.times().dtls, keys_at);
    assert_eq!(p.viewer.srtp_profile(), profile);
    assert_eq!(p.viewer.state(), ViewerState::Connected);
    assert_eq!(p.client.state(), ClientState::Connected);
    // Media never stopped: every frame's packets arrived, numbered on, decrypted.
    let got = p.got_video();
    assert_eq!(got.len(), before + 40 * 30 * 2);
    assert!(continuous(&got));
    let v = p.video();
    assert_eq!((v.lost(), v.bad), (0, 0));
    assert_eq!(p.viewer.remote_addr(), Some(CLIENT));
}

#[test]
fn after_an_ice_restart_checks_with_the_old_credentials_are_ignored() {
    let mut p = Pair::connected(32);
    p.play(10, &VIDEO);
    let old_user = p.creds.user();
    let old_pwd = p.creds.server_pwd.clone();
    // Before: the old credentials are the session's.
    assert!(p.check_now(&old_user, &old_pwd, CLIENT).is_ok());

    let r = restart(&mut p);
    let restarted_at = p.now;
    let elsewhere: SocketAddr = "203.0.113.9:5000".parse().unwrap();
    // The old credentials, from the client's address or another: refused, and the path
    // stays where it is.
    for from in [CLIENT, elsewhere] {
        let e = p.check_now(&old_user, &old_pwd, from).unwrap_err();
        assert!(e.contains("USERNAME does not match"), "{e}");
        assert_eq!(p.viewer.remote_addr(), Some(CLIENT));
    }
    // The new USERNAME signed with the old password: refused too.
    let e = p.check_now(&r.user(), &old_pwd, CLIENT).unwrap_err();
    assert!(e.contains("MESSAGE-INTEGRITY"), "{e}");
    // The new credentials: answered, signed with the new password only.
    let resp = p.check_now(&r.user(), &r.server_pwd, CLIENT).unwrap();
    let msg = stun::Message::parse(&resp).unwrap();
    assert_eq!(msg.class(), stun::Class::Success);
    assert!(msg.check_integrity(r.server_pwd.as_bytes()));
    assert!(!msg.check_integrity(old_pwd.as_bytes()));

    // The new agent keeps consent for a while, then stops; the client's old-credential
    // checks alone do not keep it: the viewer ends one consent lifetime after the last
    // check with the new credentials it answered.
    p.agent = Some(agent(&p, &r, CLIENT));
    p.run_for(Duration::from_secs(40));
    assert_eq!(p.viewer.state(), ViewerState::Connected);
    let agent_checks = p.agent.take().unwrap().sent;
    let checks = p.client_checks;
    assert!(p.run_until(Duration::from_secs(60), |p| p.closed.is_some()));
    // Every check answered since the restart was the agent's (the last one perhaps still
    // on its way when it stopped).
    let answered: Vec<_> = p
        .answered
        .iter()
        .filter(|(t, _)| *t > restarted_at)
        .collect();
    assert_eq!(answered.len() as u64, agent_checks);
    let last_new = answered.last().unwrap().0;
    assert_eq!(
        p.closed,
        Some((last_new + CONSENT, CloseReason::ConsentExpired))
    );
    assert!(
        p.client_checks >= checks + 5,
        "the client went on checking with the old credentials"
    );
}

#[test]
fn an_ice_restart_moves_the_media_to_the_address_the_new_checks_nominate() {
    let mut p = Pair::connected(33);
    p.play(30, &VIDEO);
    let dtls = (p.dtls_to_viewer, p.dtls_to_client);
    // The client's network changed: it is reached at another address, and restarts ICE
    // from there.
    let moved: SocketAddr = "198.51.100.7:40001".parse().unwrap();
    let r = restart(&mut p);
    p.client_addr = moved;
    p.agent = Some(agent(&p, &r, moved));
    p.play(90, &VIDEO);

    assert_eq!(p.viewer.remote_addr(), Some(moved));
    assert!(p.agent.as_ref().unwrap().answered >= 1);
    assert_eq!((p.dtls_to_viewer, p.dtls_to_client), dtls);
    // What was sent to the old address while the new checks were on their way was
    // NACKed from the new one and resent there: the client lost nothing.
    let got = p.got_video();
    let after: Vec<_> = got
        .iter()
        .filter(|g| g.at > p.now - Duration::from_secs(2))
        .collect();
    assert!(after.len() >= 100);
    let v = p.video();
    assert_eq!((v.lost(), v.bad), (0, 0));
    assert_eq!(v.packets, 120 * 2);
    // The frame published at the restart went to the old address: its two packets.
    assert_eq!(p.misdirected, 2);
    assert_eq!(v.recovered, 2);
    assert!(p.nacked.iter().all(|n| n.resent));
}
