//! The session layer on its own: a server started in this process (`Server::start` on
//! port 0), asked through `Core::begin_publish` / `Core::begin_play` as any surface asks,
//! with no protocol in between. Each refusal is the protocol-neutral `Refusal` every
//! surface maps once.

use std::net::SocketAddr;

use tern_server::session::{Core, Credentials, PlayAsk, Protocol, PublishAsk, Refusal};
use tern_server::{ListenArg, ServeOptions, Server, load_config};

/// A server with `live` (only its declared `cam`, token `t0k`), `open` (any name) and no
/// per-address exemption, so that loopback clients are limited too.
fn server() -> Server {
    let toml = "[limits]\nexempt = []\npending_sessions_per_ip = 2\n\n\
                [[app]]\nname = \"live\"\nstreams = [\"cam\"]\ndynamic = false\ntoken = \"t0k\"\n\n\
                [[app]]\nname = \"open\"\ndynamic = true\n";
    let path = std::env::temp_dir().join(format!(
        "tern-session-test-{}-{}.toml",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::write(&path, toml).expect("write config");
    let any: SocketAddr = ([127, 0, 0, 1], 0).into();
    let opts = ServeOptions {
        http: Some(any),
        media: Some(any),
        candidate: vec![[127, 0, 0, 1].into()],
        config: Some(path),
        rtmp: Some(ListenArg(None)),
        ..Default::default()
    };
    Server::start(load_config(&opts).expect("config"), &opts).expect("start")
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn client() -> SocketAddr {
    ([127, 0, 0, 1], 40000).into()
}

/// The same token offered for the app's token and to admission.
fn credentials(token: Option<&str>) -> Credentials {
    Credentials {
        app_token: token.map(str::to_string),
        token: token.map(str::to_string),
        query: String::new(),
    }
}

fn publish(app: &str, stream: &str, protocol: Protocol, token: Option<&str>) -> PublishAsk {
    PublishAsk {
        app: app.into(),
        stream: stream.into(),
        protocol,
        client: client(),
        credentials: credentials(token),
    }
}

fn play(app: &str, stream: &str, protocol: Protocol, token: Option<&str>) -> PlayAsk {
    PlayAsk {
        app: app.into(),
        stream: stream.into(),
        protocol,
        client: client(),
        credentials: credentials(token),
        session: None,
        from_node: false,
    }
}

fn block<T>(core: &Core, f: impl std::future::Future<Output = T>) -> T {
    core.runtime
        .get()
        .expect("the server's runtime")
        .block_on(f)
}

#[test]
fn publishing_is_refused_for_a_bad_name_an_unknown_app_and_a_wrong_token() {
    let s = server();
    let core = s.core().clone();
    let refusal = |ask| block(&core, core.begin_publish(ask)).err();
    assert!(matches!(
        refusal(publish("open", "a b", Protocol::Rtmp, None)),
        Some(Refusal::BadName(_))
    ));
    assert_eq!(
        refusal(publish("nosuch", "x", Protocol::Rtmp, None)),
        Some(Refusal::NotFound("nosuch/x".into()))
    );
    // An app that is not dynamic takes only its declared streams.
    assert_eq!(
        refusal(publish("live", "other", Protocol::Whip, Some("t0k"))),
        Some(Refusal::NotFound("live/other".into()))
    );
    for token in [None, Some("wrong")] {
        assert_eq!(
            refusal(publish("live", "cam", Protocol::Rtmp, token)),
            Some(Refusal::Unauthorized { app: "live".into() })
        );
    }
    assert_eq!(
        refusal(publish("live", "cam", Protocol::Rtmp, Some("t0k"))),
        None
    );
    s.shutdown();
}

#[test]
fn a_publisher_claims_its_stream_once_and_whip_counts_against_pending_sessions() {
    let s = server();
    let core = s.core().clone();
    // RTMP holds no pending-session permit (its connections are limited apart).
    let rtmp = block(
        &core,
        core.begin_publish(publish("open", "one", Protocol::Rtmp, None)),
    )
    .expect("rtmp admitted");
    assert!(rtmp.session().starts_with("rtmp-"), "{}", rtmp.session());
    let info = block(&core, rtmp.claim(&core)).expect("the stream is made");
    let again = block(&core, rtmp.claim(&core)).expect("claimed again");
    assert_eq!(info.index, again.index, "one stream per name");
    // WHIP publishers handshake on the media port: two permits per address here.
    let a = block(
        &core,
        core.begin_publish(publish("open", "two", Protocol::Whip, None)),
    );
    let b = block(
        &core,
        core.begin_publish(publish("open", "three", Protocol::Whip, None)),
    );
    let c = block(
        &core,
        core.begin_publish(publish("open", "four", Protocol::Whip, None)),
    );
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    assert!(matches!(c, Err(Refusal::TooMany(_))), "{c:?}");
    drop(a);
    let d = block(
        &core,
        core.begin_publish(publish("open", "four", Protocol::Whip, None)),
    );
    assert!(d.is_ok(), "a dropped grant gives its permit back: {d:?}");
    s.shutdown();
}

#[test]
fn playing_needs_the_stream_its_token_and_media() {
    let s = server();
    let core = s.core().clone();
    let begin = |ask| block(&core, core.begin_play(ask));
    assert_eq!(
        begin(play("live", "nosuch", Protocol::Whep, Some("t0k"))).err(),
        Some(Refusal::NotFound("live/nosuch".into()))
    );
    assert_eq!(
        begin(play("live", "cam", Protocol::Ome, None)).err(),
        Some(Refusal::Unauthorized { app: "live".into() })
    );
    // A node's own request skips the token (it proved itself with the cluster secret).
    let mut node = play("live", "cam", Protocol::Whep, None);
    node.from_node = true;
    assert!(begin(node).is_ok());
    let p = begin(play("live", "cam", Protocol::Hls, Some("t0k"))).expect("found");
    assert!(!p.live());
    assert_eq!(
        block(&core, p.admit(&core)).err(),
        Some(Refusal::NotLive("live/cam".into()))
    );
    s.shutdown();
}
