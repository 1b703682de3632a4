//! RSA certificates made by the `openssl` command, for the tests of RSA peers
//! (`rsa_client.rs`, `openssl_rsa.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `openssl args`; panics with its stderr if it fails.
pub fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh self-signed RSA-`bits` certificate for `CN=tern-{name}` (SHA-256, 2 days) made
/// by `openssl req -x509 -newkey rsa:BITS` in `dir`: (its PEM key, the certificate in
/// `form`, `"PEM"` or `"DER"`).
pub fn self_signed(dir: &Path, name: &str, bits: u32, form: &str) -> (PathBuf, PathBuf) {
    let key = dir.join(format!("{name}-{bits}-key.pem"));
    let cert = dir.join(format!("{name}-{bits}-cert.{}", form.to_lowercase()));
    let s = |p: &Path| p.to_string_lossy().into_owned();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        &format!("rsa:{bits}"),
        "-nodes",
        "-sha256",
        "-days",
        "2",
        "-subj",
        &format!("/CN=tern-{name}"),
        "-keyout",
        &s(&key),
        "-outform",
        form,
        "-out",
        &s(&cert),
    ]);
    (key, cert)
}
