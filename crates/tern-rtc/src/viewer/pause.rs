//! Pausing a viewer's video on a path narrower than its stream's only layer (a simulcast
//! viewer moves to a lower layer instead): the mechanics on [`Viewer`]. While paused no
//! video packet is sent (audio goes on, and so do retransmissions of audio); on resumption
//! the video restarts at the stream's next keyframe, its sequence numbers continuing where
//! they stopped, so the receiver sees no loss to NACK. The policy (when to pause, how the
//! path is probed while paused, when to resume) is the owner's.

use super::Viewer;

impl Viewer {
    /// Whether the viewer's video is paused.
    pub fn video_paused(&self) -> bool {
        self.video.is_some_and(|t| t.paused)
    }

    /// Pauses the video at once (see the module). Returns whether it was playing.
    pub fn pause_video(&mut self) -> bool {
        match self.video.as_mut() {
            Some(t) if !t.paused => {
                t.paused = true;
                t.hold = true;
                true
            }
            _ => false,
        }
    }

    /// Resumes paused video from the next keyframe of its layer. Returns whether it was
    /// paused.
    pub fn resume_video(&mut self) -> bool {
        match self.video.as_mut() {
            Some(t) if t.paused => {
                t.paused = false;
                t.target = t.layer;
                true
            }
            _ => false,
        }
    }
}
