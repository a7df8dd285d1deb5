//! REST `/v1` over axum: a thin mapping of requests onto `service::Control`. Headers that are not
//! valid visible ASCII, oversized bodies and bad tokens are answered here with the spec's error
//! body; everything else is the service's.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use serde::Deserialize;

use crate::answer::{Answer, Done, Served};
use crate::auth::{Principal, TokenVerifier};
use crate::probe::ProbeKind;
use crate::service::{Control, Mutation};
use hub_core::error::{ApiError, ErrorCode};

/// Largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024;

const OPENAPI: &str = include_str!("../../schema/openapi/v1.json");

#[derive(Clone)]
struct Api {
    control: Arc<Control>,
    verifier: Arc<TokenVerifier>,
}

/// `/v1`, `/graphql` and the gRPC services: three transports over one service, one listener.
pub fn router(control: Arc<Control>, verifier: Arc<TokenVerifier>) -> Router {
    let graphql = crate::graphql::router(control.clone(), verifier.clone());
    let grpc = crate::grpc::router(control.clone(), verifier.clone());
    let push = crate::push::router(control.clone());
    Router::new()
        .route("/v1/subscriptions", get(list).post(create))
        .route(
            "/v1/subscriptions/{id}",
            get(read).patch(patch).delete(delete),
        )
        .route("/v1/subscriptions/{id}/pause", post(pause))
        .route("/v1/subscriptions/{id}/resume", post(resume))
        .route("/v1/subscriptions/{id}/ping", post(ping))
        .route("/v1/subscriptions/{id}/verify", post(verify))
        .route("/v1/subscriptions/{id}/credential", put(credential))
        .route("/v1/subscriptions/{id}/secret/rotate", post(rotate))
        .route(
            "/v1/subscriptions/{id}/setup-artifacts",
            get(setup_artifacts),
        )
        .route(
            "/v1/subscriptions/{id}/delegated-grant",
            put(delegated_grant),
        )
        .route("/v1/subscriptions/{id}/events", get(pull))
        .route("/v1/subscriptions/{id}/dead-letters", get(dead_letters))
        .route("/v1/subscriptions/{id}/dead-letters/replay", post(replay))
        .route("/v1/subscriptions/{id}/health", get(health))
        .route("/v1/catalog", get(catalog))
        .route("/v1/admin/ownership", get(ownership))
        .route(
            "/v1/openapi.json",
            get(|| async { ([("content-type", "application/json")], OPENAPI) }),
        )
        .with_state(Api { control, verifier })
        .merge(graphql)
        .merge(grpc)
        .merge(push)
        .layer(axum::middleware::from_fn(hub_core::error::limit_headers))
        .layer(axum::middleware::map_response(hub_core::error::json_errors))
}

/// Renders an operation's result as REST: the status of what was done (or of the error's code),
/// the ETag and location as headers, the view as JSON.
fn send(served: Served) -> Response {
    let answer: Answer = match served {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let status = match answer.done {
        Done::Created => StatusCode::CREATED,
        Done::Ok => StatusCode::OK,
        Done::Deleted => StatusCode::NO_CONTENT,
    };
    let mut response = match &answer.body {
        Some(body) => {
            let mut r = Response::new(Body::from(serde_json::to_vec(body).unwrap_or_default()));
            r.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        None => Response::new(Body::empty()),
    };
    *response.status_mut() = status;
    let headers = [
        ("etag", answer.etag.as_deref()),
        ("location", answer.location.as_deref()),
        ("x-idempotency-replayed", answer.replayed.then_some("true")),
    ];
    for (name, value) in headers {
        if let Some(v) = value.and_then(|v| HeaderValue::try_from(v).ok()) {
            response
                .headers_mut()
                .insert(HeaderName::from_static(name), v);
        }
    }
    response
}

/// A header as text; a value that is not visible ASCII is a 400.
fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, ApiError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map_err(|_| ApiError::bad_request(format!("the {name} header is not valid text")))
        })
        .transpose()
}

fn principal(api: &Api, headers: &HeaderMap) -> Result<Principal, ApiError> {
    api.verifier.verify(header(headers, "authorization")?)
}

/// Authenticates, then runs a call that needs no body or key.
async fn authenticated<F, Fut>(api: &Api, headers: &HeaderMap, f: F) -> Response
where
    F: FnOnce(Principal) -> Fut,
    Fut: std::future::Future<Output = Served>,
{
    match principal(api, headers) {
        Ok(who) => send(f(who).await),
        Err(e) => e.into_response(),
    }
}

async fn read_body(headers: &HeaderMap, body: Body) -> Result<Vec<u8>, ApiError> {
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map(|b| b.to_vec())
        .map_err(|_| {
            ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("the body exceeds {MAX_BODY} bytes"),
            )
        })?;
    if !body.is_empty() {
        json_content(headers)?;
    }
    Ok(body)
}

