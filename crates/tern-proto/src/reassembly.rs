//! What the RTP depacketizers share.
//!
//! [`Reassembly`] (VP8, VP9): a frame rebuilt from the payloads of one SSRC between a start
//! flag and the marker bit, damaged (dropped and counted) by a sequence-number gap, a new
//! timestamp before the marker or a truncated descriptor.
//!
//! [`Unit`] (H264, H265, AV1): the state machine around the codec's payload parsing
//! ([`Depacketize`], run by [`push`]; [`depacketizer_api`] writes the public methods). A
//! unit (access unit, temporal unit) is the payloads of one RTP timestamp up to the marker
//! bit; a sequence-number gap, a malformed payload, a fragment whose start or end is
//! missing or a new timestamp before the marker damages it (dropped and counted).

/// The last sequence number of one SSRC.
#[derive(Debug, Default)]
struct Sequence(Option<u16>);

impl Sequence {
    /// Takes `seq`: the number of packets lost just before it, or `None` for a duplicate or
    /// late (reordered) packet, which is to be ignored.
    fn advance(&mut self, seq: u16) -> Option<u16> {
        let lost = match self.0 {
            Some(last) => {
                let ahead = seq.wrapping_sub(last);
                if ahead == 0 || ahead >= 0x8000 {
                    return None;
                }
                ahead - 1
            }
            None => 0,
        };
        self.0 = Some(seq);
        Some(lost)
    }
}

/// One SSRC's frame in progress and the counts.
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    frame: Vec<u8>,
    /// `frame` holds a finished frame returned by the previous push.
    ready: bool,
    in_frame: bool,
    ts: u32,
    damaged: bool,
    last_seq: Sequence,
    frames: u64,
    damaged_frames: u64,
}

impl Reassembly {
    /// Feeds one payload whose descriptor parsed to `descriptor` (its length and whether
    /// the payload starts a frame; `None`: truncated). `restart`: a start inside a frame
    /// drops that frame and begins anew (else the start is taken only between frames).
    /// Returns the frame it completes, if intact; duplicate and late packets are ignored.
    pub(crate) fn push(
        &mut self,
        seq: u16,
        rtp_ts: u32,
        marker: bool,
        payload: &[u8],
        descriptor: Option<(usize, bool)>,
        restart: bool,
    ) -> Option<&[u8]> {
        if self.ready {
            self.frame.clear();
            self.ready = false;
        }
        let lost = self.last_seq.advance(seq)?;
        if lost > 0 && self.in_frame {
            self.damaged = true;
        }
        if self.in_frame && rtp_ts != self.ts {
            self.drop_frame();
        }
        let Some((n, start)) = descriptor else {
            if self.in_frame {
                self.damaged = true;
            }
            return None;
        };
        if start && (restart || !self.in_frame) {
            if self.in_frame {
                self.drop_frame();
            }
            self.in_frame = true;
            self.damaged = false;
            self.ts = rtp_ts;
            self.frame.clear();
        }
        if !self.in_frame {
            return None;
        }
        self.frame.extend_from_slice(&payload[n..]);
        if !marker {
            return None;
        }
        self.in_frame = false;
        if self.damaged {
            self.damaged_frames += 1;
            self.frame.clear();
            return None;
        }
        self.frames += 1;
        self.ready = true;
        Some(&self.frame)
    }

    fn drop_frame(&mut self) {
        self.in_frame = false;
        self.damaged_frames += 1;
        self.frame.clear();
    }

    /// Frames returned.
    pub(crate) fn frames(&self) -> u64 {
        self.frames
    }

    /// Frames dropped as damaged.
    pub(crate) fn damaged_frames(&self) -> u64 {
        self.damaged_frames
    }
}

