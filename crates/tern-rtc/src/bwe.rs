//! Bandwidth estimation for one viewer from transport-wide congestion control feedback, in
//! the spirit of Google Congestion Control (draft-ietf-rmcat-gcc-02): a delay-based
//! estimate (a trendline over the one-way delay variation of packet groups, an overuse
//! detector with an adaptive threshold, AIMD rate control) capped by a loss-based one.
//! Sans-IO: the caller reports each packet sent with its transport-wide sequence number
//! ([`Estimator::on_sent`]) and each feedback ([`Estimator::on_feedback`]), with times in
//! microseconds on its own clock, and reads [`Estimator::estimate_bps`]; the tests drive it
//! through a simulated bottleneck faster than real time.
//!
//! Written here rather than taken from a crate: the WebRTC stacks in Rust (str0m, webrtc-rs)
//! keep their estimators inside their session types, and a viewer here must stay at a few
//! hundred bytes of state; this one is a fixed-size ring of sent packets and a short window.

use std::collections::VecDeque;

use tern_proto::twcc::Feedback;

/// Packets whose send time is remembered for matching feedback: 4 bytes each, 896 B in
/// all. A feedback names packets sent up to a queue and a feedback interval ago: a pion
/// viewer behind a 300 kbit/s token bucket (300 ms of queue) reported 140 packets behind
/// the newest sent; at 1,000 packets a second (10 Mbit/s) this is 224 ms.
const SENT_RING: usize = 224;
/// A slot of the sent ring: two flags (its arrival was counted, it was counted lost), the
/// packet's size in 11 bits (2,047 B, more than any packet sent here; 0: an empty slot),
/// and the low [`TIME_BITS`] of its send time in [`TICK_US`] ticks (52 s, rebuilt against
/// the feedback's time).
const ACKED: u32 = 1 << 31;
const LOST: u32 = 1 << 30;
const SIZE_SHIFT: u32 = TIME_BITS;
const SIZE_MAX: u32 = (1 << 11) - 1;
const TIME_BITS: u32 = 19;
const TIME_MASK: u32 = (1 << TIME_BITS) - 1;
const TICK_US: i64 = 100;
/// Packets sent within this of a group's first belong to the group (a burst).
const GROUP_US: i64 = 5_000;
/// Delay samples in the trendline's regression window.
const TREND_WINDOW: usize = 20;
/// Arrival offsets in the trend window are rebased once they pass this.
const REBASE_US: i64 = 60_000_000;
/// Smoothing of the accumulated delay.
const SMOOTHING: f64 = 0.9;
/// Gain on the trendline slope.
const TREND_GAIN: f64 = 4.0;
/// Adaptive threshold: its start, bounds and rates up and down (GCC §5.4).
const THRESHOLD_START: f64 = 12.5;
const THRESHOLD_MIN: f64 = 6.0;
const THRESHOLD_MAX: f64 = 600.0;
const K_UP: f64 = 0.0087;
const K_DOWN: f64 = 0.039;
/// Time over the threshold before overuse is declared (ms).
const OVERUSE_MS: f64 = 10.0;
/// On overuse the rate drops to this share of what was acknowledged.
const BETA: f64 = 0.85;
/// Multiplicative increase per second while the path is not overused.
const INCREASE_PER_S: f64 = 1.08;
/// The window acknowledged throughput is measured over.
const ACKED_BIN_US: i64 = 250_000;
/// Loss above this cuts the loss-based rate; below the low mark it grows again.
const LOSS_HIGH: f64 = 0.10;
const LOSS_LOW: f64 = 0.02;
/// The loss-based rate is cut at most this often (a feedback comes every 50-100 ms; a cut
/// per feedback would halve the rate several times before the first cut took effect).
const LOSS_CUT_US: i64 = 300_000;

/// What the delay-based detector sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// Queues are stable.
    Normal,
    /// Delay grows: the path is overused.
    Over,
    /// Delay shrinks: queues drain.
    Under,
}

/// Limits of the estimate.
#[derive(Debug, Clone, Copy)]
pub struct BweConfig {
    /// Never below this (bit/s).
    pub min_bps: u64,
    /// Never above this (bit/s).
    pub max_bps: u64,
    /// The estimate before any feedback (bit/s).
    pub start_bps: u64,
}

