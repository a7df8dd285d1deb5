//! GraphQL's live `deliveryOutcomes` (R-TR-1, R-CP-19) over `graphql-transport-ws` against the
//! standalone hub: the outcomes of real deliveries arrive in order — a success, a failure with a
//! retry due, a dead letter.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::delivery::{ingest_one, Setup};
use crate::receiver::Act;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub(crate) async fn send(ws: &mut Socket, v: Value) {
    ws.send(Message::Text(v.to_string().into()))
        .await
        .expect("send");
}

/// The next protocol message that is not a ping, within 20 s.
pub(crate) async fn next(ws: &mut Socket) -> Value {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("a message within 20 s")
            .expect("the socket stays open")
            .expect("a frame");
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(&t).expect("JSON");
            if v["type"] != "ping" {
                return v;
            }
        }
    }
}

/// A GraphQL request over HTTP with `$id` set to `id`; the whole answer.
pub(crate) async fn graphql(http: &str, token: &str, id: &str, query: &str) -> Value {
    reqwest::Client::new()
        .post(format!("{http}/graphql"))
        .bearer_auth(token)
        .json(&json!({"query": query, "variables": {"id": id}}))
        .send()
        .await
        .expect("graphql")
        .json()
        .await
        .expect("JSON")
}

/// A `graphql-transport-ws` connection to the hub, initialised with `token`.
pub(crate) async fn connect(http: &str, token: &str) -> Socket {
    let url = http.replace("http://", "ws://") + "/graphql/ws";
    let mut request = url.into_client_request().expect("request");
    request.headers_mut().insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().expect("header"),
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket");
    let bearer = format!("Bearer {token}");
    send(
        &mut ws,
        json!({"type": "connection_init", "payload": {"authorization": bearer}}),
    )
    .await;
    assert_eq!(next(&mut ws).await["type"], "connection_ack");
    ws
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_tr_1_delivery_outcomes_stream_a_success_a_failure_and_a_dead_letter_in_order() {
    let setup = Setup::start("gql-live").await;
    let (id, _) = setup
        .api
        .active_webhook(
            "watched",
            &setup.receiver.url("/watched"),
            json!({"retry_schedule": [0, 1]}),
        )
        .await;
    let mut ws = connect(&setup.engine.http, setup.api.token()).await;
    let query = "subscription($id: String!) { deliveryOutcomes(subscriptionId: $id) { \
                 subscriptionId eventId attempt outcome errorClass statusCode } }";
    send(
        &mut ws,
        json!({"id": "1", "type": "subscribe", "payload": {"query": query, "variables": {"id": id}}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await; // the subscription is listening

    let delivered = ingest_one(&setup.engine, &setup.tenant, &[]).await;
    let first = next(&mut ws).await;
    assert_eq!(first["type"], "next", "{first}");
    let o = &first["payload"]["data"]["deliveryOutcomes"];
    assert_eq!(
        (
            o["eventId"].as_str(),
            o["attempt"].as_u64(),
            o["outcome"].as_str()
        ),
        (
            Some(delivered.to_string().as_str()),
            Some(1),
            Some("delivered")
        )
    );
    assert_eq!(o["subscriptionId"], id.as_str());

    setup.receiver.script(&[], Act::Status(500));
    let failing = ingest_one(&setup.engine, &setup.tenant, &[]).await;
    let want = [(1, "retrying"), (2, "dead_lettered")];
    for (attempt, outcome) in want {
        let m = next(&mut ws).await;
        let o = &m["payload"]["data"]["deliveryOutcomes"];
        assert_eq!(
            (
                o["eventId"].as_str(),
                o["attempt"].as_u64(),
                o["outcome"].as_str()
            ),
            (
                Some(failing.to_string().as_str()),
                Some(attempt),
                Some(outcome)
            ),
            "{m}"
        );
        assert_eq!(
            (o["errorClass"].as_str(), o["statusCode"].as_u64()),
            (Some("http_status"), Some(500))
        );
    }

    // Queries over what the engine holds: the dead letter, the health, a replay (R-CP-19).
    let letters = graphql(&setup.engine.http, setup.api.token(), &id, "query($id: String!) { deadLetters(subscriptionId: $id) { items { id eventId attempts lastAttempt { errorClass statusCode } } } deliveryHealth(subscriptionId: $id) { status deadLetters } }").await;
    let item = &letters["data"]["deadLetters"]["items"][0];
    assert_eq!(item["eventId"], failing.to_string(), "{letters}");
    assert_eq!(item["lastAttempt"]["statusCode"], 500);
    assert_eq!(letters["data"]["deliveryHealth"]["status"], "Failing");
    setup.receiver.script(&[], Act::Status(204));
    let replayed = graphql(
        &setup.engine.http,
        setup.api.token(),
        &id,
        "mutation($id: String!) { replayDeadLetters(subscriptionId: $id) }",
    )
    .await;
    assert_eq!(replayed["data"]["replayDeadLetters"], 1, "{replayed}");
    let again = next(&mut ws).await;
    let o = &again["payload"]["data"]["deliveryOutcomes"];
    assert_eq!(
        (o["eventId"].as_str(), o["outcome"].as_str()),
        (Some(failing.to_string().as_str()), Some("delivered")),
        "the replay's outcome arrives too"
    );

    // Another tenant's subscription id: refused with the code REST gives.
    let other = crate::delivery::Tenant::new(&setup.engine, setup.dir.path(), "t-other");
    let mut stranger = connect(&setup.engine.http, other.token()).await;
    send(
        &mut stranger,
        json!({"id": "1", "type": "subscribe", "payload": {"query": query, "variables": {"id": id}}}),
    )
    .await;
    let refused = next(&mut stranger).await;
    let code = refused["payload"][0]["extensions"]["code"]
        .as_str()
        .or(refused["payload"]["errors"][0]["extensions"]["code"].as_str());
    assert_eq!(code, Some("subscription_not_found"), "{refused}");
    drop((ws, stranger));
    setup.engine.stop();
}

/// R-TR-1, R-CP-14: GraphQL's `events` subscription streams a pull subscription's stored events
/// in `seq` order, then new ones as they are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_tr_1_events_stream_stored_then_new_events_in_seq_order() {
    let setup = Setup::start("gql-events").await;
    let id = crate::pull::create_pull(&setup.api, "stream", json!({})).await;
    let mut produced = ingest_pull_events(&setup, 3).await;
    let mut ws = connect(&setup.engine.http, setup.api.token()).await;
    let query =
        "subscription($id: String!) { events(subscriptionId: $id, after: 0) { id seq key } }";
    send(
        &mut ws,
        json!({"id": "1", "type": "subscribe", "payload": {"query": query, "variables": {"id": id}}}),
    )
    .await;
    let mut got = Vec::new();
    let mut seqs = Vec::new();
    while got.len() < 5 {
        if got.len() == 3 {
            produced.extend(ingest_pull_events(&setup, 2).await);
        }
        let m = next(&mut ws).await;
        let e = &m["payload"]["data"]["events"];
        assert_eq!(e["key"], "loan.approved", "{m}");
        got.push(e["id"].as_str().expect("id").to_owned());
        seqs.push(e["seq"].as_u64().expect("seq"));
    }
    assert_eq!(got, produced, "stored, then new, each once");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seq order");
    drop(ws);
    setup.engine.stop();
}

/// Posts `n` events of the setup's tenant; their ids in order.
async fn ingest_pull_events(setup: &Setup, n: usize) -> Vec<String> {
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for _ in 0..n {
        let event = uuid::Uuid::now_v7();
        let status = crate::pull::ingest(
            &http,
            &setup.engine.producer(),
            &setup.tenant,
            event,
            "loan.approved",
        )
        .await;
        assert_eq!(status, 202);
        ids.push(event.to_string());
    }
    ids
}