/// One SSRC's unit in progress and the counts, for a depacketizer whose payload parsing
/// (between [`Unit::begin`] and [`Unit::end`]) appends to [`Unit::buf`] and sets
/// [`Unit::damaged`] and [`Unit::in_fragment`].
#[derive(Debug, Default)]
pub(crate) struct Unit {
    /// The unit being rebuilt.
    pub(crate) buf: Vec<u8>,
    /// Something of the unit was lost or malformed: it will be dropped.
    pub(crate) damaged: bool,
    /// A fragmented piece (NAL unit, OBU) is in progress: its start was seen, not its end.
    pub(crate) in_fragment: bool,
    /// `buf` holds a finished unit returned by the previous push.
    ready: bool,
    /// Some packet of the current unit has been received.
    in_unit: bool,
    ts: u32,
    last_seq: Sequence,
    frames: u64,
    keyframes: u64,
    damaged_frames: u64,
    lost_packets: u64,
}

impl Unit {
    /// Starts a packet: `None` for a duplicate or late packet, to be ignored; else whether a
    /// unit in progress was dropped because `rtp_ts` differs from its timestamp (it never
    /// saw its marker), which the caller forgets as well.
    pub(crate) fn begin(&mut self, seq: u16, rtp_ts: u32) -> Option<bool> {
        if self.ready {
            self.buf.clear();
            self.ready = false;
        }
        let lost = self.last_seq.advance(seq)?;
        self.lost_packets += u64::from(lost);
        let dropped = self.in_unit && rtp_ts != self.ts;
        if dropped {
            self.damaged_frames += 1;
            self.buf.clear();
            self.in_unit = false;
            self.in_fragment = false;
            self.damaged = false;
        }
        if lost > 0 {
            // The lost packets belong to this unit (if it continues the one in progress, or
            // if they held its start); a lost end of the previous one was counted above when
            // the timestamp changed.
            self.damaged = true;
        }
        self.in_unit = true;
        self.ts = rtp_ts;
        Some(dropped)
    }

    /// Takes a fragment (`start`, `end`: its flags; not both): whether to append it. A start
    /// while a fragment is in progress damages the unit (that one lost its end); a middle or
    /// end fragment without its start damages it too, and is not to be appended.
    pub(crate) fn fragment(&mut self, start: bool, end: bool) -> bool {
        if start {
            if self.in_fragment {
                self.damaged = true;
            }
        } else if !self.in_fragment {
            // Middle or end fragment without its start: the start was lost.
            self.damaged = true;
            return false;
        }
        self.in_fragment = !end;
        true
    }

    /// A piece that is not a fragment: a fragment in progress lost its end.
    pub(crate) fn end_fragment(&mut self) {
        if self.in_fragment {
            self.damaged = true;
            self.in_fragment = false;
        }
    }

    /// Takes the result of parsing the payload (an error damages the unit and ends a
    /// fragment) and drops the bytes of a damaged unit, since nothing of it is returned.
    /// Returns whether the unit is damaged.
    pub(crate) fn discard_damaged<E>(&mut self, result: &Result<(), E>) -> bool {
        self.settle(result);
        if self.damaged {
            self.buf.clear();
        }
        self.damaged
    }

    fn settle<E>(&mut self, result: &Result<(), E>) {
        if result.is_err() {
            self.damaged = true;
            self.in_fragment = false;
        }
    }

    /// Ends a packet whose payload parsed to `result`. With `marker`, the unit ends:
    /// returns it if intact (counted as a keyframe if `keyframe` says so), else counts it
    /// as damaged. An error is returned after the unit is settled.
    pub(crate) fn end<E>(
        &mut self,
        marker: bool,
        result: Result<(), E>,
        keyframe: impl FnOnce(&[u8]) -> bool,
    ) -> Result<Option<&[u8]>, E> {
        self.settle(&result);
        if !marker {
            return result.map(|()| None);
        }
        if self.in_fragment {
            // Marker on a packet that did not finish its fragment.
            self.damaged = true;
        }
        let intact = !self.damaged && !self.buf.is_empty();
        if intact {
            self.frames += 1;
            if keyframe(&self.buf) {
                self.keyframes += 1;
            }
        } else {
            self.damaged_frames += 1;
        }
        self.in_unit = false;
        self.in_fragment = false;
        self.damaged = false;
        result?;
        if intact {
            self.ready = true;
            return Ok(Some(&self.buf));
        }
        self.buf.clear();
        Ok(None)
    }

