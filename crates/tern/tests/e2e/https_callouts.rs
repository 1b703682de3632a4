//! HTTPS callouts (issue 56): an admission webhook on `https://` whose self-signed
//! certificate `server.ca_file` names is called and obeyed (its close notifications too);
//! one whose certificate is not trusted is an error, and `on_error` decides. A `ca_file`
//! that does not load stops the start naming the key.

use crate::common;

use std::time::Duration;

use common::hook::{Hook, self_signed_tls};
use common::{
    Server, config_file, http_delete, http_get, http_request_with, silent_offer, whep_offer,
};
use serde_json::json;

fn post(server: &Server, path: &str, sdp: &str, bearer: Option<&str>) -> common::HttpResponse {
    let auth = bearer.map(|t| format!("Bearer {t}"));
    let extra: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    http_request_with(
        server.http,
        "POST",
        path,
        &extra,
        Some("application/sdp"),
        sdp.as_bytes(),
    )
    .expect("POST")
}

#[test]
fn an_https_webhook_is_trusted_through_ca_file_and_an_untrusted_one_is_an_error() {
    let _slot = crate::common::slot();
    let (tls, pem) = self_signed_tls();
    let hook = Hook::start_tls(tls, |v| {
        if v["token"] == "bad" {
            json!({"allow": false, "reason": "not over TLS either"})
        } else {
            json!({"allow": true})
        }
    });
    // Another self-signed certificate, which nothing trusts.
    let (other_tls, _) = self_signed_tls();
    let untrusted = Hook::start_tls(other_tls, |_| json!({"allow": true}));
    let dir = std::env::temp_dir().join(format!("tern-test-{}-https-hook", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &pem).expect("write ca");
    assert!(hook.url().starts_with("https://127.0.0.1:"));
    let cfg = config_file(
        "https-hook",
        &format!(
            "[server]\nca_file = \"{}\"\n\n\
             [[app]]\nname = \"live\"\n\n[app.admission]\nurl = \"{}\"\n\n\
             [[app]]\nname = \"strict\"\nstreams = [\"cam\"]\n\n[app.admission]\nurl = \"{u}\"\n\n\
             [[app]]\nname = \"lenient\"\nstreams = [\"cam\"]\n\n[app.admission]\nurl = \"{u}\"\non_error = \"allow\"\n",
            ca.display(),
            hook.url(),
            u = untrusted.url()
        ),
    );
    let server = Server::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);

    // Trusted through ca_file: asked, and obeyed either way.
    let r = post(&server, "/live/demo/whep", &whep_offer(), Some("good"));
    assert_eq!(r.status, 201, "{}", r.text());
    let play = hook
        .wait_for(Duration::from_secs(1), |v| v["action"] == "play")
        .expect("the webhook was asked over HTTPS");
    assert_eq!(play["token"], "good");
    assert_eq!(play["stream"], "demo");
    let r2 = post(&server, "/live/demo/whep", &whep_offer(), Some("bad"));
    assert_eq!((r2.status, r2.text().trim()), (403, "not over TLS either"));
    // The admitted viewer leaves: its close notification goes out over HTTPS too.
    let loc = r.header("location").expect("Location").to_string();
    assert_eq!(http_delete(server.http, &loc).expect("DELETE").status, 200);
    let close = hook
        .wait_for(Duration::from_secs(5), |v| v["action"] == "close")
        .expect("a close notification over HTTPS");
    assert_eq!(close["session"], play["session"]);

    // Untrusted: an error, so on_error decides (deny by default, allow when set).
    let r = post(&server, "/strict/cam/whip", &silent_offer(), None);
    assert_eq!(r.status, 403, "{}", r.text());
    let text = r.text();
    assert!(
        text.contains("admission check failed") && text.contains("certificate"),
        "{text}"
    );
    let r = post(&server, "/lenient/cam/whip", &silent_offer(), None);
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(
        untrusted.seen().is_empty(),
        "the untrusted webhook got a request"
    );
    let metrics = http_get(server.http, "/metrics").expect("metrics").text();
    assert!(
        metrics.contains("tern_admission_total{action=\"publish\",result=\"error\"} 2"),
        "{metrics}"
    );
    if let Some(loc) = r.header("location") {
        let _ = http_delete(server.http, loc);
    }
    server.stop();

    // A ca_file that is not a certificate bundle stops the start, naming the key.
    std::fs::write(&ca, "not a certificate\n").expect("write");
    let e = Server::start_error(&cfg);
    assert!(
        e.starts_with("config key `server.ca_file`: ") && e.contains("holds no CERTIFICATE"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `on_segment_url` on `https://` (issue 56 point 4): the built-in clip recorded in 1 s files,
/// each finished file's JSON POSTed to a webhook whose self-signed certificate `ca_file`
/// names, over h2 to one that speaks only h2 (ALPN) and over HTTP/1.1 to one that speaks
/// only HTTP/1.1.
#[test]
fn segment_webhooks_go_out_over_https_in_h2_and_http1() {
    let _slot = crate::common::slot();
    let (tls, pem) = self_signed_tls();
    let dir = std::env::temp_dir().join(format!("tern-test-{}-https-segment", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &pem).expect("write ca");
    for (hook, version) in [
        (Hook::start_h2(tls.clone()), "HTTP/2.0"),
        (Hook::start_tls(tls.clone(), |_| json!({})), "HTTP/1.1"),
    ] {
        let files = dir.join(version.replace('/', "-"));
        let cfg = config_file(
            "https-segment",
            &format!(
                "[server]\nca_file = \"{}\"\n\n[[app]]\nname = \"live\"\n\n[app.record]\n\
                 enabled = true\nsegment_s = 1\npath = \"{}/%stream-%H%M%S\"\non_segment_url = \"{}\"\n",
                ca.display(),
                files.display(),
                hook.url()
            ),
        );
        let server = Server::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while hook.seen().len() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let seen = hook.seen();
        assert!(
            seen.len() >= 2,
            "{version}: {} segment webhooks in 15 s; log:\n{}",
            seen.len(),
            server.log_tail(30)
        );
        for s in &seen {
            assert_eq!(
                (&s["app"], &s["stream"]),
                (&json!("live"), &json!("demo")),
                "{s}"
            );
            let path = s["path"].as_str().expect("path");
            let size = std::fs::metadata(path).expect("the file named").len();
            assert_eq!(s["bytes"].as_u64(), Some(size), "{s}");
        }
        assert!(
            hook.versions().iter().all(|v| v == version),
            "{version}: {:?}",
            hook.versions()
        );
        server.stop();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
