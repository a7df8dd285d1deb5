//! Pull by `seq` over gRPC (R-TR-2, R-CP-14): `Events.Subscribe` streams stored events and then
//! new ones, resumes from a cursor with nothing skipped or repeated; `Events.Pull` pages as REST
//! does; the same refusals as REST.

use std::time::Duration;

use serde_json::json;
use tonic::Request;
use uuid::Uuid;

use hub_control::grpc::pb::events_client::EventsClient;
use hub_control::grpc::pb::{self, Event, PullRequest, SubscribeRequest};

use crate::delivery::Setup;
use crate::pull::{create_pull, ingest};
use crate::support::*;

pub(crate) fn authorized<T>(message: T, token: &str) -> Request<T> {
    let mut r = Request::new(message);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("metadata"),
    );
    r
}

/// The next `n` events of a stream, within 20 s.
async fn next_events(stream: &mut tonic::Streaming<Event>, n: usize) -> Vec<Event> {
    let mut got = Vec::new();
    while got.len() < n {
        let next = tokio::time::timeout(Duration::from_secs(20), stream.message())
            .await
            .expect("an event within 20 s")
            .expect("the stream stays up")
            .expect("the stream does not end");
        got.push(next);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_tr_2_subscribe_streams_stored_then_new_events_and_resumes_from_its_cursor() {
    subscribe_streams_and_resumes(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_tr_2_subscribe_streams_stored_then_new_events_and_resumes_from_its_cursor_cql() {
    subscribe_streams_and_resumes(Backend::Cql).await;
}

/// Posts one `loan.approved` event of `tenant`; its id.
async fn ingest_approved(
    http: &reqwest::Client,
    producer: &crate::support::Producer,
    tenant: &str,
) -> String {
    let event = Uuid::now_v7();
    let status = ingest(http, producer, tenant, event, "loan.approved").await;
    assert_eq!(status, 202);
    event.to_string()
}

async fn subscribe_streams_and_resumes(backend: Backend) {
    let grace = [("STREAMING_HUB_STOP_GRACE_MS", "3000")];
    let setup = Setup::start_with("grpc-pull", backend, &grace).await;
    let (api, tenant) = (&setup.api, &setup.tenant);
    let id = create_pull(api, "stream", json!({})).await;
    let (http, producer) = (reqwest::Client::new(), setup.engine.producer());
    let mut produced = Vec::new();
    for _ in 0..5 {
        produced.push(ingest_approved(&http, &producer, tenant).await);
    }
    let mut client = EventsClient::connect(setup.engine.http.clone())
        .await
        .expect("connect");
    let ask = |after: u64| {
        authorized(
            SubscribeRequest {
                subscription_id: id.clone(),
                after,
            },
            api.token(),
        )
    };
    let mut stream = client
        .subscribe(ask(0))
        .await
        .expect("subscribe")
        .into_inner();
    let stored = next_events(&mut stream, 5).await;
    // New events after the stream started arrive on it too.
    for _ in 0..3 {
        produced.push(ingest_approved(&http, &producer, tenant).await);
    }
    let live = next_events(&mut stream, 3).await;
    let all: Vec<&Event> = stored.iter().chain(&live).collect();
    let ids: Vec<String> = all.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids, produced, "every event once, in the order stored");
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq), "seq order");
    assert!(all
        .iter()
        .all(|e| e.cursor == e.seq && e.key == "loan.approved"));
    drop(stream);

    // Resume after the fourth: the fifth to the eighth, nothing skipped or repeated.
    let mut resumed = client
        .subscribe(ask(all[3].cursor))
        .await
        .expect("resume")
        .into_inner();
    let again: Vec<String> = next_events(&mut resumed, 4)
        .await
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(again, produced[4..].to_vec());

    // A page over gRPC is the REST page.
    let page = client
        .pull(authorized(
            PullRequest {
                subscription_id: id.clone(),
                after: Some(0),
                limit: Some(3),
            },
            api.token(),
        ))
        .await
        .expect("pull")
        .into_inner();
    let (status, rest) = api
        .call(
            "GET",
            &format!("/v1/subscriptions/{id}/events?after=0&limit=3"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let rest_ids: Vec<&str> = rest["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["id"].as_str().unwrap_or_default())
        .collect();
    let grpc_ids: Vec<&str> = page.items.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(grpc_ids, rest_ids);
    assert_eq!(Some(page.next_after), rest["next_after"].as_u64());
    // And over GraphQL (R-TR-1).
    let query = "query($id: String!) { events(subscriptionId: $id, after: 0, limit: 3) \
                 { items { id seq data } nextAfter } }";
    let answer = crate::graphql_live::graphql(&setup.engine.http, api.token(), &id, query).await;
    let gql_ids: Vec<&str> = answer["data"]["events"]["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(gql_ids, rest_ids, "{answer}");
    assert_eq!(answer["data"]["events"]["nextAfter"], rest["next_after"]);

    // Refusals: a push subscription, another tenant, no token.
    let (status, push) = api
        .call(
            "POST",
            "/v1/subscriptions",
            Some(json!({"name": "push", "sink_kind": "webhook", "endpoint": setup.receiver.url("/h")})),
        )
        .await;
    assert_eq!(status, 201);
    let push_id = push["id"].as_str().expect("id").to_owned();
    let not_pull = client
        .subscribe(authorized(
            SubscribeRequest {
                subscription_id: push_id,
                after: 0,
            },
            api.token(),
        ))
        .await
        .expect_err("a push subscription is not read");
    assert_eq!(not_pull.code(), tonic::Code::FailedPrecondition);
    let other = crate::delivery::Tenant::new(&setup.engine, setup.dir.path(), "t-someone-else");
    let foreign = client
        .subscribe(authorized(
            SubscribeRequest {
                subscription_id: id.clone(),
                after: 0,
            },
            other.token(),
        ))
        .await
        .expect_err("another tenant's");
    assert_eq!(foreign.code(), tonic::Code::NotFound);
    let anonymous = client
        .subscribe(Request::new(SubscribeRequest {
            subscription_id: id,
            after: 0,
        }))
        .await
        .expect_err("no token");
    assert_eq!(anonymous.code(), tonic::Code::Unauthenticated);
    // A stop ends within its grace though a stream is still open (and exits 0).
    let _still_open = (resumed, client);
    setup.engine.stop();
}

/// A tenant's `DeadLetters` and `Deliveries` clients, for the delivery tests.
pub(crate) struct DeliveriesGrpc {
    channel: tonic::transport::Channel,
    token: String,
}

impl DeliveriesGrpc {
    pub(crate) async fn connect(http: &str, token: &str) -> Self {
        let channel = tonic::transport::Endpoint::from_shared(http.to_owned())
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        Self {
            channel,
            token: token.to_owned(),
        }
    }

    /// The subscription's dead letters (first page) and its delivery health.
    pub(crate) async fn dead_letters_and_health(
        &self,
        id: &str,
    ) -> (Vec<pb::DeadLetter>, pb::DeliveryHealth) {
        let mut letters = pb::dead_letters_client::DeadLettersClient::new(self.channel.clone());
        let list = letters
            .list(authorized(
                pb::ListDeadLettersRequest {
                    subscription_id: id.to_owned(),
                    ..Default::default()
                },
                &self.token,
            ))
            .await
            .expect("dead letters")
            .into_inner();
        let mut deliveries = pb::deliveries_client::DeliveriesClient::new(self.channel.clone());
        let health = deliveries
            .health(authorized(
                pb::DeliveryHealthRequest {
                    subscription_id: id.to_owned(),
                },
                &self.token,
            ))
            .await
            .expect("health")
            .into_inner();
        (list.items, health)
    }

    /// Replays one dead letter; answers how many were replayed.
    pub(crate) async fn replay(&self, id: &str, letter: &str) -> u64 {
        let mut letters = pb::dead_letters_client::DeadLettersClient::new(self.channel.clone());
        letters
            .replay(authorized(
                pb::ReplayDeadLettersRequest {
                    subscription_id: id.to_owned(),
                    ids: vec![letter.to_owned()],
                },
                &self.token,
            ))
            .await
            .expect("replay")
            .into_inner()
            .replayed
    }
}
