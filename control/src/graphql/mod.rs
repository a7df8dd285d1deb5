//! GraphQL over the same service as REST (R-TR-1, R-CP-19): `POST /graphql` for queries and
//! mutations, GraphiQL on `GET /graphql`. Every resolver authenticates once from the request's
//! `Authorization` header, calls one service operation and renders its answer; an error carries the
//! service's code in `extensions.code` (R-CP-18). Idempotency keys and `If-Match` are arguments.
//! The SDL is committed as `schema/graphql/schema.graphql`.

mod deliveries;
mod live;
mod ownership;
mod types;

use std::sync::Arc;

use async_graphql::http::GraphiQLSource;
use async_graphql::http::ALL_WEBSOCKET_PROTOCOLS;
use async_graphql::{Context, Data, ErrorExtensions, MergedObject, Object, Schema};
use async_graphql_axum::{GraphQLProtocol, GraphQLRequest, GraphQLResponse, GraphQLWebSocket};
use axum::extract::State;
use axum::extract::WebSocketUpgrade;
use axum::http::HeaderMap;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::Value;

use crate::answer::Served;
use crate::auth::{Principal, TokenVerifier};
use crate::probe::ProbeKind;
use crate::service::{Control, Mutation as Change};
use hub_core::error::ApiError;
use types::*;

/// Deepest query accepted: the schema's real depth is 4; more is a client asking for work.
const MAX_DEPTH: usize = 8;
/// Most fields one query may select.
const MAX_COMPLEXITY: usize = 400;

pub type HubSchema = Schema<QueryRoot, MutationRoot, live::SubscriptionRoot>;

/// Every query: the control plane's and the engine's.
#[derive(MergedObject, Default, Debug)]
pub struct QueryRoot(
    SubscriptionQueries,
    deliveries::DeliveryQueries,
    ownership::OwnershipQueries,
);

/// Every mutation.
#[derive(MergedObject, Default, Debug)]
pub struct MutationRoot(SubscriptionMutations, deliveries::DeliveryMutations);

pub fn schema(control: Arc<Control>) -> HubSchema {
    Schema::build(
        QueryRoot::default(),
        MutationRoot::default(),
        live::SubscriptionRoot,
    )
    .data(control)
    .limit_depth(MAX_DEPTH)
    .limit_complexity(MAX_COMPLEXITY)
    .finish()
}

/// The SDL the server serves (compared with the committed file by a test).
pub fn sdl() -> String {
    Schema::build(
        QueryRoot::default(),
        MutationRoot::default(),
        live::SubscriptionRoot,
    )
    .finish()
    .sdl()
}

#[derive(Clone)]
struct Gql {
    schema: HubSchema,
    verifier: Arc<TokenVerifier>,
}

pub fn router(control: Arc<Control>, verifier: Arc<TokenVerifier>) -> Router {
    Router::new()
        .route("/graphql", get(graphiql).post(serve))
        .route("/graphql/ws", get(live_socket))
        .layer(axum::extract::DefaultBodyLimit::max(crate::http::MAX_BODY))
        .with_state(Gql {
            schema: schema(control),
            verifier,
        })
}

async fn graphiql() -> impl IntoResponse {
    Html(
        GraphiQLSource::build()
            .endpoint("/graphql")
            .subscription_endpoint("/graphql/ws")
            .finish(),
    )
}

/// The caller, as the token says (or why not): resolvers ask for it, so a query of the schema
/// alone needs no token.
struct Caller(Result<Principal, ApiError>);

async fn serve(State(gql): State<Gql>, headers: HeaderMap, req: GraphQLRequest) -> GraphQLResponse {
    let token = match headers.get("authorization").map(|v| v.to_str()) {
        Some(Err(_)) => Err(ApiError::bad_request(
            "the authorization header is not valid text",
        )),
        Some(Ok(t)) => Ok(Some(t)),
        None => Ok(None),
    };
    let caller = Caller(token.and_then(|t| gql.verifier.verify(t)));
    gql.schema
        .execute(req.into_inner().data(caller))
        .await
        .into()
}

/// `/graphql/ws`: live subscriptions. The caller is the `connection_init` payload's
/// `authorization`, else the upgrade request's header.
async fn live_socket(
    State(gql): State<Gql>,
    headers: HeaderMap,
    protocol: GraphQLProtocol,
    upgrade: WebSocketUpgrade,
) -> Response {
    let header = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    upgrade
        .protocols(ALL_WEBSOCKET_PROTOCOLS)
        .on_upgrade(move |socket| {
            let verifier = gql.verifier.clone();
            GraphQLWebSocket::new(socket, gql.schema.clone(), protocol)
                .on_connection_init(move |payload| async move {
                    let token = payload
                        .get("authorization")
                        .or_else(|| payload.get("Authorization"))
                        .and_then(|t| t.as_str())
                        .map(str::to_owned)
                        .or(header);
                    let mut data = Data::default();
                    data.insert(Caller(verifier.verify(token.as_deref())));
                    Ok(data)
                })
                .serve()
        })
}