/// A body is JSON: a content type that says otherwise is 415 (none is read as JSON).
fn json_content(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(given) = headers.get(axum::http::header::CONTENT_TYPE) else {
        return Ok(());
    };
    let essence = given
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if essence == "application/json" || essence.ends_with("+json") {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "the body is JSON: send content-type application/json",
        ))
    }
}

/// A change as REST received it: the caller, and what its idempotency fingerprint is made of.
struct Change {
    who: Principal,
    method: &'static str,
    path: String,
    key: Option<String>,
    body: Vec<u8>,
}

impl Change {
    fn mutation(&self) -> Mutation<'_> {
        Mutation {
            method: self.method,
            path: &self.path,
            key: self.key.as_deref(),
            body: &self.body,
        }
    }
}

/// Authenticates and reads the key and the body of a change; a refusal is the response.
async fn change(
    api: &Api,
    headers: &HeaderMap,
    body: Body,
    method: &'static str,
    path: String,
) -> Result<Change, Response> {
    let who = principal(api, headers).map_err(IntoResponse::into_response)?;
    let key = header(headers, "x-idempotency")
        .map_err(IntoResponse::into_response)?
        .map(str::to_owned);
    let body = read_body(headers, body)
        .await
        .map_err(IntoResponse::into_response)?;
    Ok(Change {
        who,
        method,
        path,
        key,
        body,
    })
}

async fn create(State(api): State<Api>, headers: HeaderMap, body: Body) -> Response {
    let path = "/v1/subscriptions".to_owned();
    match change(&api, &headers, body, "POST", path).await {
        Ok(c) => send(api.control.create(&c.who, c.mutation()).await),
        Err(refused) => refused,
    }
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    cursor: Option<String>,
    limit: Option<String>,
}

async fn list(State(api): State<Api>, headers: HeaderMap, Query(q): Query<ListQuery>) -> Response {
    let control = api.control.clone();
    authenticated(&api, &headers, |who| async move {
        control
            .list(&who, q.cursor.as_deref(), q.limit.as_deref())
            .await
    })
    .await
}

async fn read(State(api): State<Api>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let control = api.control.clone();
    authenticated(
        &api,
        &headers,
        |who| async move { control.get(&who, &id).await },
    )
    .await
}

async fn patch(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let if_match = match header(&headers, "if-match") {
        Ok(v) => v.map(str::to_owned),
        Err(e) => return e.into_response(),
    };
    let path = format!("/v1/subscriptions/{id}");
    match change(&api, &headers, body, "PATCH", path).await {
        Ok(c) => send(
            api.control
                .patch(&c.who, &id, if_match.as_deref(), c.mutation())
                .await,
        ),
        Err(refused) => refused,
    }
}

async fn delete(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let path = format!("/v1/subscriptions/{id}");
    match change(&api, &headers, body, "DELETE", path).await {
        Ok(c) => send(api.control.delete(&c.who, &id, c.mutation()).await),
        Err(refused) => refused,
    }
}

async fn pause(State(api): State<Api>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let control = api.control.clone();
    authenticated(&api, &headers, |who| async move {
        control.set_paused(&who, &id, true).await
    })
    .await
}

async fn ping(State(api): State<Api>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let control = api.control.clone();
    authenticated(&api, &headers, |who| async move {
        control.probe(&who, &id, ProbeKind::Ping).await
    })
    .await
}

async fn verify(State(api): State<Api>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let control = api.control.clone();
    authenticated(&api, &headers, |who| async move {
        control.probe(&who, &id, ProbeKind::Verify).await
    })
    .await
}

async fn rotate(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let path = format!("/v1/subscriptions/{id}/secret/rotate");
    match change(&api, &headers, body, "POST", path).await {
        Ok(c) => send(api.control.rotate(&c.who, &id, c.mutation()).await),
        Err(refused) => refused,
    }
}

async fn setup_artifacts(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let control = api.control.clone();
    authenticated(&api, &headers, |who| async move {
        control.setup_artifacts(&who, &id).await
    })
    .await
}

async fn delegated_grant(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let path = format!("/v1/subscriptions/{id}/delegated-grant");
    match change(&api, &headers, body, "PUT", path).await {
        Ok(c) => send(api.control.put_grant(&c.who, &id, c.mutation()).await),
        Err(refused) => refused,
    }
}

