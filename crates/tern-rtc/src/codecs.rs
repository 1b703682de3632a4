//! Which video codec goes to which output: the one table every output reads, and the one
//! the docs print ([`TABLE`]; `docs/src/codecs.md` has it as a table a test compares).
//!
//! - WebRTC viewers (WHEP, OME signalling) take every codec a publisher may send: a viewer
//!   is answered in the stream's codec when it offers it.
//! - LL-HLS and recordings package what `tern_rtc::package::Feed` can rebuild and the CMAF
//!   packager can store (`avc1`, `hvc1`, `vp08`, `vp09`).
//! - RTMP forwards write FLV, which carries H264; SRT (forwards and readers) writes
//!   MPEG-TS, which carries H264 and H265.

use tern_proto::codec::VideoCodec;

/// Where a stream's video can go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// WHEP and OME viewers.
    WebRtc,
    /// LL-HLS variants.
    LlHls,
    /// Recordings (fMP4 files).
    Recording,
    /// RTMP forwards (FLV).
    RtmpForward,
    /// SRT forwards and SRT readers (MPEG-TS).
    Srt,
}

impl Output {
    /// Every output, in the table's column order.
    pub const ALL: [Output; 5] = [
        Output::WebRtc,
        Output::LlHls,
        Output::Recording,
        Output::RtmpForward,
        Output::Srt,
    ];

    /// The output's name in the docs' table.
    pub fn name(self) -> &'static str {
        match self {
            Output::WebRtc => "WebRTC",
            Output::LlHls => "LL-HLS",
            Output::Recording => "recording",
            Output::RtmpForward => "RTMP forward",
            Output::Srt => "SRT",
        }
    }
}

/// The table: for each video codec (in the order a publisher's offer is answered), the
/// outputs that carry it.
pub const TABLE: [(VideoCodec, &[Output]); 5] = [
    (
        VideoCodec::H264,
        &[
            Output::WebRtc,
            Output::LlHls,
            Output::Recording,
            Output::RtmpForward,
            Output::Srt,
        ],
    ),
    (
        VideoCodec::Vp8,
        &[Output::WebRtc, Output::LlHls, Output::Recording],
    ),
    (
        VideoCodec::Vp9,
        &[Output::WebRtc, Output::LlHls, Output::Recording],
    ),
    (
        VideoCodec::Av1,
        &[Output::WebRtc, Output::LlHls, Output::Recording],
    ),
    (
        VideoCodec::H265,
        &[
            Output::WebRtc,
            Output::LlHls,
            Output::Recording,
            Output::Srt,
        ],
    ),
];

/// Whether `output` carries `codec`'s video.
pub fn carries(output: Output, codec: VideoCodec) -> bool {
    TABLE
        .iter()
        .any(|(c, outputs)| *c == codec && outputs.contains(&output))
}

/// The codecs `output` carries, in the table's order (H264 first).
pub fn carried_by(output: Output) -> impl Iterator<Item = VideoCodec> {
    TABLE
        .iter()
        .filter(move |(_, outputs)| outputs.contains(&output))
        .map(|(c, _)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_has_a_row_in_the_order_offers_are_answered() {
        let rows: Vec<VideoCodec> = TABLE.iter().map(|(c, _)| *c).collect();
        assert_eq!(rows, VideoCodec::ALL);
        for c in VideoCodec::ALL {
            assert!(carries(Output::WebRtc, c), "{c}: WebRTC viewers take it");
        }
    }

    /// The table in `docs/src/codecs.md` ("Which codec goes where") is this one.
    #[test]
    fn the_docs_print_this_table() {
        let doc = include_str!("../../../docs/src/codecs.md");
        let at = doc
            .find("| video codec |")
            .expect("docs/src/codecs.md has the table");
        let mut lines = doc[at..].lines();
        let head: Vec<&str> = cells(lines.next().expect("header"));
        let names: Vec<&str> = Output::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(
            head[1..],
            names[..],
            "the columns are the outputs, in order"
        );
        lines.next(); // | --- |
        let mut rows = Vec::new();
        for line in lines.take_while(|l| l.starts_with('|')) {
            let c = cells(line);
            let codec = VideoCodec::ALL
                .into_iter()
                .find(|v| v.sdp_name() == c[0])
                .unwrap_or_else(|| panic!("unknown codec row {line}"));
            let outputs: Vec<Output> = Output::ALL
                .into_iter()
                .zip(&c[1..])
                .filter(|(_, cell)| match **cell {
                    "yes" => true,
                    "no" => false,
                    other => panic!("cell {other:?} in {line}: yes or no"),
                })
                .map(|(o, _)| o)
                .collect();
            rows.push((codec, outputs));
        }
        let code: Vec<(VideoCodec, Vec<Output>)> =
            TABLE.iter().map(|(c, o)| (*c, o.to_vec())).collect();
        assert_eq!(rows, code);
    }

    fn cells(line: &str) -> Vec<&str> {
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('*'))
            .collect()
    }
}