impl Default for BweConfig {
    /// 50 kbit/s to 20 Mbit/s, starting at 2.5 Mbit/s (a 720p layer).
    fn default() -> Self {
        BweConfig {
            min_bps: 50_000,
            max_bps: 20_000_000,
            start_bps: 2_500_000,
        }
    }
}

/// A packet group: packets sent within [`GROUP_US`] of the first.
#[derive(Debug, Clone, Copy)]
struct Group {
    first_send: i64,
    last_send: i64,
    last_arrival: i64,
}

/// One viewer's estimator.
#[derive(Debug)]
pub struct Estimator {
    cfg: BweConfig,
    /// The last [`SENT_RING`] packets sent, by extended sequence number modulo the ring
    /// (see [`ACKED`] for a slot's bits). A slot's sequence number is not kept: a
    /// feedback's is taken when it is among the last [`SENT_RING`] sent (`newest`).
    sent: [u32; SENT_RING],
    /// Extended sequence number of the newest packet sent (the 16-bit ones extended
    /// against it, so that the ring's index does not jump when they wrap).
    newest: Option<u32>,
    group: Option<Group>,
    prev_group: Option<Group>,
    /// Trendline state.
    acc_delay: f64,
    smoothed: f64,
    /// (arrival ms since the first, smoothed accumulated delay ms) of the last groups.
    window: VecDeque<(f32, f32)>,
    first_arrival: Option<i64>,
    deltas: usize,
    prev_trend: f64,
    /// Overuse detector state.
    threshold: f64,
    overuse_ms: f64,
    overuse_count: u32,
    last_detect: Option<i64>,
    usage: Usage,
    /// Rates.
    delay_bps: f64,
    loss_bps: f64,
    last_update: Option<i64>,
    last_loss_cut: Option<i64>,
    /// Bytes acknowledged in the previous and the current [`ACKED_BIN_US`] of arrival time:
    /// (bin start µs, bytes), and the last arrival.
    acked: [(i64, u64); 2],
    last_arrival: Option<i64>,
    /// Send times of the first packet counted in the older bin and of the newest counted:
    /// the throughput acknowledged is never taken as faster than those packets were sent.
    acked_first_send: [i64; 2],
    last_send: i64,
}

impl Estimator {
    /// A new estimator.
    pub fn new(cfg: BweConfig) -> Self {
        let start = cfg.start_bps.clamp(cfg.min_bps, cfg.max_bps) as f64;
        Estimator {
            cfg,
            sent: [0; SENT_RING],
            newest: None,
            group: None,
            prev_group: None,
            acc_delay: 0.0,
            smoothed: 0.0,
            window: VecDeque::with_capacity(TREND_WINDOW),
            first_arrival: None,
            deltas: 0,
            prev_trend: 0.0,
            threshold: THRESHOLD_START,
            overuse_ms: 0.0,
            overuse_count: 0,
            last_detect: None,
            usage: Usage::Normal,
            delay_bps: start,
            loss_bps: start,
            last_update: None,
            last_loss_cut: None,
            acked: [(0, 0); 2],
            last_arrival: None,
            acked_first_send: [0; 2],
            last_send: 0,
        }
    }

    /// The estimate (bit/s).
    pub fn estimate_bps(&self) -> u64 {
        (self.delay_bps.min(self.loss_bps) as u64).clamp(self.cfg.min_bps, self.cfg.max_bps)
    }

    /// Brings the estimate down to what the path was last shown to carry: [`BETA`] times
    /// the throughput acknowledged, or `unmeasured` without one (never up). For a
    /// sender that stops sending media on a path it found overloaded: what it sends next
    /// (probes) starts from what got through, not from an estimate the loss-based cuts
    /// were still bringing down.
    pub fn settle(&mut self, unmeasured: f64) {
        let est = self.delay_bps.min(self.loss_bps);
        let to = self.acked_bps().map_or(unmeasured, |a| BETA * a).min(est);
        let to = to.clamp(self.cfg.min_bps as f64, self.cfg.max_bps as f64);
        self.delay_bps = to;
        self.loss_bps = to;
    }

