//! The OpenAPI 3.0 document of every route (`GET /v1/openapi.json`); a test reads
//! `router.rs` to check that it names each one.

use axum::http::StatusCode;
use axum::response::Response;

use crate::http::reply::json;

/// `GET /v1/openapi.json`.
pub(super) async fn openapi() -> Response {
    json(StatusCode::OK, openapi_doc().to_string())
}

/// The OpenAPI 3.0 document of every route the server has.
pub fn openapi_doc() -> serde_json::Value {
    use serde_json::json;
    let p = |name: &str, what: &str| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}, "description": what});
    let ok_json = |what: &str| json!({"description": what, "content": {"application/json": {}}});
    let status = |what: &str| json!({"description": what});
    let app = p("app", "application name");
    let stream = p("stream", "stream name");
    let id = p("id", "viewer id (from the viewer snapshots)");
    // Added apart: one more path in the document's json! passes the macro's recursion limit.
    let layer_ops = json!({
                "put": {"summary": "Pin a viewer of a simulcast stream to a layer (it moves at the layer's next keyframe)", "parameters": [id], "security": [{"bearer": []}],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["rid"], "properties": {"rid": {"type": "string", "description": "the layer's RID, as the stream snapshot's layers give it"}}}}}},
                    "responses": {"204": status("pinned"), "400": status("not {\"rid\": …}, or a layer the stream does not have (the message names its layers)"), "404": status("no such viewer"), "401": status("API token required")}},
                "delete": {"summary": "Unpin a viewer: its bandwidth estimate chooses its layer again", "parameters": [id], "security": [{"bearer": []}],
                    "responses": {"204": status("unpinned"), "404": status("no such viewer"), "401": status("API token required")}}});
    let mut doc = json!({
        "openapi": "3.0.3",
        "info": {"title": "tern", "version": env!("CARGO_PKG_VERSION"),
                 "description": "tern's management API, WHEP/WHIP endpoints, metrics and pages."},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": {
            "/v1/openapi.json": {"get": {"summary": "This document", "responses": {"200": ok_json("OpenAPI document")}}},
            "/v1/apps": {"get": {"summary": "Applications and their streams", "security": [{"bearer": []}],
                "responses": {"200": ok_json("list of {name, streams}"), "401": status("API token required")}}},
            "/v1/streams": {"get": {"summary": "Every stream: cached snapshot and live counters", "security": [{"bearer": []}],
                "responses": {"200": ok_json("list of streams"), "401": status("API token required")}}},
            "/v1/streams/{app}/{stream}": {"get": {"summary": "One stream", "parameters": [app, stream], "security": [{"bearer": []}],
                "responses": {"200": ok_json("the stream"), "404": status("no such stream"), "401": status("API token required")}}},
            "/v1/streams/{app}/{stream}/viewers": {"get": {"summary": "Cached snapshots of a stream's viewers", "parameters": [app, stream], "security": [{"bearer": []}],
                "responses": {"200": ok_json("list of viewer snapshots"), "404": status("no such stream"), "401": status("API token required")}}},
            "/v1/streams/{app}/{stream}/publisher": {
                "get": {"summary": "The stream's publisher: cached snapshot", "parameters": [app, stream], "security": [{"bearer": []}],
                    "responses": {"200": ok_json("publisher snapshot"), "404": status("no such stream or no publisher"), "401": status("API token required")}},
                "delete": {"summary": "Kick the stream's publisher", "parameters": [app, stream], "security": [{"bearer": []}],
                    "responses": {"204": status("kicked"), "404": status("no such stream or no publisher"), "401": status("API token required")}}},
            "/v1/cluster": {"get": {"summary": "This cluster node, Redis' state, the node registry and the origin map", "security": [{"bearer": []}],
                "responses": {"200": ok_json("{enabled, node, redis, redirect, nodes, origins, pulling, redis_commands, view_builds}"), "401": status("API token required")}}},
            "/v1/publishers": {"get": {"summary": "Cached snapshots of every publisher (WHIP, RTMP)", "security": [{"bearer": []}],
                "responses": {"200": ok_json("list of publisher snapshots"), "401": status("API token required")}}},
            "/v1/turn/allocations": {"get": {"summary": "Cached snapshots of the built-in TURN server's allocations", "security": [{"bearer": []}],
                "responses": {"200": ok_json("list of allocation snapshots"), "401": status("API token required")}}},
            "/v1/turn/allocations/{id}": {"get": {"summary": "A TURN allocation's cached snapshot", "parameters": [p("id", "allocation id")], "security": [{"bearer": []}],
                "responses": {"200": ok_json("allocation snapshot"), "404": status("no such allocation"), "401": status("API token required")}}},
            "/v1/viewers/{id}": {
                "get": {"summary": "A viewer's cached snapshot with its live figures (live: estimate_bps, rtt_ms, loss, nacks, retransmits, bytes_sent, retransmitted_bytes, nacks_ignored, twcc_parsed, twcc_dropped, layer, video_paused)", "parameters": [id], "security": [{"bearer": []}],
                    "responses": {"200": ok_json("viewer snapshot with live figures"), "404": status("no such viewer"), "401": status("API token required")}},
                "delete": {"summary": "Kick a viewer", "parameters": [id], "security": [{"bearer": []}],
                    "responses": {"204": status("kicked"), "404": status("no such viewer"), "401": status("API token required")}}},
            "/v1/events": {"get": {"summary": "Event stream (WebSocket): one JSON object per event, a cached snapshot plus type, stream, time",
                "parameters": [
                    {"name": "type", "in": "query", "required": false, "schema": {"type": "string"},
                     "description": "comma-separated: viewer.joined, viewer.connected, viewer.left, viewer.layer, viewer.video_paused, viewer.video_resumed, stream.changed, publisher.joined, publisher.live, publisher.left, publisher.warning, allocation.created, allocation.closed, recording.started, recording.segment, recording.stopped, source.changed, source.error"},
                    {"name": "stream", "in": "query", "required": false, "schema": {"type": "string"}, "description": "app/stream"}],
                "security": [{"bearer": []}],
                "responses": {"101": status("switching to WebSocket"), "400": status("not a WebSocket request"), "401": status("API token required")}}},
            "/v1/stats/current": {"get": {"summary": "Engine counters (OvenMediaEngine's envelope)", "responses": {"200": ok_json("counters")}}},
            "/v1/memory": {"get": {"summary": "Memory pools and allocator totals; ?format=dd for text",
                "responses": {"200": ok_json("pools")}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "security": [{"bearer": []}],
                "responses": {"200": {"description": "text exposition format", "content": {"text/plain": {}}}, "401": status("API token required")}}},
            "/dashboard": {"get": {"summary": "Dashboard page", "responses": {"200": {"description": "HTML", "content": {"text/html": {}}}}}},
            "/": {"get": {"summary": "Stream directory: a card per live stream (thumbnail, viewers, codec, resolution, bitrate), refreshed every 5 s; ?format=json gives its data (open, from counters and cached snapshots)",
                "parameters": [{"name": "format", "in": "query", "required": false, "schema": {"type": "string", "enum": ["json"]}, "description": "json: the directory's data"}],
                "responses": {"200": {"description": "HTML, or JSON with ?format=json", "content": {"text/html": {}, "application/json": {}}}}}},
            "/{app}/{stream}": {"get": {"summary": "Player page: WebRTC (WHEP), or LL-HLS with ?mode=hls (?mode=webrtc never falls back); ?layer=RID pins a simulcast layer; a figures line", "parameters": [app, stream],
                "responses": {"200": {"description": "HTML", "content": {"text/html": {}}}}}},
            "/{app}/{stream}/whep": {
                "post": {"summary": "WHEP: SDP offer in, answer out", "parameters": [app, stream],
                    "requestBody": {"content": {"application/sdp": {}}},
                    "responses": {"201": {"description": "answer", "content": {"application/sdp": {}}},
                        "400": status("malformed offer"), "401": status("token"), "404": status("no such stream"),
                        "409": status("not live"), "415": status("not application/sdp"),
                        "307": status("cluster.redirect: served by the least-loaded node (Location)"),
                        "422": status("offer cannot be served"), "503": status("too many viewers, or a cluster pull failed")}},
                "head": {"summary": "Liveness probe", "parameters": [app, stream],
                    "responses": {"200": status("live"), "404": status("no such stream"), "409": status("not live")}},
                "options": {"summary": "CORS preflight", "parameters": [app, stream], "responses": {"204": status("allowed")}}},
            "/{app}/{stream}/whep/{session}": {
                "patch": {"summary": "Trickle ICE or ICE restart", "parameters": [app, stream, p("session", "session id")],
                    "responses": {"204": status("trickled"), "200": status("ICE restarted"), "404": status("no such session"),
                        "400": status("malformed sdpfrag"), "415": status("not application/trickle-ice-sdpfrag"),
                        "412": status("ETag mismatch"), "428": status("If-Match required")}},
                "delete": {"summary": "End a viewer", "parameters": [app, stream, p("session", "session id")],
                    "responses": {"200": status("ended"), "404": status("no such session")}},
                "options": {"summary": "CORS preflight", "parameters": [app, stream, p("session", "session id")], "responses": {"204": status("allowed")}}},
            "/{app}/{stream}/{file}": {"get": {"summary": "LL-HLS: index.m3u8 (admission, then the multivariant playlist naming the session's media playlist), media.m3u8 (blocking reload with _HLS_msn/_HLS_part), init{v}.mp4, {msn}.m4s (segment), {msn}.{part}.m4s (part); every URI after index.m3u8 carries ?session=",
                "parameters": [app, stream, p("file", "index.m3u8, media.m3u8, init{v}.mp4, {msn}.m4s or {msn}.{part}.m4s"),
                    {"name": "session", "in": "query", "required": false, "schema": {"type": "string"}, "description": "the session token (all but index.m3u8)"},
                    {"name": "_HLS_msn", "in": "query", "required": false, "schema": {"type": "integer"}, "description": "media.m3u8: block until this segment (or its part) exists"},
                    {"name": "_HLS_part", "in": "query", "required": false, "schema": {"type": "integer"}, "description": "media.m3u8: the part of _HLS_msn to wait for"}],
                "responses": {"200": {"description": "playlist or fMP4", "content": {"application/vnd.apple.mpegurl": {}, "video/mp4": {}}},
                    "400": status("_HLS_msn too far ahead or malformed"), "401": status("token"), "403": status("no, unknown or expired session"),
                    "404": status("no such stream or resource"), "409": status("not live, or not H264"), "429": status("too many sessions from this address"),
                    "503": status("not ready yet, or too many sessions")}}},
            "/{app}/{stream}/whip": {
                "post": {"summary": "WHIP: publish", "parameters": [app, stream],
                    "requestBody": {"content": {"application/sdp": {}}},
                    "responses": {"201": {"description": "answer", "content": {"application/sdp": {}}},
                        "400": status("malformed offer"), "401": status("token"), "404": status("no such stream"),
                        "409": status("already published"), "415": status("not application/sdp"), "422": status("no H264/Opus")}},
                "options": {"summary": "CORS preflight", "parameters": [app, stream], "responses": {"204": status("allowed")}}},
            "/{app}/{stream}/whip/{session}": {
                "delete": {"summary": "Stop publishing", "parameters": [app, stream, p("session", "session id")],
                    "responses": {"200": status("ended"), "404": status("no such session")}},
                "patch": {"summary": "Trickle ICE or ICE restart", "parameters": [app, stream, p("session", "session id")],
                    "responses": {"204": status("trickled"), "200": status("ICE restarted"), "404": status("no such session"),
                        "400": status("malformed sdpfrag"), "415": status("not application/trickle-ice-sdpfrag"),
                        "412": status("ETag mismatch"), "428": status("If-Match required"), "422": status("restart refused")}},
                "options": {"summary": "CORS preflight", "parameters": [app, stream, p("session", "session id")], "responses": {"204": status("allowed")}}}
        }
    });
    doc["paths"]["/v1/viewers/{id}/layer"] = layer_ops;
    doc["paths"]["/assets/hls.min.js"] = json!({"get": {
        "summary": "The hls.js built into tern (the player's LL-HLS fallback)",
        "responses": {"200": {"description": "JavaScript, cached a week", "content": {"text/javascript": {}}},
            "304": status("not modified (ETag)")}}});
    doc["paths"]["/v1/health"] = json!({"get": {
        "summary": "Health probe (no API token): {\"status\": \"ok\", \"sessions\": N}, N the viewer and publisher sessions held",
        "responses": {"200": ok_json("serving"),
            "503": ok_json("draining: {\"status\": \"draining\", \"sessions\": N, \"deadline_s\": S}")}}});
    recordings(&mut doc["paths"]);
    forwards(&mut doc["paths"]);
    thumbnail(&mut doc["paths"]);
    drain(&mut doc["paths"]);
    config(&mut doc["paths"]);
    doc
}

