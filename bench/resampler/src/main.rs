//! 44.1 → 48 kHz stereo in 1024-frame chunks (one AAC frame each, as tern feeds it), 600 s of
//! audio per resampler and round, three rounds alternating: microseconds of CPU per second of
//! audio for tern's sinc filter (the parameters of `tern_rtc::transcode::resampler_filter`),
//! a longer and finer one (128 taps, 256 steps), and rubato's FFT resampler; with each sinc
//! filter's cut-off and table size.
#![forbid(unsafe_code)]

use audioadapter_buffers::direct::InterleavedSlice;
use rubato::{
    Async, Fft, FixedAsync, FixedSync, Resampler, SincInterpolationParameters,
    SincInterpolationType, WindowFunction,
};
use std::time::Instant;

const SECONDS: usize = 600;

/// Seconds of CPU per second of audio.
fn cost(r: &mut dyn Resampler<f32>) -> f64 {
    let input: Vec<f32> = (0..2 * 1024)
        .map(|i| ((i / 2) as f32 * 0.0627).sin() * 0.1)
        .collect();
    let mut output = vec![0f32; 2 * r.output_frames_max()];
    let t = Instant::now();
    for _ in 0..SECONDS * 44_100 / 1024 {
        let n = r.output_frames_next();
        let i = InterleavedSlice::new(&input[..], 2, 1024).expect("input");
        let mut o = InterleavedSlice::new_mut(&mut output[..2 * n], 2, n).expect("output");
        r.process_into_buffer(&i, &mut o, None).expect("resample");
    }
    t.elapsed().as_secs_f64() / SECONDS as f64
}

fn main() {
    let filters = [(64, 128), (128, 256)];
    for (taps, steps) in filters {
        let cutoff: f32 = rubato::calculate_cutoff(taps, WindowFunction::BlackmanHarris2);
        println!(
            "sinc {taps} taps x {steps} steps: cut-off {:.0} Hz at 44.1 kHz, table {} KiB",
            cutoff * 22_050.0,
            taps * steps * 4 / 1024
        );
    }
    for round in 1..=3 {
        let mut line = format!("round {round}:");
        for (taps, steps) in filters {
            let filter = SincInterpolationParameters::new(taps, WindowFunction::BlackmanHarris2)
                .oversampling_factor(steps)
                .interpolation(SincInterpolationType::Linear);
            let mut sinc = Async::<f32>::new_sinc(
                48_000.0 / 44_100.0,
                1.0,
                &filter,
                1024,
                2,
                FixedAsync::Input,
            )
            .expect("sinc");
            let s = cost(&mut sinc);
            line += &format!(
                " sinc {taps}x{steps} {:.0} us ({:.2} %),",
                s * 1e6,
                s * 100.0
            );
        }
        let mut fft = Fft::<f32>::new(44_100, 48_000, 1024, 2, FixedSync::Input).expect("fft");
        let f = cost(&mut fft);
        line += &format!(
            " fft {:.0} us ({:.2} %) of CPU per s of audio",
            f * 1e6,
            f * 100.0
        );
        println!("{line}");
    }
}