    /// Raises both rates to the throughput acknowledged unless the path is overused: for a
    /// sender whose feedback covers nothing but probes (a paused viewer's padding), what
    /// arrived is a probe result, taken while queues drain as well as while they hold
    /// (libwebrtc applies a probe's result unless the detector sees overuse). The
    /// delay-based rule holds in underuse, which after a path's limit lifts (its queue
    /// gone, the delay falling) would keep the estimate where the limit left it.
    pub fn take_probe_result(&mut self) {
        if self.usage == Usage::Over {
            return;
        }
        if let Some(a) = self.acked_bps() {
            let max = self.cfg.max_bps as f64;
            self.delay_bps = self.delay_bps.max(a).min(max);
            self.loss_bps = self.loss_bps.max(a).min(max);
        }
    }

    /// What the delay-based detector last saw.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Throughput the receiver acknowledged over the last quarter to half second (bit/s),
    /// once a tenth of a second has been seen. Its span is the longer of the packets'
    /// arrival and send spans: a receiver that timestamps packets when its application
    /// reads them (pion's transport-wide feedback does) reports a stalled read's backlog
    /// as arriving at once, which would read as a path many times faster than the sender.
    pub fn acked_bps(&self) -> Option<f64> {
        let last = self.last_arrival?;
        let span =
            (last - self.acked[0].0).max(self.last_send - self.acked_first_send[0]) as f64 / 1e6;
        if span < 0.1 {
            return None;
        }
        Some((self.acked[0].1 + self.acked[1].1) as f64 * 8.0 / span)
    }

    /// A packet of `size` bytes was sent with transport-wide sequence number `seq` at
    /// `now_us`.
    pub fn on_sent(&mut self, seq: u16, size: usize, now_us: i64) {
        let ext = self.extend(seq);
        let size = (size as u32).clamp(1, SIZE_MAX);
        let time = (now_us / TICK_US) as u32 & TIME_MASK;
        self.sent[ext as usize % SENT_RING] = size << SIZE_SHIFT | time;
        // Sequence numbers only grow (mod 2^16); a late report of an older send keeps the
        // newest.
        if self.newest.is_none_or(|n| ext > n) {
            self.newest = Some(ext);
        }
    }

    /// `seq` extended against the newest sent (the first starts past 2^16, so that one
    /// just before it extends without going below zero).
    fn extend(&self, seq: u16) -> u32 {
        match self.newest {
            None => u32::from(seq) + (1 << 16),
            Some(n) => {
                let d = i32::from(seq.wrapping_sub(n as u16) as i16);
                n.wrapping_add_signed(d)
            }
        }
    }

    /// Counts `size` bytes sent at `send` and arrived at `arrival` in the
    /// acknowledged-throughput bins.
    fn ack(&mut self, send: i64, arrival: i64, size: u64) {
        // The window starts here with the first packet, and again after nothing arrived for
        // over a bin: a pause in what was sent (a paused viewer is sent probes alone, a
        // second apart), not a slow path. A window reaching back over the pause would
        // dilute the probe's throughput with time in which nothing was sent.
        if self
            .last_arrival
            .is_none_or(|_| arrival >= self.acked[1].0 + 2 * ACKED_BIN_US)
        {
            self.acked = [(arrival, 0), (arrival, 0)];
            self.acked_first_send = [send; 2];
            self.last_send = send;
        } else if arrival >= self.acked[1].0 + ACKED_BIN_US {
            self.acked[0] = self.acked[1];
            self.acked_first_send[0] = self.acked_first_send[1];
            self.acked[1] = (arrival, 0);
            self.acked_first_send[1] = send;
        }
        self.acked[1].1 += size;
        self.last_arrival = Some(self.last_arrival.map_or(arrival, |l| l.max(arrival)));
        self.last_send = self.last_send.max(send);
    }