    /// Intact units returned so far.
    pub(crate) fn frames(&self) -> u64 {
        self.frames
    }

    /// Intact units that the keyframe rule given to [`Unit::end`] accepted.
    pub(crate) fn keyframes(&self) -> u64 {
        self.keyframes
    }

    /// Units dropped as damaged.
    pub(crate) fn damaged_frames(&self) -> u64 {
        self.damaged_frames
    }

    /// Packets missing according to sequence-number gaps.
    pub(crate) fn lost_packets(&self) -> u64 {
        self.lost_packets
    }
}

/// The codec-specific part of a depacketizer built on a [`Unit`], which [`push`] runs.
pub(crate) trait Depacketize {
    /// What a malformed payload gives.
    type Error;

    /// The unit in progress.
    fn unit(&mut self) -> &mut Unit;

    /// Whether an intact unit counts as a keyframe.
    fn is_keyframe(unit: &[u8]) -> bool;

    /// Appends what one payload carries to the unit (or damages it).
    fn add_payload(&mut self, payload: &[u8]) -> Result<(), Self::Error>;

    /// The unit in progress was dropped ([`Unit::begin`]): forgets what is kept of it
    /// outside the [`Unit`].
    fn forget(&mut self) {}

    /// Runs after [`Depacketize::add_payload`], before [`Unit::end`] closes the packet.
    fn settle(&mut self, _result: &Result<(), Self::Error>, _marker: bool) {}
}

/// Feeds one RTP payload to `d` ([`Unit::begin`], the codec's parsing, [`Unit::end`]).
pub(crate) fn push<'a, D: Depacketize>(
    d: &'a mut D,
    (seq, rtp_ts): (u16, u32),
    marker: bool,
    payload: &[u8],
) -> Result<Option<&'a [u8]>, D::Error> {
    let Some(dropped) = d.unit().begin(seq, rtp_ts) else {
        return Ok(None);
    };
    if dropped {
        d.forget();
    }
    let result = d.add_payload(payload);
    d.settle(&result, marker);
    d.unit().end(marker, result, D::is_keyframe)
}

/// The public methods of a codec module's `Depacketizer` (a [`Depacketize`] whose [`Unit`]
/// is its field `$unit`, with the module's `DepacketizeError`): `new`, `push` and the
/// counts. Their docs name the codec's unit (`$noun`), what a failing payload is (`$bad`),
/// what makes a keyframe (`$key`) and what damages a unit (`$damaged`).
macro_rules! depacketizer_api {
    ($unit:ident, $noun:literal, $bad:literal, $key:literal, $damaged:literal) => {
        impl Depacketizer {
            /// An empty depacketizer.
            pub fn new() -> Depacketizer {
                Depacketizer::default()
            }

            /// Feeds one RTP payload with its sequence number, timestamp and marker bit.
            ///
            #[doc = concat!("Returns the completed ", $noun, " when `marker` closes an intact")]
            #[doc = "one. Duplicate and late (reordered) packets are ignored. An error means"]
            #[doc = concat!("the payload was ", $bad, "; its ", $noun, " is then damaged.")]
            pub fn push(
                &mut self,
                seq: u16,
                rtp_ts: u32,
                marker: bool,
                payload: &[u8],
            ) -> Result<Option<&[u8]>, DepacketizeError> {
                $crate::reassembly::push(self, (seq, rtp_ts), marker, payload)
            }

            #[doc = concat!("Intact ", $noun, "s returned so far.")]
            pub fn frames(&self) -> u64 {
                self.$unit.frames()
            }

            #[doc = concat!("Intact ", $noun, "s that ", $key, ".")]
            pub fn keyframes(&self) -> u64 {
                self.$unit.keyframes()
            }

            #[doc = $damaged]
            pub fn damaged_frames(&self) -> u64 {
                self.$unit.damaged_frames()
            }

            /// Packets missing according to sequence-number gaps.
            pub fn lost_packets(&self) -> u64 {
                self.$unit.lost_packets()
            }
        }
    };
}

pub(crate) use depacketizer_api;