/// The configuration API (`config.rs`), added apart for the `json!` recursion limit.
fn config(paths: &mut serde_json::Value) {
    use serde_json::json;
    let p = |name: &str, what: &str| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}, "description": what});
    let status = |what: &str| json!({"description": what});
    let js = |what: &str| json!({"description": what, "content": {"application/json": {}}});
    let object = |what: &str| json!({"required": true, "content": {"application/json": {"schema": {"type": "object", "description": what}}}});
    let refused = || {
        json!({
        "401": status("API token required"),
        "409": js("tern runs without --config: no file to change"),
        "422": js("refused, nothing changed: {\"error\", \"problems\": [{\"key\", \"message\"}]} (every problem, by key path)"),
        "500": js("the file could not be written: nothing changed")})
    };
    let applied = "what changed: {\"status\": \"reloaded\", \"trigger\", \"restart_required\": [keys kept until a restart], \"apps\": {\"added\", \"removed\", \"changed\"}, \"sources\": {...}}";
    let with = |mut r: serde_json::Value, extra: serde_json::Value| {
        if let (Some(r), Some(e)) = (r.as_object_mut(), extra.as_object()) {
            r.extend(e.clone());
        }
        r
    };
    paths["/v1/config"] = json!({"get": {
        "summary": "The configuration in force as JSON (secrets shown as \"***\"), and \"file\": its file or null",
        "security": [{"bearer": []}],
        "responses": {"200": js("the configuration"), "401": status("API token required")}}});
    paths["/v1/config/reload"] = json!({"post": {
        "summary": "Re-read the configuration file and put it in force (as SIGHUP and the file watcher do); keys that need a restart keep their running values and are named",
        "security": [{"bearer": []}],
        "responses": with(refused(), json!({"200": js(applied)}))}});
    paths["/v1/config/apps/{name}"] = json!({
        "put": {"summary": "Add or replace an [[app]] (a JSON object with its keys): checked as the file is, written into the file (comments kept), put in force",
            "security": [{"bearer": []}], "parameters": [p("name", "application name")],
            "requestBody": object("the [[app]] keys"),
            "responses": with(refused(), json!({"201": js(applied), "200": js(applied), "400": js("the body is not JSON")}))},
        "delete": {"summary": "Remove an app: its viewers and publishers end (reason app_removed)",
            "security": [{"bearer": []}], "parameters": [p("name", "application name")],
            "responses": with(refused(), json!({"204": status("removed"), "404": js("no such app in the file")}))}});
    paths["/v1/config/apps/{app}/sources/{stream}"] = json!({
        "put": {"summary": "Add or replace an RTSP camera ([[app.source]], a JSON object with its keys; stream from the path): watchable at once",
            "security": [{"bearer": []}], "parameters": [p("app", "application name"), p("stream", "stream name")],
            "requestBody": object("the [[app.source]] keys"),
            "responses": with(refused(), json!({"201": js(applied), "200": js(applied), "400": js("the body is not JSON"), "404": js("no such app")}))},
        "delete": {"summary": "Remove a camera: its stream's viewers end (reason source_removed)",
            "security": [{"bearer": []}], "parameters": [p("app", "application name"), p("stream", "stream name")],
            "responses": with(refused(), json!({"204": status("removed"), "404": js("no such source")}))}});
}

