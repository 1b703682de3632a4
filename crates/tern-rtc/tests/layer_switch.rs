//! Simulcast layer switches: with two layers in the stream's rings (each with its own
//! sequence space and keyframes), a viewer moved to the other layer, pinned (the API,
//! `?layer=`) or by the layer policy (`Switch::To`, `Switch::Drop`), goes on with the
//! layer it sends until a keyframe of the new one and switches there; the client sees one
//! SSRC whose sequence numbers run on without a gap or a repeat across the switch, and RTP
//! timestamps that keep moving forward. A packet of the old layer lost just before the
//! switch is still resent from the old layer's ring.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{Config, Got, LayerPlan, Pair, continuous};
use tern_proto::codec::MediaKind;
use tern_rtc::viewer::adapt::Switch;

/// Two packets a frame (LayerPlan::new).
const PACKETS: u64 = 2;

/// Where the video received switches from one layer to the next: the index of the first
/// packet of each run of one layer.
fn runs(got: &[Got]) -> Vec<(usize, u8)> {
    let mut out: Vec<(usize, u8)> = Vec::new();
    for (i, g) in got.iter().enumerate() {
        if out.last().is_none_or(|&(_, l)| l != g.layer) {
            out.push((i, g.layer));
        }
    }
    out
}

/// The same checks for every switch: one SSRC, numbering without a gap or a repeat,
/// timestamps moving on, nothing lost, and each run of a layer starting on a keyframe.
fn assert_seamless(p: &Pair) {
    let got = p.got_video();
    let ssrc = got[0].ssrc;
    assert!(got.iter().all(|g| g.ssrc == ssrc), "one SSRC");
    assert_eq!(p.video().ssrc, ssrc);
    assert!(continuous(&got), "sequence numbers run on");
    assert!(
        got.windows(2).all(|w| w[1].rtp_ts >= w[0].rtp_ts),
        "timestamps never go back"
    );
    for (i, _) in runs(&got) {
        assert!(
            got[i].keyframe,
            "a layer's run starts at a keyframe: {:?}",
            got[i]
        );
        if i > 0 {
            assert!(
                got[i].rtp_ts > got[i - 1].rtp_ts,
                "a new picture at the switch"
            );
        }
    }
    let v = p.video();
    assert_eq!((v.lost(), v.duplicates, v.reordered), (0, 0, 0));
}

#[test]
fn a_pinned_viewer_switches_at_the_new_layers_keyframe_with_continuous_numbering() {
    // Layer 0's keyframes at frames 0, 30, 60; layer 1's at 15, 45.
    let layers = [LayerPlan::new(0, 30, 0), LayerPlan::new(1, 30, 15)];
    let mut p = Pair::connected(41);
    p.play(20, &layers);
    assert_eq!(p.viewer.video_layer(), Some(0));
    assert!(p.got_video().iter().all(|g| g.layer == 0));

    // Pinned to layer 1 at frame 20: layer 0 goes on until layer 1's keyframe at 45
    // (`play` publishes a frame's layers in order, so layer 0's frame 45 goes first).
    p.set_layer(1, true);
    assert!(p.viewer.pinned());
    assert_eq!(p.viewer.target_layer(), 1);
    assert_eq!(p.viewer.video_layer(), Some(0));
    let key45 = p.next_video_seq(1) + (45 - 20) * PACKETS;
    let last0 = p.next_video_seq(0) + (46 - 20) * PACKETS - 1;
    p.play(40, &layers);

    assert_eq!(p.viewer.video_layer(), Some(1));
    let got = p.got_video();
    assert_eq!(runs(&got).iter().map(|r| r.1).collect::<Vec<_>>(), [0, 1]);
    let (at, _) = runs(&got)[1];
    assert_eq!((got[at].layer, got[at].src), (1, key45), "switched at 45");
    assert_eq!(
        (got[at - 1].layer, got[at - 1].src),
        (0, last0),
        "layer 0 up to 45"
    );
    // Both are frame 45, one capture time: the new layer's keyframe is moved one tick
    // ahead, so that a receiver does not take it for a stale copy of the picture.
    assert_eq!(got[at].rtp_ts, got[at - 1].rtp_ts + 1);
    // Layer 0's frames 0 to 45, then layer 1's 45 to 59 (its keyframe at 15 came while
    // the viewer wanted layer 0: not taken).
    assert_eq!(got.len() as u64, (46 + 15) * PACKETS);
    assert_seamless(&p);
    // A pinned viewer asks for the new layer's keyframe (the server forwards it).
    assert_eq!(
        p.keyframe_requests, 2,
        "at the start (empty ring) and at the pin"
    );
}

