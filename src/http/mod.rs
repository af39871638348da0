//! The HTTP surface: health, metrics, webhooks, the admin API and the dashboard (`web`). `router(state)` is all of it, so tests
//! drive it through a real socket (`TestApp`, port 0).

mod api;
mod budgets;
mod dispatch;
pub mod health;
mod landing;
pub mod openapi;
mod plans;
mod receipts;
pub(crate) mod stream;
mod tasks;
mod usage;
pub(crate) mod web;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::config::Settings;
use crate::eventlog::EventLog;
use crate::ingress;
use crate::loops::LoopRegistry;

/// Everything a request handler may touch.
#[derive(Clone)]
pub struct AppState {
    pub settings: Arc<Settings>,
    pub log: EventLog,
    pub loops: LoopRegistry,
    pub metrics: PrometheusHandle,
    pub started: Instant,
    /// `nats` or `memory`: where the relay publishes.
    pub bus_kind: &'static str,
    /// This replica's leases (holder and expiry of each singleton loop).
    pub leases: crate::loops::lease::Leases,
    /// Cancelled when the server starts a graceful shutdown; endless responses (SSE) end on it.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The board's command side.
    pub board: crate::board::Board,
    /// Lands tasks in review on repositories not on GitHub (`POST /api/tasks/{id}/land`, the Land button).
    pub lander: crate::landing::Lander,
    /// Dashboard sign-ins with a wrong token being answered now, per client address (see `web`).
    pub sign_ins: Arc<web::SignInThrottle>,
    /// The first run's sign-in link (see `startup::first_run`): a code that signs in once.
    pub sign_in_link: Arc<web::OneTimeSignIn>,
    /// Memory for webhook bodies not yet verified (see `ingress`).
    pub ingress_budget: ingress::BodyBudget,
    /// The last `/health` status served (`Status as u8`), so only changes are logged.
    pub last_health: Arc<std::sync::atomic::AtomicU8>,
}

pub fn router(state: AppState) -> Router {
    // One route per provider (the provider table); each reads its body itself, within its limit and the
    // unverified-bytes budget.
    let webhooks = ingress::router(crate::providers::webhook)
        // A client that trickles its body must not hold a connection (and a batch slot) forever.
        .layer(RequestBodyTimeoutLayer::new(Duration::from_secs(30)));

    Router::new()
        .merge(webhooks)
        .merge(api::router(state.clone()))
        .merge(openapi::router())
        .merge(web::router())
        .fallback(not_found)
        .layer(TraceLayer::new_for_http())
        // Probes are outside the request trace: a platform probing every few seconds would log each failing
        // `/health` as an ERROR; the handler logs status changes instead.
        .route("/health", get(health::health))
        .route("/health/live", get(health::live))
        .route("/metrics", get(health::metrics))
        .layer(CatchPanicLayer::custom(|_| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the request handler panicked",
            )
        }))
        .with_state(state)
}

impl axum::extract::FromRef<AppState> for ingress::Webhooks {
    fn from_ref(state: &AppState) -> Self {
        Self {
            settings: state.settings.clone(),
            log: state.log.clone(),
            budget: state.ingress_budget.clone(),
        }
    }
}

/// The one error shape every route uses: `{"error": "<code>", "message": "<for a person>"}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApiError {
    /// A stable code a client can branch on (`bad_query`, `not_found`, `unauthorized`, ...).
    #[schema(example = "not_found")]
    pub error: String,
    /// What went wrong, for a person.
    pub message: String,
}

pub fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = ApiError {
        error: code.to_owned(),
        message: message.into(),
    };
    (status, Json(body)).into_response()
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not_found", "no such route")
}