/// `POST /v1/drain` (`api.rs`), added apart for the `json!` recursion limit.
fn drain(paths: &mut serde_json::Value) {
    use serde_json::json;
    let status = |what: &str| json!({"description": what});
    paths["/v1/drain"] = json!({"post": {
        "summary": "Drain the node for an upgrade: no new publishers or viewers (503, or 307 to a node that is not draining in a cluster), /v1/health answers 503, open sessions go on until they end or the deadline, then the process exits 0; {\"cancel\": true} takes the node back",
        "security": [{"bearer": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object",
            "properties": {"deadline_s": {"type": "integer", "minimum": 0, "maximum": 86400, "description": "seconds open sessions get"},
                "cancel": {"type": "boolean", "description": "true: stop draining"}}}}}},
        "responses": {"202": {"description": "draining: {\"status\": \"draining\", \"deadline_s\": S, \"sessions\": N}", "content": {"application/json": {}}},
            "200": {"description": "cancelled: {\"status\": \"ok\", \"sessions\": N}", "content": {"application/json": {}}},
            "400": status("neither {\"deadline_s\": N} nor {\"cancel\": true}"), "401": status("API token required")}}});
}

/// `thumb.jpg` (`thumb.rs`), added apart for the `json!` recursion limit.
fn thumbnail(paths: &mut serde_json::Value) {
    use serde_json::json;
    let p = |name: &str, what: &str| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}, "description": what});
    let status = |what: &str| json!({"description": what});
    paths["/{app}/{stream}/thumb.jpg"] = json!({"get": {
        "summary": "The stream's latest keyframe as a JPEG (decoded at most once per keyframe); the play admission applies, with action thumbnail",
        "parameters": [p("app", "application name"), p("stream", "stream name"),
            {"name": "width", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1}, "description": "width in pixels (16-3840, aspect kept); default the stream's"},
            {"name": "token", "in": "query", "required": false, "schema": {"type": "string"}, "description": "the app's token or a JWT, as for playback"}],
        "responses": {"200": {"description": "the picture; ETag names the keyframe and width, Cache-Control the GOP", "content": {"image/jpeg": {}}},
            "304": status("If-None-Match names the current picture"), "400": status("a bad width"),
            "401": status("token required"), "403": status("admission refused"), "404": status("no such stream, or not live"),
            "422": status("the keyframe does not decode"), "503": status("no keyframe arrived in time; Retry-After")}}});
}