#[test]
fn a_viewer_pinned_in_its_offer_starts_on_its_layer_and_the_policy_moves_it() {
    // Layer 0's keyframes at 0, 30, 60; layer 1's at 5, 35, 65.
    let layers = [LayerPlan::new(0, 30, 0), LayerPlan::new(1, 30, 5)];
    let mut p = Pair::new(Config {
        seed: 42,
        pin: Some(1),
        ..Config::default()
    });
    p.connect();
    let first1 = p.next_video_seq(1) + 5 * PACKETS;
    p.play(20, &layers);
    // Layer 0's keyframe at 0 came first; the viewer waited for its own layer's.
    let got = p.got_video();
    assert_eq!((got[0].layer, got[0].src), (1, first1));
    assert!(got.iter().all(|g| g.layer == 1));
    assert!(p.viewer.pinned());

    // The policy drops it to layer 0 at frame 20: layer 1 stops at once, and video
    // resumes at layer 0's keyframe at 30, numbered on from the last packet sent.
    p.viewer.apply(Switch::Drop(0));
    assert!(!p.viewer.pinned());
    let sent = p.got_video().len();
    let key30 = p.next_video_seq(0) + (30 - 20) * PACKETS;
    p.play(20, &layers);
    let got = p.got_video();
    assert_eq!((got[sent].layer, got[sent].src), (0, key30));
    assert!(
        got[sent].at - got[sent - 1].at >= Duration::from_millis(33 * 10),
        "nothing between the drop and the keyframe"
    );

    // Then it moves up again (not dropping): layer 0 goes on until layer 1's keyframe at
    // 65.
    p.viewer.apply(Switch::To(1));
    let key65 = p.next_video_seq(1) + (65 - 40) * PACKETS;
    p.play(30, &layers);
    let got = p.got_video();
    assert_eq!(
        runs(&got).iter().map(|r| r.1).collect::<Vec<_>>(),
        [1, 0, 1]
    );
    let (at, _) = runs(&got)[2];
    assert_eq!(got[at].src, key65);
    assert_eq!(got[at - 1].layer, 0);
    assert_eq!(p.viewer.video_layer(), Some(1));
    assert_seamless(&p);
}

#[test]
fn a_packet_of_the_old_layer_lost_at_the_switch_is_resent_from_its_ring() {
    let layers = [LayerPlan::new(0, 30, 0), LayerPlan::new(1, 30, 15)];
    let mut p = Pair::connected(43);
    p.play(20, &layers);
    p.set_layer(1, true);
    // The last packet of layer 0 before the switch at 45 (its frame 45) is lost: the gap
    // shows only with layer 1's keyframe, and the NACK names a number sent for layer 0.
    let last0 = p.next_video_seq(0) + (46 - 20) * PACKETS - 1;
    p.lose(MediaKind::Video, 0, last0, 1);
    p.play(40, &layers);
    p.run_for(Duration::from_secs(1));

    assert_eq!(p.lost_on_purpose, 1);
    assert_eq!(p.nacked.len(), 1, "{:?}", p.nacked);
    let n = p.nacked[0];
    assert_eq!(
        (n.layer, n.src, n.in_ring, n.resent),
        (0, last0, true, true)
    );
    let got = p.got_video();
    let resent: Vec<_> = got
        .iter()
        .filter(|g| g.layer == 0 && g.src == last0)
        .collect();
    assert_eq!(resent.len(), 1);
    let v = p.video();
    assert_eq!((v.lost(), v.recovered, v.duplicates), (0, 1, 0));
    // In the client's numbering it sits right before layer 1's keyframe.
    let key = got.iter().find(|g| g.layer == 1).unwrap();
    assert_eq!(resent[0].seq + 1, key.seq);
    let mut seqs: Vec<u64> = got.iter().map(|g| g.seq).collect();
    seqs.sort_unstable();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
}