/// An API error as GraphQL reports it: the message, and the code (with any extra fields of the
/// code, e.g. a failed probe's `error_class`) in `extensions`.
fn error(e: ApiError) -> async_graphql::Error {
    async_graphql::Error::new(e.message.clone()).extend_with(|_, ext| {
        ext.set("code", e.code.as_str());
        if let Some(Value::Object(extra)) = &e.extra {
            for (k, v) in extra {
                if let Ok(v) = async_graphql::Value::from_json(v.clone()) {
                    ext.set(k.as_str(), v);
                }
            }
        }
    })
}

type Out<T> = async_graphql::Result<T>;

fn parts<'c>(ctx: &'c Context<'_>) -> Out<(&'c Arc<Control>, &'c Principal)> {
    let control = ctx.data::<Arc<Control>>()?;
    let caller = ctx.data::<Caller>()?;
    match &caller.0 {
        Ok(who) => Ok((control, who)),
        Err(e) => Err(error(e.clone())),
    }
}

fn body(served: Served) -> Out<(Value, Option<String>)> {
    let answer = served.map_err(error)?;
    Ok((answer.body.unwrap_or(Value::Null), answer.etag))
}

fn node(served: Served) -> Out<SubscriptionNode> {
    body(served).map(|(view, etag)| SubscriptionNode { view, etag })
}

#[derive(Debug, Default)]
pub struct SubscriptionQueries;

#[Object]
impl SubscriptionQueries {
    /// The tenant's subscriptions, a page at a time (`limit` 1 to 200, default 50).
    async fn subscriptions(
        &self,
        ctx: &Context<'_>,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Out<SubscriptionPage> {
        let (control, who) = parts(ctx)?;
        let limit = limit.map(|l| l.to_string());
        let (page, _) = body(control.list(who, cursor.as_deref(), limit.as_deref()).await)?;
        let items = page["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|v| SubscriptionNode {
                        view: v.clone(),
                        etag: None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(SubscriptionPage {
            items,
            next_cursor: page["next_cursor"].as_str().map(str::to_owned),
        })
    }

    /// One subscription of the tenant (another tenant's id is `subscription_not_found`).
    async fn subscription(&self, ctx: &Context<'_>, id: String) -> Out<SubscriptionNode> {
        let (control, who) = parts(ctx)?;
        node(control.get(who, &id).await)
    }

    /// A delegated AWS grant's setup artifacts (R-CP-7): trust policy, permissions policy,
    /// CloudFormation quick-create link, ExternalId — REST's `setup-artifacts` object.
    async fn setup_artifacts(
        &self,
        ctx: &Context<'_>,
        id: String,
    ) -> Out<async_graphql::Json<Value>> {
        let (control, who) = parts(ctx)?;
        let (v, _) = body(control.setup_artifacts(who, &id).await)?;
        Ok(async_graphql::Json(v))
    }

    /// The event types subscriptions may name (R-CP-15).
    async fn catalog(&self, ctx: &Context<'_>) -> Out<Catalog> {
        let (control, who) = parts(ctx)?;
        let (list, _) = body(control.catalog(who).await)?;
        Ok(Catalog {
            items: CatalogEntry::all(&list, "items"),
            hub: CatalogEntry::all(&list, "hub"),
        })
    }
}

#[derive(Debug, Default)]
pub struct SubscriptionMutations;

#[Object]
impl SubscriptionMutations {
    /// Creates a subscription (R-CP-3); its answer is the only one that shows the secret.
    async fn create_subscription(
        &self,
        ctx: &Context<'_>,
        input: CreateSubscriptionInput,
        idempotency_key: String,
    ) -> Out<SubscriptionNode> {
        let (control, who) = parts(ctx)?;
        let body = input.to_body();
        let change = Change {
            method: "POST",
            path: "/v1/subscriptions",
            key: Some(&idempotency_key),
            body: &body,
        };
        node(control.create(who, change).await)
    }

    /// Edits a subscription (R-CP-10); `ifMatch` is the `etag` it was read with.
    async fn edit_subscription(
        &self,
        ctx: &Context<'_>,
        id: String,
        input: EditSubscriptionInput,
        idempotency_key: String,
        if_match: Option<String>,
    ) -> Out<SubscriptionNode> {
        let (control, who) = parts(ctx)?;
        let body = input.to_body();
        let path = format!("/v1/subscriptions/{id}");
        let change = Change {
            method: "PATCH",
            path: &path,
            key: Some(&idempotency_key),
            body: &body,
        };
        node(control.patch(who, &id, if_match.as_deref(), change).await)
    }

