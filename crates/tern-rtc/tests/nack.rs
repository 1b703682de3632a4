//! NACK: a video packet the client never received is NACKed by the client and resent by the
//! viewer from the stream's ring, so the client ends with no loss; a packet already gone
//! from the ring when its NACK comes is not resent (the client gives it up as lost). The
//! lean viewer against the lean client on simulated time (`common::Pair`).

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{Config, FRAME_TICKS, LayerPlan, Pair};
use tern_proto::codec::MediaKind;

/// One layer, a keyframe a second, two packets a frame.
const VIDEO: [LayerPlan; 1] = [LayerPlan::new(0, 30, 0)];

#[test]
fn a_packet_the_client_never_received_is_nacked_and_resent_from_the_ring() {
    let mut p = Pair::connected(11);
    p.play(10, &VIDEO);
    // The second packet of frame 11 (the first of the next frame is `next_video_seq`).
    let lost = p.next_video_seq(0) + 3;
    p.lose(MediaKind::Video, 0, lost, 1);
    p.play(20, &VIDEO);
    p.run_for(Duration::from_secs(1));

    assert_eq!(p.lost_on_purpose, 1, "the chosen loss happened");
    // The viewer mapped the client's NACK back to the source packet, found it in the ring
    // and resent it once; nothing else was NACKed.
    assert!(!p.nacked.is_empty(), "no NACK reached the viewer");
    assert!(p.nacked.iter().all(|n| n.src == lost && n.layer == 0));
    assert!(p.nacked.iter().all(|n| n.in_ring));
    assert_eq!(p.nacked.iter().filter(|n| n.resent).count(), 1);
    assert_eq!(p.viewer.counters().retransmits, 1);
    assert_eq!(p.viewer.live().nacks_ignored, 0);
    // The client has every packet, the lost one once, arrived after its NACK.
    let v = p.video();
    assert!(v.nacks_sent >= 1);
    assert_eq!((v.lost(), v.recovered, v.duplicates), (0, 1, 0));
    assert_eq!(v.packets, 60);
    let got = p.got_video();
    let resent: Vec<_> = got.iter().filter(|g| g.src == lost).collect();
    assert_eq!(resent.len(), 1, "the lost packet came once");
    let next = got.iter().find(|g| g.src == lost + 1).unwrap();
    assert!(
        resent[0].at > next.at,
        "it came back after the packet that showed the gap"
    );
    assert_eq!(
        resent[0].seq + 1,
        next.seq,
        "in its own place in the numbering"
    );
    // Every source packet was received exactly once.
    let mut srcs: Vec<u64> = got.iter().map(|g| g.src).collect();
    srcs.sort_unstable();
    let first = srcs[0];
    assert_eq!(srcs, (first..first + 60).collect::<Vec<_>>());
}

#[test]
fn a_packet_gone_from_the_ring_is_not_resent() {
    // A ring of 16 packets: one frame of 40 overwrites it before any NACK can come back.
    let mut p = Pair::new(Config {
        seed: 12,
        video_ring: 16,
        ..Config::default()
    });
    p.connect();
    p.play(5, &VIDEO);
    let lost = p.next_video_seq(0);
    p.lose(MediaKind::Video, 0, lost, 1);
    let ts = (p.frames() as u32) * FRAME_TICKS;
    p.frame(0, false, 40, ts);
    assert!(
        p.stream.video.get(lost).is_none(),
        "the ring no longer holds the packet"
    );
    p.run_for(Duration::from_secs(2));

    // The client NACKed it (three tries, 100 ms apart), the viewer mapped every NACK to
    // the source packet, and none could be answered.
    let v = p.video();
    assert_eq!(v.nacks_sent, 3);
    assert_eq!(p.nacked.len(), 3);
    assert!(
        p.nacked
            .iter()
            .all(|n| n.src == lost && !n.in_ring && !n.resent)
    );
    assert_eq!(p.viewer.counters().retransmits, 0);
    assert_eq!(p.viewer.live().nacks_ignored, 3);
    // So it stays lost.
    assert!(p.got_video().iter().all(|g| g.src != lost));
    assert_eq!((v.lost(), v.recovered), (1, 0));
    assert_eq!(v.packets, 10 + 39);
}

#[test]
fn under_random_loss_every_lost_video_packet_is_recovered() {
    let mut p = Pair::connected(13);
    // 5 % of what the viewer sends is lost, NACK answers included; the client's RTCP
    // arrives.
    p.to_client.loss = 0.05;
    p.play(300, &VIDEO);
    p.to_client.loss = 0.0;
    p.play(10, &VIDEO);
    p.run_for(Duration::from_secs(1));

    let v = p.video();
    assert!(p.to_client.dropped >= 20, "{} dropped", p.to_client.dropped);
    assert!(v.recovered >= 20, "{} recovered", v.recovered);
    assert_eq!(v.lost(), 0);
    assert_eq!(v.packets, 2 * 310);
    assert_eq!(
        p.viewer.counters().retransmits,
        p.nacked.iter().filter(|n| n.resent).count() as u64
    );
}
