//! The configuration API (issue 53): `GET /v1/config`, `POST /v1/config/reload`, and the
//! apps and cameras of the file: `PUT`/`DELETE /v1/config/apps/{name}` and
//! `PUT`/`DELETE /v1/config/apps/{app}/sources/{stream}`. Each change goes through
//! [`crate::reload::Reload`]: the same check as the file's, written back into the file with
//! its comments kept, then put in force. Answers are JSON; a refused change is `422` with
//! every problem (`{"error", "problems": [{"key", "message"}]}`), `409` without a
//! configuration file, `500` when the file cannot be written (nothing changed).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::config::{ConfigError, valid_name};
use crate::http::state::AppState;
use crate::reload::{Applied, Refused, Reload, Trigger, problems_json};

/// A JSON answer.
fn reply(status: StatusCode, body: &serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The error answer of a refused reload or edit.
fn refused(r: &Refused) -> Response {
    match r {
        Refused::Invalid(problems) => reply(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"error": r.to_string(), "problems": problems_json(problems)}),
        ),
        Refused::NoFile => reply(StatusCode::CONFLICT, &json!({"error": r.to_string()})),
        Refused::NotFound(_) => reply(StatusCode::NOT_FOUND, &json!({"error": r.to_string()})),
        Refused::Write { .. } => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({"error": format!("{r}; nothing changed")}),
        ),
        Refused::Stopped => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"error": r.to_string()}),
        ),
    }
}

/// An answer that ends a handler early (boxed: a `Response` is large for an `Err`).
type Early = Box<Response>;

/// The reloader, or the answer that there is none (the server is stopping).
fn reloader(st: &AppState) -> Result<Arc<Reload>, Early> {
    st.reload
        .clone()
        .ok_or_else(|| Box::new(refused(&Refused::Stopped)))
}

/// Runs `f` on a blocking thread (file reads and writes, key files, clips).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Refused> + Send + 'static,
) -> Result<T, Early> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|e| Box::new(refused(&e))),
        Err(_) => Err(Box::new(refused(&Refused::Stopped))),
    }
}

/// `GET /v1/config`: the configuration in force, secrets redacted, and its file.
pub(super) async fn get(State(st): State<Arc<AppState>>) -> Response {
    let mut body = st.config().redacted_json();
    if let Some(o) = body.as_object_mut() {
        let file = st
            .reload
            .as_ref()
            .and_then(|r| r.path())
            .map(|p| p.display().to_string());
        o.insert("file".into(), json!(file));
    }
    reply(StatusCode::OK, &body)
}

/// `POST /v1/config/reload`: re-reads the file. `200` with what changed and which keys
/// wait for a restart; `422` with every problem (nothing changed); `409` with no file.
pub(super) async fn reload(State(st): State<Arc<AppState>>) -> Response {
    let r = match reloader(&st) {
        Ok(r) => r,
        Err(e) => return *e,
    };
    match blocking(move || r.reload(Trigger::Api)).await {
        Ok(a) => reply(StatusCode::OK, &a.json(Trigger::Api)),
        Err(e) => *e,
    }
}

/// The body of a `PUT`: a JSON object.
fn object(body: &[u8]) -> Result<serde_json::Value, Early> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(Box::new(reply(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"error": "the body must be a JSON object"}),
        ))),
        Err(e) => Err(Box::new(reply(
            StatusCode::BAD_REQUEST,
            &json!({"error": format!("the body is not JSON: {e}")}),
        ))),
    }
}

/// A name from the path that breaks the name rule: `422`.
fn check_name(what: &str, name: &str) -> Result<(), Early> {
    if valid_name(name) {
        return Ok(());
    }
    Err(Box::new(reply(
        StatusCode::UNPROCESSABLE_ENTITY,
        &json!({"error": format!("{what} name {name:?} {}", crate::config::NAME_RULE)}),
    )))
}

/// The answer of an edit: `201` when it made the entry, `200` when it replaced it.
fn edited(created: bool, applied: &Applied) -> Response {
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    reply(status, &applied.json(Trigger::Edit))
}

/// `PUT /v1/config/apps/{name}` (a JSON object with the `[[app]]` keys): `201` made, `200`
/// replaced.
pub(super) async fn put_app(
    State(st): State<Arc<AppState>>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let run = async {
        check_name("app", &name)?;
        let app = object(&body)?;
        let r = reloader(&st)?;
        blocking(move || {
            r.edit(|f| {
                f.put_app(&name, &app)
                    .map_err(|e| Refused::Invalid(vec![e]))
            })
        })
        .await
    };
    match run.await {
        Ok((created, applied)) => edited(created, &applied),
        Err(e) => *e,
    }
}

/// `DELETE /v1/config/apps/{name}`: `204`; its sessions end with `app_removed`.
pub(super) async fn delete_app(
    State(st): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Response {
    let run = async {
        let r = reloader(&st)?;
        blocking(move || {
            r.edit(|f| {
                f.delete_app(&name).then_some(()).ok_or_else(|| {
                    Refused::NotFound(format!("no app {name} in the configuration file"))
                })
            })
        })
        .await
    };
    match run.await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => *e,
    }
}

/// `PUT /v1/config/apps/{app}/sources/{stream}` (a JSON object with the `[[app.source]]`
/// keys): `201` made, `200` replaced; `404` for an app the file does not have.
pub(super) async fn put_source(
    State(st): State<Arc<AppState>>,
    Path((app, stream)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let run = async {
        check_name("stream", &stream)?;
        let src = object(&body)?;
        let r = reloader(&st)?;
        blocking(move || {
            r.edit(|f| {
                f.put_source(&app, &stream, &src).map_err(|e| match e {
                    // The file's apps decide, not those in force (the file may be ahead).
                    ConfigError::NoApp { .. } => Refused::NotFound(e.to_string()),
                    e => Refused::Invalid(vec![e]),
                })
            })
        })
        .await
    };
    match run.await {
        Ok((created, applied)) => edited(created, &applied),
        Err(e) => *e,
    }
}

/// `DELETE /v1/config/apps/{app}/sources/{stream}`: `204`; the camera's stream ends with
/// `source_removed`.
pub(super) async fn delete_source(
    State(st): State<Arc<AppState>>,
    Path((app, stream)): Path<(String, String)>,
) -> Response {
    let run = async {
        let r = reloader(&st)?;
        blocking(move || {
            r.edit(|f| {
                f.delete_source(&app, &stream)
                    .then_some(())
                    .ok_or_else(|| Refused::NotFound(format!("no source {stream} in app {app}")))
            })
        })
        .await
    };
    match run.await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => *e,
    }
}
