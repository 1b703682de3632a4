//! glibc's thread caches and fast bins off for the server process.
//!
//! glibc keeps freed small blocks in per-thread caches (tcache: up to 7 blocks per size class
//! per thread) and in fast bins before they rejoin the arena. `malloc_trim`, which the reclaim
//! pass calls after a burst (see `tern_server::reclaim`), returns whole free pages of the
//! arenas to the system but cannot touch those blocks: to the arena they are in use. After a
//! wave of sessions they sit scattered over the pages the wave grew, each page they are on
//! stays resident, and RSS stays megabytes above its idle value although the heap is back to
//! the byte. Measured with `bench/soak.sh 2 500 40` (BENCHMARKS.md, "RSS back to idle"): RSS
//! after the load was 2.3-3.6 MiB above idle with glibc's defaults and within a few hundred
//! KiB of it with both off.
//!
//! The cost is on allocation-heavy work only (session set-up): the packet path allocates
//! nothing. It was measured with `tern lab` (handshakes per second, same section).
//!
//! The thread cache can only be turned off through the `GLIBC_TUNABLES` environment
//! variable, which glibc reads once, when the process starts. So `tern serve` and
//! `tern demo` start themselves again, once, with it set (the same process: `exec` keeps the
//! PID, the open descriptors and the arguments). A `GLIBC_TUNABLES` that already names the
//! thread cache is left as it is, and `TERN_GLIBC_MALLOC=default` keeps glibc's defaults.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Appended to `GLIBC_TUNABLES`.
const TUNABLES: &str = "glibc.malloc.tcache_count=0:glibc.malloc.mxfast=0";

/// Replaces this process with a fresh start of the same binary and arguments with
/// [`TUNABLES`] set, unless they (or any thread-cache setting) are already in place or the
/// user opted out. Returns only if no restart was needed or it failed (then glibc's
/// defaults stay, with a warning). Call it first thing in `main`, before any thread starts.
pub fn restart_with_tunables() {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    if std::env::var_os("TERN_GLIBC_MALLOC").is_some_and(|v| v == "default") {
        return;
    }
    let current = std::env::var_os("GLIBC_TUNABLES").unwrap_or_default();
    let Some(tunables) = with_tunables(&current) else {
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("tern"));
    let err = Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .exec();
    eprintln!(
        "tern: could not restart with glibc's thread caches off ({err}); \
         going on with glibc's defaults (RSS may stay above idle after bursts)"
    );
}

/// `GLIBC_TUNABLES` with [`TUNABLES`] added, or `None` when it already names the thread
/// cache (set by the user, or by the first start).
fn with_tunables(current: &std::ffi::OsStr) -> Option<OsString> {
    let text = current.to_string_lossy();
    if text.contains("glibc.malloc.tcache_count") {
        return None;
    }
    let mut out = current.to_os_string();
    if !out.is_empty() {
        out.push(":");
    }
    out.push(TUNABLES);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunables_are_added_once_and_a_users_setting_is_kept() {
        assert_eq!(with_tunables("".as_ref()), Some(TUNABLES.into()));
        assert_eq!(
            with_tunables("glibc.malloc.arena_max=2".as_ref()),
            Some(format!("glibc.malloc.arena_max=2:{TUNABLES}").into())
        );
        assert_eq!(with_tunables(TUNABLES.as_ref()), None);
        assert_eq!(with_tunables("glibc.malloc.tcache_count=3".as_ref()), None);
    }
}
