//! The LL-HLS media playlist text (RFC 8216bis section 4.4, with the low-latency tags of
//! Apple's "Enabling Low-Latency HLS").

use std::fmt::Write as _;

use super::Segment;

/// What the playlist needs besides the segments.
pub(crate) struct PlaylistHead {
    pub target_duration: u64,
    pub part_target_secs: f64,
    /// Discontinuity tags among the segments no longer listed.
    pub discontinuity_sequence: u64,
    /// The (msn, part) of the preload hint.
    pub next_part: (u64, u32),
}

fn secs(ticks: u64, timescale: u32) -> f64 {
    ticks as f64 / f64::from(timescale.max(1))
}

/// Renders the playlist of `segments` (oldest first; the last one may be in progress).
/// `query` (without `?`) is appended to every URI when not empty.
pub(crate) fn render<'a>(
    head: &PlaylistHead,
    segments: impl DoubleEndedIterator<Item = &'a Segment> + Clone,
    query: &str,
) -> String {
    let q = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    let mut out = String::with_capacity(2048);
    // `write!` into a String cannot fail.
    let _ = write!(
        out,
        "#EXTM3U\n#EXT-X-VERSION:9\n#EXT-X-TARGETDURATION:{}\n\
         #EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK={:.3}\n\
         #EXT-X-PART-INF:PART-TARGET={:.3}\n",
        head.target_duration,
        3.0 * head.part_target_secs,
        head.part_target_secs,
    );
    let first_msn = segments.clone().next().map_or(0, |s| s.msn);
    let _ = writeln!(out, "#EXT-X-MEDIA-SEQUENCE:{first_msn}");
    if head.discontinuity_sequence > 0 {
        let _ = writeln!(
            out,
            "#EXT-X-DISCONTINUITY-SEQUENCE:{}",
            head.discontinuity_sequence
        );
    }
    // Only true when every segment starts with a keyframe: a ladder's lower variant cuts
    // at its top variant's keyframes, where it may have none.
    if segments.clone().all(starts_independent) {
        out.push_str("#EXT-X-INDEPENDENT-SEGMENTS\n");
    }

    // Parts are listed for the segments that start within three target durations of the end
    // of the playlist (RFC 8216bis 4.4.4.9: older ones may be dropped), and always for the
    // segment in progress.
    let horizon = 3.0 * head.target_duration as f64;
    let mut from_end = 0.0;
    let mut parts_from_msn = u64::MAX;
    for seg in segments.clone().rev() {
        from_end += secs(seg.duration, seg.timescale);
        if !seg.complete || from_end <= horizon {
            parts_from_msn = seg.msn;
        } else {
            break;
        }
    }

    let mut map_version = None;
    for seg in segments {
        if !seg.complete && seg.parts.is_empty() {
            break;
        }
        if seg.discontinuity {
            out.push_str("#EXT-X-DISCONTINUITY\n");
        }
        if map_version != Some(seg.init_version) {
            let _ = writeln!(out, "#EXT-X-MAP:URI=\"init{}.mp4{q}\"", seg.init_version);
            map_version = Some(seg.init_version);
        }
        let _ = writeln!(out, "#EXT-X-PROGRAM-DATE-TIME:{}", format_date(seg.pdt_ms));
        if seg.msn >= parts_from_msn {
            for (i, part) in seg.parts.iter().enumerate() {
                let _ = write!(
                    out,
                    "#EXT-X-PART:DURATION={:.3},URI=\"{}.{i}.m4s{q}\"",
                    secs(part.duration, seg.timescale),
                    seg.msn,
                );
                out.push_str(if part.independent {
                    ",INDEPENDENT=YES\n"
                } else {
                    "\n"
                });
            }
        }
        if seg.complete {
            let _ = write!(
                out,
                "#EXTINF:{:.3},\n{}.m4s{q}\n",
                secs(seg.duration, seg.timescale),
                seg.msn
            );
        }
    }
    let (msn, part) = head.next_part;
    let _ = writeln!(
        out,
        "#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"{msn}.{part}.m4s{q}\""
    );
    out
}

/// Whether a segment's first part starts with a keyframe (a segment with no part yet
/// counts as one: nothing of it is listed).
pub(crate) fn starts_independent(seg: &Segment) -> bool {
    seg.parts.first().is_none_or(|p| p.independent)
}

/// Unix time in milliseconds as ISO 8601 UTC with milliseconds (`2026-11-25T16:00:00.123Z`).
pub(crate) fn format_date(unix_ms: u64) -> String {
    let days = (unix_ms / 86_400_000) as i64;
    let ms_of_day = unix_ms % 86_400_000;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000
    )
}

/// Proleptic Gregorian (year, month, day) of a count of days since 1970-01-01. The calendar
/// repeats every 400 years (146097 days); within an era, counting years from March 1st puts
/// the leap day last, so month lengths follow the 153-days-per-5-months pattern.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Shift the epoch to 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_format_as_iso8601_utc() {
        assert_eq!(format_date(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_date(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(format_date(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
        assert_eq!(format_date(1_795_622_400_123), "2026-11-25T16:00:00.123Z");
        assert_eq!(format_date(4_102_444_800_000), "2100-01-01T00:00:00.000Z");
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
    }
}