async fn credential(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let who = match principal(&api, &headers) {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let body = match read_body(&headers, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    send(api.control.put_credential(&who, &id, &body).await)
}

async fn resume(State(api): State<Api>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let control = api.control.clone();
    authenticated(&api, &headers, |who| async move {
        control.set_paused(&who, &id, false).await
    })
    .await
}

async fn catalog(State(api): State<Api>, headers: HeaderMap) -> Response {
    let control = api.control.clone();
    authenticated(
        &api,
        &headers,
        |who| async move { control.catalog(&who).await },
    )
    .await
}

/// A read of what the engine holds, as a 200 with its view.
fn shown<T: serde::Serialize>(read: Result<T, ApiError>) -> Served {
    let view = serde_json::to_value(read?)
        .map_err(|e| ApiError::unavailable(format!("the view did not serialise: {e}")))?;
    Ok(Answer::ok(view))
}

/// `after` (a seq) and `limit`; an unknown parameter is a 400, as the document says.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PullQuery {
    after: Option<u64>,
    limit: Option<usize>,
}

async fn pull(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<PullQuery>,
) -> Response {
    let control = api.control.clone();
    authenticated(&api, &headers, |who| async move {
        let page = control.pull(&who, &id, q.after, q.limit).await?;
        Ok(Answer::ok(page.view()))
    })
    .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadLetterQuery {
    cursor: Option<String>,
    limit: Option<usize>,
}

async fn dead_letters(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<DeadLetterQuery>,
) -> Response {
    let control = api.control.clone();
    authenticated(&api, &headers, |who| async move {
        shown(
            control
                .dead_letters(&who, &id, q.cursor.as_deref(), q.limit)
                .await,
        )
    })
    .await
}

/// The replay body: `{"ids": [...]}`, or nothing for every dead letter.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayBody {
    ids: Option<Vec<String>>,
}

async fn replay(
    State(api): State<Api>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let who = match principal(&api, &headers) {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let replayed = async {
        let body = read_body(&headers, body).await?;
        let body: ReplayBody = if body.is_empty() {
            ReplayBody::default()
        } else {
            serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("body: {e}")))?
        };
        let n = api
            .control
            .replay_dead_letters(&who, &id, body.ids.as_deref())
            .await?;
        Ok(Answer::ok(serde_json::json!({ "replayed": n })))
    };
    send(replayed.await)
}

async fn health(State(api): State<Api>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let control = api.control.clone();
    authenticated(&api, &headers, |who| async move {
        shown(control.delivery_health(&who, &id).await)
    })
    .await
}

async fn ownership(State(api): State<Api>, headers: HeaderMap) -> Response {
    let control = api.control.clone();
    authenticated(&api, &headers, |who| async move {
        shown(control.ownership(&who).await)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::OPENAPI;
    use hub_core::error::ErrorCode;

    /// Every `(path, method)` this file's router serves under `/v1`, read from its source, so a
    /// route added to `router` is checked without being listed anywhere else.
    fn served_routes() -> Vec<(String, String)> {
        let source = include_str!("http.rs");
        let router = &source[source.find("pub fn router").expect("router")..];
        let router = &router[..router.find("\n}\n").expect("end of router")];
        let mut routes = Vec::new();
        for call in router.split(".route(").skip(1) {
            let call: String = call.split_whitespace().collect();
            let Some(rest) = call.strip_prefix('"') else {
                continue;
            };
            let (path, handlers) = rest.split_once('"').expect("a quoted path");
            if !path.starts_with("/v1/") || path == "/v1/openapi.json" {
                continue;
            }
            let handlers = handlers.split(")).").next().unwrap_or(handlers);
            for method in ["get", "post", "put", "patch", "delete"] {
                let called = handlers.starts_with(&format!(",{method}("))
                    || handlers.contains(&format!(".{method}("));
                if called {
                    routes.push((path.to_owned(), method.to_owned()));
                }
            }
        }
        routes
    }

    /// R-CP-19: every route the server serves is in the OpenAPI document, with its method — and
    /// the document has no route the server does not serve.
    #[test]
    fn r_cp_19_every_served_route_is_in_the_openapi_document() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("the document is JSON");
        let served = served_routes();
        assert!(served.len() >= 16, "the source parse found {served:?}");
        for (path, method) in &served {
            assert!(
                doc["paths"][path.as_str()].get(method.as_str()).is_some(),
                "{method} {path} is served but not documented"
            );
        }
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("path item").keys() {
                if method != "parameters" {
                    assert!(
                        served.contains(&(path.clone(), method.clone())),
                        "{method} {path} is documented but not served"
                    );
                }
            }
        }
    }

    /// R-CP-18, R-CP-19: the OpenAPI document lists every error code with the status the server
    /// answers it with, and no code the server does not have.
    #[test]
    fn r_cp_19_the_openapi_document_lists_every_error_code() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("the document is JSON");
        let table = &doc["components"]["schemas"]["Error"]["x-error-codes"];
        let listed: std::collections::BTreeSet<&str> = table
            .as_object()
            .expect("x-error-codes")
            .keys()
            .map(String::as_str)
            .collect();
        let ours: std::collections::BTreeSet<&str> =
            ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(listed, ours);
        for code in ErrorCode::ALL {
            let entry = &table[code.as_str()];
            let statuses = [&entry["http_status"], &entry["http_status_when_it_happens"]];
            assert!(
                statuses.contains(&&serde_json::json!(code.http_status())),
                "{code}: {entry}"
            );
        }
    }
}
