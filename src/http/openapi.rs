//! The OpenAPI document of `/api/*`, generated from the handlers' `#[utoipa::path]` and their types' `ToSchema`.
//! Served at `GET /api/openapi.json` (public: it describes the API and holds no data) and checked in at
//! `docs/openapi.json`; `tests/it/openapi.rs` fails when the two differ, and when a route of the router is missing.

use std::sync::LazyLock;

use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, HeaderBuilder, Object, PathItem, Ref, RefOr, ResponseBuilder, Type,
};
use utoipa::{Modify, OpenApi};

use super::{ApiError, AppState};
use crate::board::Steer;
use crate::tasks::TaskId;

pub const PATH: &str = "/api/openapi.json";

/// The document's route, public (the document describes the API and holds no data): merged beside `api::router`,
/// outside its token layer. Here rather than in api.rs, so api.rs (which this document lists) needs nothing of it.
pub fn router() -> Router<AppState> {
    Router::new().route(PATH, get(serve))
}

/// Every `/api` route the router mounts, as (method, path template), the public document included.
pub fn routes() -> Vec<(Method, &'static str)> {
    let mut routes = super::api::admin_route_list();
    routes.push((Method::GET, PATH));
    routes
}

/// The name of the bearer-token security scheme in the document (also spelled out in `ApiDoc`'s `security`).
const ADMIN_TOKEN: &str = "admin_token";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "pidevops admin API",
        description = "The JSON API under `/api`. Every route but this document needs \
            `Authorization: Bearer <PIDEVOPS_ADMIN_TOKEN>`; every refusal is `{\"error\": code, \"message\": text}`."
    ),
    paths(
        super::api::list_events,
        super::api::show_event,
        super::api::event_body,
        super::stream::events_stream,
        super::api::list_sources,
        super::tasks::create,
        super::tasks::list,
        super::tasks::show,
        super::receipts::receipt,
        super::tasks::choose_agent,
        super::tasks::edit_spec,
        super::tasks::answer,
        super::landing::land,
        super::tasks::command,
        super::plans::create,
        super::plans::show,
        super::dispatch::status,
        super::dispatch::pause,
        super::dispatch::resume,
        super::dispatch::lift_limit,
        super::dispatch::list,
        super::usage::report,
        super::budgets::show,
        super::budgets::raise,
        serve,
    ),
    // Only what no path's body refers to: parameter types are not collected by themselves.
    components(schemas(ApiError, Steer, TaskId)),
    modifiers(&AdminToken),
    security(("admin_token" = [])),
    tags(
        (name = "events", description = "The event log and what came in"),
        (name = "tasks", description = "The task board"),
        (name = "plans", description = "Goals a planner decomposes into tasks"),
        (name = "dispatch", description = "Pausing dispatch, and agent runs"),
        (name = "meta", description = "This document"),
    )
)]
struct ApiDoc;

/// Adds the bearer-token scheme, and to every operation behind it the refusals the token check and the panic
/// guard make (`require_admin` and `router`'s `CatchPanicLayer`), so no handler has to repeat them.
struct AdminToken;

impl Modify for AdminToken {
    fn modify(&self, document: &mut utoipa::openapi::OpenApi) {
        document
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(
                ADMIN_TOKEN,
                SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
            );
        for (path, item) in document.paths.paths.iter_mut() {
            for operation in operations(item) {
                let responses = &mut operation.responses.responses;
                add_refusal(
                    responses,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "`internal`: the handler panicked",
                );
                if path == PATH {
                    continue;
                }
                add_refusal(
                    responses,
                    StatusCode::UNAUTHORIZED,
                    "`unauthorized`: no `Authorization: Bearer` header, or the wrong token",
                );
                add_refusal(
                    responses,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "`not_configured`: PIDEVOPS_ADMIN_TOKEN is not set, so every request is refused",
                );
            }
        }
    }
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

/// Documents an `ApiError` refusal; where the handler documents the same status already, adds this cause to it.
fn add_refusal(
    responses: &mut std::collections::BTreeMap<String, RefOr<utoipa::openapi::Response>>,
    status: StatusCode,
    cause: &str,
) {
    let key = status.as_u16().to_string();
    if let Some(RefOr::T(existing)) = responses.get_mut(&key) {
        existing.description = format!("{}; {cause}", existing.description);
        return;
    }
    let mut response = ResponseBuilder::new().description(cause).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("ApiError")))
            .build(),
    );
    if status == StatusCode::UNAUTHORIZED {
        response = response.header(
            "WWW-Authenticate",
            HeaderBuilder::new()
                .schema(Object::with_type(Type::String))
                .description(Some("`Bearer`"))
                .build(),
        );
    }
    responses.insert(key, RefOr::T(response.build()));
}

/// The document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document as the text of `docs/openapi.json`: pretty-printed, object keys sorted (through `serde_json::Value`,
/// whose maps are ordered), ending in a newline, so the checked-in file diffs line by line.
pub fn document_json() -> Result<String, serde_json::Error> {
    let value = serde_json::to_value(document())?;
    let mut text = serde_json::to_string_pretty(&value)?;
    text.push('\n');
    Ok(text)
}

static DOCUMENT: LazyLock<Result<Bytes, String>> =
    LazyLock::new(|| document_json().map(Bytes::from).map_err(|e| e.to_string()));

/// This document.
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    operation_id = "openapi",
    tag = "meta",
    security(()),
    responses((status = 200, description = "This OpenAPI document", body = Object))
)]
pub async fn serve() -> Response {
    match &*DOCUMENT {
        Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text.clone()).into_response(),
        Err(e) => super::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the OpenAPI document cannot be encoded: {e}"),
        ),
    }
}