    /// Deletes a subscription (R-CP-16); true once it is gone.
    async fn delete_subscription(
        &self,
        ctx: &Context<'_>,
        id: String,
        idempotency_key: String,
    ) -> Out<bool> {
        let (control, who) = parts(ctx)?;
        let path = format!("/v1/subscriptions/{id}");
        let change = Change {
            method: "DELETE",
            path: &path,
            key: Some(&idempotency_key),
            body: b"",
        };
        body(control.delete(who, &id, change).await).map(|_| true)
    }

    /// Pauses deliveries (R-CP-11); the subscription as it is now.
    async fn pause_subscription(&self, ctx: &Context<'_>, id: String) -> Out<SubscriptionNode> {
        self.set_paused(ctx, id, true).await
    }

    /// Resumes deliveries (R-CP-11); the subscription as it is now.
    async fn resume_subscription(&self, ctx: &Context<'_>, id: String) -> Out<SubscriptionNode> {
        self.set_paused(ctx, id, false).await
    }

    /// Sends a ping to the destination (R-CP-6).
    async fn ping_subscription(&self, ctx: &Context<'_>, id: String) -> Out<ProbeResult> {
        let (control, who) = parts(ctx)?;
        let (v, _) = body(control.probe(who, &id, ProbeKind::Ping).await)?;
        Ok(ProbeResult::from_view(&v))
    }

    /// Verifies the destination (R-CP-6): a success activates a pending subscription.
    async fn verify_subscription(&self, ctx: &Context<'_>, id: String) -> Out<ProbeResult> {
        let (control, who) = parts(ctx)?;
        let (v, _) = body(control.probe(who, &id, ProbeKind::Verify).await)?;
        Ok(ProbeResult::from_view(&v))
    }

    /// Rotates a webhook's signing secret (R-CP-9).
    async fn rotate_secret(
        &self,
        ctx: &Context<'_>,
        id: String,
        idempotency_key: String,
    ) -> Out<RotatedSecret> {
        let (control, who) = parts(ctx)?;
        let path = format!("/v1/subscriptions/{id}/secret/rotate");
        let change = Change {
            method: "POST",
            path: &path,
            key: Some(&idempotency_key),
            body: b"",
        };
        let (v, etag) = body(control.rotate(who, &id, change).await)?;
        Ok(RotatedSecret {
            secret: v["secret"].as_str().unwrap_or_default().to_owned(),
            overlap_until: v["overlapUntil"].as_str().map(str::to_owned),
            etag,
        })
    }

    /// Records a delegated AWS grant (R-CP-7) once STS shows the role demands the ExternalId;
    /// `verifySubscription` then activates.
    async fn put_delegated_grant(
        &self,
        ctx: &Context<'_>,
        id: String,
        idempotency_key: String,
        role_arn: String,
        region: String,
        destination: Option<String>,
    ) -> Out<SubscriptionNode> {
        let (control, who) = parts(ctx)?;
        let path = format!("/v1/subscriptions/{id}/delegated-grant");
        let mut grant = serde_json::json!({"role_arn": role_arn, "region": region});
        if let Some(d) = destination {
            grant["destination"] = d.into();
        }
        let body = grant.to_string();
        let change = Change {
            method: "PUT",
            path: &path,
            key: Some(&idempotency_key),
            body: body.as_bytes(),
        };
        node(control.put_grant(who, &id, change).await)
    }

    /// Stores a queue subscription's credential after probing with it (R-CP-6): `credential`
    /// is the object `PUT /v1/subscriptions/:id/credential` takes.
    async fn put_credential(
        &self,
        ctx: &Context<'_>,
        id: String,
        credential: async_graphql::Json<Value>,
    ) -> Out<SubscriptionNode> {
        let (control, who) = parts(ctx)?;
        let body = serde_json::to_vec(&credential.0).unwrap_or_default();
        node(control.put_credential(who, &id, &body).await)
    }
}

impl SubscriptionMutations {
    async fn set_paused(
        &self,
        ctx: &Context<'_>,
        id: String,
        pause: bool,
    ) -> Out<SubscriptionNode> {
        let (control, who) = parts(ctx)?;
        body(control.set_paused(who, &id, pause).await)?;
        node(control.get(who, &id).await)
    }
}

#[cfg(test)]
mod tests {
    /// R-TR-1: the committed SDL is the schema the server serves. After a deliberate change,
    /// rewrite it with `STREAMING_HUB_WRITE_SDL=1 cargo test -p hub-control r_tr_1_the_committed`.
    #[test]
    fn r_tr_1_the_committed_sdl_is_the_served_schema() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../schema/graphql/schema.graphql"
        );
        let served = super::sdl();
        if std::env::var_os("STREAMING_HUB_WRITE_SDL").is_some() {
            std::fs::write(path, &served).expect("write the SDL");
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == served,
            "schema/graphql/schema.graphql differs from the served schema; rewrite it (see this test's doc)"
        );
    }
}