/// The recordings API (`recordings.rs`), added apart for the `json!` recursion limit.
fn recordings(paths: &mut serde_json::Value) {
    use serde_json::json;
    let p = |name: &str, what: &str| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}, "description": what});
    let status = |what: &str| json!({"description": what});
    let (app, stream) = (p("app", "application name"), p("stream", "stream name"));
    let q = |name: &str, what: &str| json!({"name": name, "in": "query", "required": false, "schema": {"type": "string"}, "description": what});
    paths["/v1/streams/{app}/{stream}/recordings"] = json!({"post": {
        "summary": "Start recording the stream to fragmented MP4 files ([app.record] says where); the file is cut every record.segment_s at a keyframe",
        "parameters": [app, stream], "security": [{"bearer": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["id"],
            "properties": {"id": {"type": "string", "description": "the recording's name: 1-64 of [A-Za-z0-9._-]"}}}}}},
        "responses": {"201": {"description": "started; Location names it", "content": {"application/json": {}}},
            "400": status("not {\"id\": …}, or a bad id"), "404": status("no such stream"),
            "409": status("the stream is not live, or that id records it already"), "401": status("API token required")}}});
    paths["/v1/streams/{app}/{stream}/recordings/{id}"] = json!({"delete": {
        "summary": "Stop a recording: its file is finished (duration, random-access index)",
        "parameters": [app, stream, p("id", "recording id")], "security": [{"bearer": []}],
        "responses": {"204": status("stopped"), "404": status("no such stream or recording"), "401": status("API token required")}}});
    paths["/v1/recordings"] = json!({"get": {
        "summary": "Recorded files: path, app, stream, file, url, start, duration_s, bytes, codecs (a file cut short by a crash: up to its last fragment)",
        "parameters": [q("app", "only this app"), q("stream", "only this stream")], "security": [{"bearer": []}],
        "responses": {"200": {"description": "list of files", "content": {"application/json": {}}}, "401": status("API token required")}}});
    paths["/v1/recordings/{app}/{stream}/{file}"] = json!({"get": {
        "summary": "One recorded file (video/mp4), with single-range Range requests for seeking players",
        "parameters": [app, stream, p("file", "the file name, as the listing gives it"),
            {"name": "Range", "in": "header", "required": false, "schema": {"type": "string"}, "description": "bytes=a-b, bytes=a- or bytes=-n"}],
        "security": [{"bearer": []}],
        "responses": {"200": {"description": "the file", "content": {"video/mp4": {}}}, "206": status("the range asked for (Content-Range)"),
            "404": status("no such file"), "416": status("range not satisfiable"), "401": status("API token required")}}});
}