    /// A feedback arrived at `now_us`.
    pub fn on_feedback(&mut self, fb: &Feedback, now_us: i64) {
        let mut lost = 0usize;
        let mut reported = 0usize;
        for p in &fb.packets {
            let ext = self.extend(p.seq);
            let i = ext as usize % SENT_RING;
            let raw = self.sent[i];
            let size = raw >> SIZE_SHIFT & SIZE_MAX;
            let recent = self
                .newest
                .is_some_and(|n| n >= ext && ((n - ext) as usize) < SENT_RING);
            if size == 0 || !recent || raw & ACKED != 0 {
                continue; // not ours, too old to remember, or its arrival already counted
            }
            let Some(arrival) = p.arrival_us else {
                // Counted lost once, however often it is reported missing.
                if raw & LOST == 0 {
                    self.sent[i] |= LOST;
                    reported += 1;
                    lost += 1;
                }
                continue;
            };
            // A receiver may report a packet again (pion's recorder reports from the lowest
            // sequence number recorded since its last feedback, so a late packet makes it
            // repeat what it sent): counted twice, its bytes would inflate the throughput
            // acknowledged and with it the estimate's floor.
            self.sent[i] |= ACKED;
            reported += 1;
            let now_t = now_us / TICK_US;
            let age = (now_t as u32).wrapping_sub(raw) & TIME_MASK;
            let send = (now_t - i64::from(age)) * TICK_US;
            self.ack(send, arrival, u64::from(size));
            self.on_arrival(send, arrival);
        }
        if reported > 0 {
            self.update_loss(lost as f64 / reported as f64, now_us);
        }
        self.update_rate(now_us);
    }

    /// One received packet, in feedback order: grouping, then the delay trend.
    fn on_arrival(&mut self, send: i64, arrival: i64) {
        match &mut self.group {
            Some(g) if send - g.first_send <= GROUP_US && send >= g.first_send => {
                g.last_send = g.last_send.max(send);
                g.last_arrival = g.last_arrival.max(arrival);
                return;
            }
            _ => {}
        }
        // A new group: the one just closed is compared with the one before it.
        if let (Some(cur), Some(prev)) = (self.group, self.prev_group) {
            let send_delta = (cur.last_send - prev.last_send) as f64 / 1000.0;
            let arrival_delta = (cur.last_arrival - prev.last_arrival) as f64 / 1000.0;
            self.on_delta(arrival_delta - send_delta, send_delta, cur.last_arrival);
        }
        self.prev_group = self.group;
        self.group = Some(Group {
            first_send: send,
            last_send: send,
            last_arrival: arrival,
        });
    }

    /// A delay variation sample (ms) between two groups sent `send_delta_ms` apart, the
    /// later arriving at `arrival` (µs).
    fn on_delta(&mut self, delay_ms: f64, send_delta_ms: f64, arrival: i64) {
        self.deltas += 1;
        let mut first = *self.first_arrival.get_or_insert(arrival);
        // The regression's x is kept small (an f32 of ms loses precision after hours): the
        // slope does not change when every x moves by the same amount.
        if arrival - first > REBASE_US
            && let Some(&(oldest, _)) = self.window.front()
        {
            first += (f64::from(oldest) * 1000.0) as i64;
            self.first_arrival = Some(first);
            for p in &mut self.window {
                p.0 -= oldest;
            }
        }
        self.acc_delay += delay_ms;
        self.smoothed = SMOOTHING * self.smoothed + (1.0 - SMOOTHING) * self.acc_delay;
        if self.window.len() == TREND_WINDOW {
            self.window.pop_front();
        }
        self.window
            .push_back(((arrival - first) as f32 / 1000.0, self.smoothed as f32));
        let slope = if self.window.len() == TREND_WINDOW {
            slope(&self.window).unwrap_or(self.prev_trend)
        } else {
            self.prev_trend
        };
        let trend = (self.deltas.min(60) as f64) * slope * TREND_GAIN;
        self.detect(trend, send_delta_ms, arrival);
        self.prev_trend = slope;
    }

