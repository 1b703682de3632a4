//! Trickle-ICE fragments (`application/trickle-ice-sdpfrag`, RFC 8840), as WHEP and WHIP
//! PATCH bodies carry them.

use super::model::{Candidate, MAX_MEDIA, MAX_SDP_LEN, SdpError, Shared, err};
use super::parse::{MediaBuilder, check_mid, ice_value, lines, parse_candidate, split_attr};

/// A trickle-ICE `application/trickle-ice-sdpfrag` body (RFC 8840).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SdpFrag {
    /// `a=ice-ufrag` (session or media level; the first one wins).
    pub ice_ufrag: Option<String>,
    /// `a=ice-pwd` (session or media level; the first one wins).
    pub ice_pwd: Option<String>,
    /// `a=mid` of each media section, in order.
    pub mids: Vec<String>,
    /// Candidates with an IP address (mDNS names are skipped).
    pub candidates: Vec<Candidate>,
    /// Whether `a=end-of-candidates` is present.
    pub end_of_candidates: bool,
}

/// Parses a trickle-ICE sdpfrag body: `a=` and `m=` lines, same limits as
/// [`SessionDescription::parse`]. Other line types are ignored.
pub fn parse_sdpfrag(s: &str) -> Result<SdpFrag, SdpError> {
    if s.len() > MAX_SDP_LEN {
        return Err(SdpError::TooLong(s.len()));
    }
    let mut f = SdpFrag::default();
    let mut sections = 0usize;
    for item in lines(s) {
        let (n, ty, value) = item?;
        match ty {
            b'm' => {
                if sections == MAX_MEDIA {
                    return err(n, "more than 16 m= sections");
                }
                MediaBuilder::new(n, value, &Shared::default())?;
                sections += 1;
            }
            b'a' => {
                let (name, val) = split_attr(value);
                match name {
                    "ice-ufrag" => {
                        let v = ice_value(n, val, false)?;
                        f.ice_ufrag.get_or_insert(v);
                    }
                    "ice-pwd" => {
                        let v = ice_value(n, val, true)?;
                        f.ice_pwd.get_or_insert(v);
                    }
                    "mid" => {
                        let mid = val.unwrap_or("").trim();
                        check_mid(n, mid)?;
                        f.mids.push(mid.to_string());
                    }
                    "candidate" => {
                        if let Some(c) = parse_candidate(n, val)? {
                            f.candidates.push(c);
                        }
                    }
                    "end-of-candidates" => f.end_of_candidates = true,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    Ok(f)
}
