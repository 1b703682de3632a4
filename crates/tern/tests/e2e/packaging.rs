//! The systemd unit in `packaging/` (issue 39): `systemd-analyze verify` accepts it, with the
//! binary path pointed at the one cargo built, and it keeps the properties the docs promise.

use std::process::Command;

#[test]
fn the_systemd_unit_verifies_and_keeps_its_promises() {
    let _slot = crate::common::slot();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let unit = std::fs::read_to_string(root.join("packaging/tern.service")).expect("unit");
    for line in [
        "DynamicUser=yes",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
        "NoNewPrivileges=yes",
        "LimitNOFILE=1048576",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "ExecStart=/usr/local/bin/tern serve --config /etc/tern/tern.toml",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
    let dir = std::env::temp_dir().join(format!("tern-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("tern.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/tern", env!("CARGO_BIN_EXE_tern")),
    )
    .expect("write unit");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian's systemd package)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {stderr}");
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze warned about the unit: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