    /// The overuse detector with its adaptive threshold.
    fn detect(&mut self, trend: f64, send_delta_ms: f64, now: i64) {
        if trend > self.threshold {
            self.overuse_ms += send_delta_ms.max(0.0);
            self.overuse_count += 1;
            if self.overuse_ms > OVERUSE_MS && self.overuse_count > 1 {
                self.usage = Usage::Over;
                self.overuse_ms = 0.0;
                self.overuse_count = 0;
            }
        } else if trend < -self.threshold {
            self.usage = Usage::Under;
            self.overuse_ms = 0.0;
            self.overuse_count = 0;
        } else {
            self.usage = Usage::Normal;
            self.overuse_ms = 0.0;
            self.overuse_count = 0;
        }
        let dt = self
            .last_detect
            .map_or(0.0, |l| ((now - l) as f64 / 1000.0).min(100.0));
        self.last_detect = Some(now);
        // A sudden jump (a route change) does not move the threshold (GCC §5.4).
        if trend.abs() <= self.threshold + 15.0 {
            let k = if trend.abs() < self.threshold {
                K_DOWN
            } else {
                K_UP
            };
            self.threshold += k * (trend.abs() - self.threshold) * dt;
            self.threshold = self.threshold.clamp(THRESHOLD_MIN, THRESHOLD_MAX);
        }
    }

    /// AIMD on the delay-based rate.
    fn update_rate(&mut self, now: i64) {
        let dt = self
            .last_update
            .map_or(0.0, |l| ((now - l) as f64 / 1e6).clamp(0.0, 1.0));
        self.last_update = Some(now);
        let acked = self.acked_bps();
        match self.usage {
            Usage::Over => {
                // β times what the receiver got (GCC §5.5), not times the estimate: a
                // detection that lasts several feedbacks must not compound its cuts.
                self.delay_bps = BETA * acked.unwrap_or(self.delay_bps);
            }
            Usage::Under => {}
            Usage::Normal => {
                let grown = self.delay_bps * INCREASE_PER_S.powf(dt);
                // Never far above what the path is shown to carry: the sender may send
                // less than the estimate (a lower layer), and an estimate that ran away
                // would take seconds to come back.
                let cap = acked.map_or(f64::MAX, |a| 1.5 * a + 10_000.0);
                // And never below it: what arrived without queues growing is what the path
                // carries (a probe's extra packets raise it at once, as a probe result
                // does in libwebrtc).
                let floor = acked.unwrap_or(0.0);
                self.delay_bps = grown.min(cap.max(self.delay_bps)).max(floor);
            }
        }
        let (min, max) = (self.cfg.min_bps as f64, self.cfg.max_bps as f64);
        self.delay_bps = self.delay_bps.clamp(min, max);
        self.loss_bps = self.loss_bps.clamp(min, max);
    }

    /// The loss-based rate (GCC §6): cut by half the loss above 10 % (at most once per
    /// [`LOSS_CUT_US`]), grown 5 % below 2 %, up to the delay-based rate (and to at least
    /// what was acknowledged while the delay holds steady).
    fn update_loss(&mut self, loss: f64, now: i64) {
        if loss > LOSS_HIGH {
            if self.last_loss_cut.is_none_or(|l| now - l >= LOSS_CUT_US) {
                self.loss_bps *= 1.0 - 0.5 * loss;
                self.last_loss_cut = Some(now);
            }
        } else if loss < LOSS_LOW {
            // What arrived almost without loss while queues held steady the path carries: a
            // cut taken while it was overloaded must not hold the estimate down once probes
            // show room (grown 5 % a feedback, a cut to a tenth takes seconds of feedback to
            // undo; libwebrtc's probe results lift the loss-based rate at once too).
            let floor = match self.usage {
                Usage::Normal => self.acked_bps().unwrap_or(0.0),
                _ => 0.0,
            };
            self.loss_bps = (self.loss_bps * 1.05)
                .min(self.delay_bps.max(self.loss_bps))
                .max(floor);
        }
    }
}

/// Least-squares slope of `y` over `x` (computed in f64).
fn slope(points: &VecDeque<(f32, f32)>) -> Option<f64> {
    let n = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + f64::from(*x), b + f64::from(*y))
    });
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), (x, y)| {
        let (x, y) = (f64::from(*x) - mx, f64::from(*y) - my);
        (num + x * y, den + x * x)
    });
    (den > 0.0).then(|| num / den)
}

#[cfg(test)]
mod tests;
