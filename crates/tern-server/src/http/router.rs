//! Every route of the HTTP server, in one place: the pages, WHEP, WHIP, the OvenMediaEngine
//! signalling upgrade (on the player's path), LL-HLS, the management API, events and
//! metrics. `GET /v1/openapi.json` documents each of them (a test reads this file to check).
//!
//! The API's routes (`/v1/...` and `/metrics`) sit behind one layer that checks
//! `server.api_token` ([`api_auth`]); outside it stay the OpenAPI document
//! and the memory and stats reads (`/v1/memory`, `/v1/stats/current`, read by `tern mem`
//! and the dashboard), as before the layer, and the health probe (`/v1/health`, read by
//! `tern health`: a probe holds no token).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, patch, post, put};

use crate::http::error::HttpError;
use crate::http::extract::bearer;
use crate::http::proxy;
use crate::http::state::AppState;
use crate::http::{
    api, config, forwards, hls, memory, metrics, openapi, pages, recordings, thumb, whep, whip,
};

/// The server's router over the shared state.
pub fn router(state: Arc<AppState>) -> Router {
    let guarded = Router::new()
        .route("/v1/apps", get(api::apps))
        .route("/v1/streams", get(api::streams))
        .route("/v1/streams/{app}/{stream}", get(api::stream))
        .route(
            "/v1/streams/{app}/{stream}/viewers",
            get(api::stream_viewers),
        )
        .route(
            "/v1/streams/{app}/{stream}/publisher",
            get(api::stream_publisher).delete(api::kick_publisher),
        )
        .route(
            "/v1/viewers/{id}",
            get(api::viewer).delete(api::kick_viewer),
        )
        .route(
            "/v1/viewers/{id}/layer",
            put(api::pin_layer).delete(api::unpin_layer),
        )
        .route(
            "/v1/streams/{app}/{stream}/recordings",
            post(recordings::start),
        )
        .route(
            "/v1/streams/{app}/{stream}/recordings/{id}",
            delete(recordings::stop),
        )
        .route("/v1/recordings", get(recordings::list))
        .route("/v1/streams/{app}/{stream}/forwards", post(forwards::add))
        .route(
            "/v1/streams/{app}/{stream}/forwards/{id}",
            delete(forwards::remove),
        )
        .route("/v1/forwards", get(forwards::list))
        .route("/v1/config", get(config::get))
        .route("/v1/config/reload", post(config::reload))
        .route(
            "/v1/config/apps/{name}",
            put(config::put_app).delete(config::delete_app),
        )
        .route(
            "/v1/config/apps/{app}/sources/{stream}",
            put(config::put_source).delete(config::delete_source),
        )
        .route(
            "/v1/recordings/{app}/{stream}/{file}",
            get(recordings::serve),
        )
        .route("/v1/publishers", get(api::publishers))
        .route("/v1/cluster", get(api::cluster))
        .route("/v1/drain", post(api::drain))
        .route("/v1/turn/allocations", get(api::allocations))
        .route("/v1/turn/allocations/{id}", get(api::allocation))
        .route("/v1/events", get(api::events))
        .route("/metrics", get(metrics::metrics))
        .route_layer(from_fn_with_state(state.clone(), api_auth));
    let routes = Router::new()
        .route("/", get(pages::index))
        .route("/dashboard", get(pages::dashboard))
        .route("/assets/hls.min.js", get(pages::hls_js))
        .route(
            "/{app}/{stream}",
            // CONNECT: the WebSocket upgrade over HTTP/2 (RFC 8441), which Chromium uses on
            // an h2 connection to an HTTPS origin.
            get(pages::player).connect(pages::player),
        )
        .route(
            "/{app}/{stream}/whep",
            post(whep::post)
                .options(whep::options_links)
                .head(whep::head),
        )
        .route(
            "/{app}/{stream}/whep/{session}",
            patch(whep::patch)
                .delete(whep::delete)
                .options(whep::options),
        )
        .route("/{app}/{stream}/thumb.jpg", get(thumb::get))
        .route("/{app}/{stream}/{file}", get(hls::get))
        .route(
            "/{app}/{stream}/whip",
            post(whip::post).options(whip::options),
        )
        .route(
            "/{app}/{stream}/whip/{session}",
            delete(whip::delete)
                .patch(whip::patch)
                .options(whip::options),
        )
        .route("/v1/memory", get(memory::memory))
        .route("/v1/stats/current", get(memory::stats_current))
        .route("/v1/health", get(memory::health))
        .route("/v1/openapi.json", get(openapi::openapi))
        .route("/v1/{*rest}", any(api::unknown))
        .merge(guarded)
        .with_state(state.clone());
    // Always on: a reload may name trusted proxies (`proxy::LiveProxies`).
    routes.layer(from_fn_with_state(
        proxy::ProxyLayer::new(state.core.clone()),
        proxy::real_client,
    ))
}

/// The plain listener's router with `server.redirect_http`: every request gets a `308` to
/// the same path and query on HTTPS (port `https_port`, the host the client asked for).
pub fn redirect_router(https_port: u16) -> Router {
    Router::new().fallback(move |req: Request| async move {
        let host = req
            .headers()
            .get(axum::http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.parse::<axum::http::uri::Authority>().ok());
        let Some(host) = host else {
            return HttpError::BadRequest("a Host header is needed to redirect to HTTPS".into())
                .into_response();
        };
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let location = if https_port == 443 {
            format!("https://{}{path}", host.host())
        } else {
            format!("https://{}:{https_port}{path}", host.host())
        };
        (
            axum::http::StatusCode::PERMANENT_REDIRECT,
            [(axum::http::header::LOCATION, location)],
        )
            .into_response()
    })
}

/// The API's token check (`server.api_token`), as a layer over the `/v1` routes and
/// `/metrics`: 401 with `WWW-Authenticate: Bearer` without it.
pub(crate) async fn api_auth(
    State(st): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(token) = st.config().server.api_token.as_deref()
        && bearer(req.headers()) != Some(token)
    {
        return HttpError::ApiToken.into_response();
    }
    next.run(req).await
}
