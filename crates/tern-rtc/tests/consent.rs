//! ICE consent (RFC 7675): a viewer whose client keeps answering consent (the lean client's
//! binding requests every `CONSENT_INTERVAL`) outlives the consent lifetime many times over;
//! one whose client falls silent ends exactly one consent lifetime (30 s, RFC 7675 §5.1)
//! after the last request it answered, with `ConsentExpired` as the reason, although the
//! client's RTCP still arrives (RTCP is not consent). All on simulated time: the 30 s pass
//! in milliseconds.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{Config, Datagram, LayerPlan, Pair};
use tern_rtc::client::{CONSENT_INTERVAL, ClientState};
use tern_rtc::viewer::{CloseReason, ViewerState, ViewerTimeouts};

const VIDEO: [LayerPlan; 1] = [LayerPlan::new(0, 30, 0)];
/// RFC 7675 §5.1, and the viewer's default.
const CONSENT: Duration = Duration::from_secs(30);

#[test]
fn the_default_consent_lifetime_is_rfc_7675s_30_s() {
    assert_eq!(ViewerTimeouts::default().consent, CONSENT);
}

#[test]
fn with_the_client_answering_consent_the_session_outlives_the_consent_timeout() {
    let mut p = Pair::connected(21);
    let t0 = p.now;
    p.play(30, &VIDEO);
    // Three consent lifetimes and more.
    p.run_for(CONSENT * 3 + Duration::from_secs(5));
    assert_eq!(p.viewer.state(), ViewerState::Connected);
    assert_eq!(p.client.state(), ClientState::Connected);
    assert_eq!(p.closed, None);
    // The client's checks refreshed consent every CONSENT_INTERVAL: never a gap near the
    // lifetime.
    let refreshes: Vec<_> = p
        .answered
        .iter()
        .map(|&(at, _)| at)
        .filter(|&at| at > t0)
        .collect();
    assert!(refreshes.len() >= 19, "{} refreshes", refreshes.len());
    let widest = refreshes.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert!(widest <= CONSENT_INTERVAL, "{widest:?} between refreshes");
    assert!(p.refused.is_empty(), "{:?}", p.refused);
    // Media still flows at the end.
    let before = p.video().packets;
    p.play(30, &VIDEO);
    assert_eq!(p.video().packets, before + 60);
    assert_eq!(p.video().lost(), 0);
    assert!(p.elapsed() > CONSENT * 3);
}

#[test]
fn with_the_client_silent_the_viewer_ends_after_the_consent_timeout() {
    let mut p = Pair::connected(22);
    p.play(30, &VIDEO);
    // From now on the client's binding requests are lost on the way; its RTCP arrives.
    p.to_viewer.drop = Some(Box::new(|d| Datagram::of(d) == Datagram::Stun));
    let (last, _) = *p.answered.last().unwrap();
    let expiry = last + CONSENT;
    let rtcp = p.rtcp_to_viewer;
    let dropped = p.to_viewer.dropped;

    p.run_to(expiry - Duration::from_millis(1));
    assert_eq!(
        p.viewer.state(),
        ViewerState::Connected,
        "1 ms before expiry"
    );
    p.run_for(Duration::from_millis(1));
    assert_eq!(
        p.viewer.state(),
        ViewerState::Closed(CloseReason::ConsentExpired)
    );
    assert_eq!(p.closed, Some((expiry, CloseReason::ConsentExpired)));
    // The client went on checking (every CONSENT_INTERVAL) and sending receiver reports
    // (every second) the whole time: only the checks count.
    assert!(p.to_viewer.dropped - dropped >= 5);
    assert!(p.rtcp_to_viewer - rtcp >= 25, "{}", p.rtcp_to_viewer - rtcp);
    // Nothing more is sent to the client once the viewer has ended.
    let (received, reports) = (p.got.len(), p.sender_reports);
    p.play(30, &VIDEO);
    p.run_for(Duration::from_secs(5));
    assert_eq!((p.got.len(), p.sender_reports), (received, reports));
    assert_eq!(p.viewer.poll_timeout(), None);
}

#[test]
fn a_shorter_consent_lifetime_is_kept_to() {
    let mut p = Pair::new(Config {
        seed: 23,
        timeouts: ViewerTimeouts {
            consent: Duration::from_secs(12),
            ..ViewerTimeouts::default()
        },
        ..Config::default()
    });
    p.connect();
    // The client checks every 5 s: within 12 s, so it stays.
    p.run_for(Duration::from_secs(40));
    assert_eq!(p.viewer.state(), ViewerState::Connected);
    p.to_viewer.drop = Some(Box::new(|d| Datagram::of(d) == Datagram::Stun));
    let (last, _) = *p.answered.last().unwrap();
    assert!(p.run_until(Duration::from_secs(60), |p| p.closed.is_some()));
    assert_eq!(
        p.closed,
        Some((last + Duration::from_secs(12), CloseReason::ConsentExpired))
    );
}

#[test]
fn a_client_that_never_checks_ends_with_connect_timeout_not_consent() {
    let mut p = Pair::new(Config {
        seed: 24,
        ..Config::default()
    });
    p.to_viewer.drop = Some(Box::new(|_| true));
    assert!(p.run_until(Duration::from_secs(60), |p| p.closed.is_some()));
    // Consent only runs once ICE is up; before that, the connect deadline decides.
    assert_eq!(
        p.closed,
        Some((
            p.start + ViewerTimeouts::default().connect,
            CloseReason::ConnectTimeout
        ))
    );
    assert_eq!(
        p.viewer.state(),
        ViewerState::Closed(CloseReason::ConnectTimeout)
    );
}
