//! Simulcast layer choice: once a second, for each simulcast stream this worker serves,
//! every viewer that is not pinned is pointed at the best layer sending now, and a viewer
//! waiting to move (its wanted layer differs from the one it is sent) gets the wanted
//! layer's keyframe asked for again. Encoders ignore keyframe requests that come too soon
//! after another (libwebrtc: 300 ms per sender, whatever the layer), so one request is not
//! enough; ingest still coalesces them to one per layer per 500 ms.

use std::time::Instant;

use tern_rtc::stream::MAX_LAYERS;

use super::Worker;
use crate::media::table::entry_in;

impl Worker {
    /// Points stream `stream`'s viewers at their layers (see the module).
    pub(super) fn choose_layers(&mut self, stream: usize, now: Instant) {
        let best = self.streams[stream].stream.pick_layer(None);
        // Bit l: some viewer waits for a keyframe of layer l.
        let mut wanted = 0u8;
        for i in 0..self.streams[stream].viewers.len() {
            let id = self.streams[stream].viewers[i];
            let Some(e) = entry_in(&mut self.slots, id) else {
                continue;
            };
            let v = &mut e.viewer;
            if !v.pinned() && v.target_layer() != best {
                v.set_layer(best, false);
            }
            if v.video_layer().is_some_and(|l| l != v.target_layer()) {
                wanted |= 1 << v.target_layer();
            }
        }
        for layer in 0..MAX_LAYERS as u8 {
            if wanted & 1 << layer != 0 {
                self.ask_keyframe(stream, layer, now);
            }
        }
    }
}