/// The forwards API (`forwards.rs`), added apart for the `json!` recursion limit.
fn forwards(paths: &mut serde_json::Value) {
    use serde_json::json;
    let p = |name: &str, what: &str| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}, "description": what});
    let status = |what: &str| json!({"description": what});
    let (app, stream) = (p("app", "application name"), p("stream", "stream name"));
    let q = |name: &str, what: &str| json!({"name": name, "in": "query", "required": false, "schema": {"type": "string"}, "description": what});
    paths["/v1/streams/{app}/{stream}/forwards"] = json!({"post": {
        "summary": "Send the live stream on to another server (RTMP, RTMPS, SRT caller) until it is deleted or the stream ends; reconnects with backoff (1 s doubling to 30 s)",
        "parameters": [app, stream], "security": [{"bearer": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["url"],
            "properties": {"url": {"type": "string", "description": "rtmp://HOST[:PORT]/APP/KEY, rtmps://..., or srt://HOST:PORT?streamid=...&passphrase=...&latency=MS; %app and %stream are replaced"},
                "tls_verify": {"type": "boolean", "description": "check an rtmps:// receiver's certificate (default true)"}}}}}},
        "responses": {"201": {"description": "added: {id, url (key hidden), state}; Location names it", "content": {"application/json": {}}},
            "400": status("not {\"url\": …}"), "404": status("no such stream"), "409": status("the stream is not live"),
            "422": status("a URL no forward takes (the message says why)"), "503": status("the server's forward limit"),
            "401": status("API token required")}}});
    paths["/v1/streams/{app}/{stream}/forwards/{id}"] = json!({"delete": {
        "summary": "Stop a forward",
        "parameters": [app, stream, p("id", "forward id")], "security": [{"bearer": []}],
        "responses": {"204": status("stopped"), "404": status("no such forward"), "401": status("API token required")}}});
    paths["/v1/forwards"] = json!({"get": {
        "summary": "Forwards: id, app, stream, url (key hidden), state (connecting, live, retrying, failed), since (Unix ms), bytes, reconnects, last_error, origin (config or api)",
        "parameters": [q("app", "only this app"), q("stream", "only this stream")], "security": [{"bearer": []}],
        "responses": {"200": {"description": "list of forwards", "content": {"application/json": {}}}, "401": status("API token required")}}});
}
