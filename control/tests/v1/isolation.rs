//! R-SEC-3 on every transport, generated from what each one declares — REST from the OpenAPI
//! document (itself checked against the router both ways), GraphQL from the SDL, gRPC from the
//! `.proto` files — so a new route, field or method that takes a subscription id is walked
//! without anyone adding it here. Another tenant's id must read as absent everywhere.

use bytes::{Buf, BufMut};
use serde_json::{json, Value};

use super::{call, create, gql, serve, webhook, Hub, Store, ALL};

/// Bodies for the REST routes that take one, by method and path: valid enough that only the
/// subscription's owner decides the answer. A new route with a body fails the walk until it has
/// one here.
fn rest_body(method: &str, path: &str) -> Option<Value> {
    Some(
        match (method, path.rsplit('/').next().unwrap_or_default()) {
            ("PATCH", "{id}") => json!({"schema_major": 1, "name": "x"}),
            ("POST", "replay") => json!({}),
            ("PUT", "credential") => json!({"username": "u", "password": "p"}),
            ("PUT", "delegated-grant") => {
                json!({"role_arn": "arn:aws:iam::123456789012:role/x", "region": "us-east-1"})
            }
            _ => return None,
        },
    )
}

async fn rest_walk(hub: &Hub, other: &str, id: &str) -> usize {
    let doc = call(hub, "GET", "/v1/openapi.json", None, &[], "")
        .await
        .json;
    let mut walked = 0;
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        if !path.contains("{id}") {
            continue;
        }
        for (method, op) in ops.as_object().expect("operations") {
            const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];
            if !METHODS.contains(&method.as_str()) {
                continue; // `parameters`, shared by the path's operations
            }
            let method = method.to_ascii_uppercase();
            let body = match (op.get("requestBody"), rest_body(&method, path)) {
                (None, _) => String::new(),
                (Some(_), Some(b)) => b.to_string(),
                (Some(_), None) => panic!("{method} {path} takes a body: add one to rest_body"),
            };
            let key = format!("iso-{walked}");
            let headers = [
                ("x-idempotency", key.as_str()),
                ("content-type", "application/json"),
            ];
            let url = path.replace("{id}", id);
            let r = call(hub, &method, &url, Some(other), &headers, &body).await;
            assert_eq!(
                (r.status.as_u16(), r.json["code"].as_str()),
                (404, Some("subscription_not_found")),
                "REST {method} {path}"
            );
            walked += 1;
        }
    }
    walked
}

/// A GraphQL field of the query or mutation root: name, arguments `(name, type)`, result type.
struct Field {
    name: String,
    args: Vec<(String, String)>,
    returns: String,
}

/// The fields of `type <root> { … }` in the SDL (descriptions skipped).
fn root_fields(sdl: &str, root: &str) -> Vec<Field> {
    let start = sdl
        .find(&format!("type {root} {{"))
        .unwrap_or_else(|| panic!("{root} in the SDL"));
    let block = &sdl[start..];
    let block = &block[..block.find("\n}").expect("end of the type")];
    let mut fields = Vec::new();
    let mut in_description = false;
    for line in block.lines().skip(1).map(str::trim) {
        if line.starts_with("\"\"\"") {
            in_description = !(in_description || line.len() > 3 && line.ends_with("\"\"\""));
            continue;
        }
        if in_description || line.is_empty() {
            continue;
        }
        let (head, returns) = line.rsplit_once("): ").unwrap_or_else(|| {
            let (name, returns) = line.split_once(": ").expect("field: Type");
            (name, returns)
        });
        let (name, args) = head.split_once('(').unwrap_or((head, ""));
        let args = args
            .split(", ")
            .filter(|a| !a.is_empty())
            .filter_map(|a| a.split_once(": "))
            .map(|(n, t)| (n.to_owned(), t.to_owned()))
            .collect();
        fields.push(Field {
            name: name.to_owned(),
            args,
            returns: returns.to_owned(),
        });
    }
    fields
}

/// A literal for a required argument; `None` leaves an optional one out.
fn gql_argument(name: &str, ty: &str, id: &str, n: usize) -> Option<String> {
    if !ty.ends_with('!') {
        return None;
    }
    Some(match (name, ty) {
        ("id" | "subscriptionId", _) => format!("{id:?}"),
        ("idempotencyKey", _) => format!("\"iso-gql-{n}\""),
        ("input", "EditSubscriptionInput!") => "{schemaMajor: 1, name: \"x\"}".into(),
        ("credential", _) => "{username: \"u\", password: \"p\"}".into(),
        ("roleArn", _) => "\"arn:aws:iam::123456789012:role/x\"".into(),
        ("region", _) => "\"us-east-1\"".into(),
        ("after", "Int!") => "0".into(),
        _ => panic!("GraphQL argument {name}: {ty} is required: add a value to gql_argument"),
    })
}

/// The documents of `root`'s fields that take a subscription id: `(field, document)`.
fn id_documents(sdl: &str, root: &str, keyword: &str, id: &str) -> Vec<(String, String)> {
    let scalars = ["String", "Int", "Boolean", "ID", "Float", "JSON"];
    let mut documents = Vec::new();
    for field in root_fields(sdl, root) {
        let takes_id = field
            .args
            .iter()
            .any(|(n, _)| n == "id" || n == "subscriptionId");
        if !takes_id {
            continue;
        }
        let n = documents.len();
        let args: Vec<String> = field
            .args
            .iter()
            .filter_map(|(a, t)| Some(format!("{a}: {}", gql_argument(a, t, id, n)?)))
            .collect();
        let base = field.returns.trim_matches(|c| matches!(c, '[' | ']' | '!'));
        let selection = if scalars.contains(&base) {
            ""
        } else {
            " { __typename }"
        };
        let document = format!(
            "{keyword} {{ {}({}){selection} }}",
            field.name,
            args.join(", ")
        );
        documents.push((field.name, document));
    }
    documents
}

/// The live subscriptions (`graphql-transport-ws`): each refuses another tenant's id before
/// anything streams.
async fn graphql_ws_walk(hub: &Hub, other: &str, id: &str) -> usize {
    let sdl = include_str!("../../../schema/graphql/schema.graphql");
    let mut walked = 0;
    for (field, document) in id_documents(sdl, "SubscriptionRoot", "subscription", id) {
        let answer = super::ws_first_answer(hub, other, &document, json!({})).await;
        assert_eq!(
            super::ws_code(&answer),
            Some("subscription_not_found"),
            "GraphQL subscription {field}: {answer}"
        );
        walked += 1;
    }
    walked
}

async fn graphql_walk(hub: &Hub, other: &str, id: &str) -> usize {
    let sdl = include_str!("../../../schema/graphql/schema.graphql");
    let mut walked = 0;
    for (root, keyword) in [("QueryRoot", "query"), ("MutationRoot", "mutation")] {
        for (_, document) in id_documents(sdl, root, keyword, id) {
            let (_, code) = gql(hub, Some(other), &document, json!({})).await;
            assert_eq!(
                code.as_deref(),
                Some("subscription_not_found"),
                "GraphQL {document}"
            );
            walked += 1;
        }
    }
    walked
}

/// An rpc of the `.proto` files: its path, whether it streams, and the request's fields by name
/// `(number, type)`.
struct Rpc {
    path: String,
    streams: bool,
    fields: Vec<(String, u32, String)>,
}

fn proto_rpcs() -> Vec<Rpc> {
    let files = [
        include_str!("../../../schema/proto/lerian/streaming/v1/subscriptions.proto"),
        include_str!("../../../schema/proto/lerian/streaming/v1/deliveries.proto"),
        include_str!("../../../schema/proto/lerian/streaming/v1/events.proto"),
        include_str!("../../../schema/proto/lerian/streaming/v1/catalog.proto"),
    ];
    let all = files.join("\n");
    let message_fields = |name: &str| -> Vec<(String, u32, String)> {
        let start = all
            .find(&format!("message {name} {{"))
            .unwrap_or_else(|| panic!("message {name}"));
        let block = &all[start..];
        let block = &block[..block.find("\n}").expect("end of the message")];
        block
            .lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.starts_with("//") && l.contains(" = "))
            .filter_map(|l| {
                let (decl, number) = l.trim_end_matches(';').split_once(" = ")?;
                let mut words = decl.split_whitespace().rev();
                let name = words.next()?.to_owned();
                let ty = words.next()?.to_owned();
                Some((name, number.trim().parse().ok()?, ty))
            })
            .collect()
    };
    let mut rpcs = Vec::new();
    let mut service = String::new();
    for line in all.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("service ") {
            service = rest.trim_end_matches(" {").trim().to_owned();
        }
        let Some(rest) = line.strip_prefix("rpc ") else {
            continue;
        };
        let (method, rest) = rest.split_once('(').expect("rpc Name(");
        let (request, rest) = rest.split_once(')').expect("(Request)");
        rpcs.push(Rpc {
            path: format!("/lerian.streaming.v1.{service}/{method}"),
            streams: rest.contains("(stream "),
            fields: message_fields(request),
        });
    }
    rpcs
}

/// A request message holding `id` in its id field and sample values in the fields that must be
/// set for the call to reach the ownership check.
fn grpc_message(rpc: &Rpc, id: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut has_id = false;
    for (name, number, ty) in &rpc.fields {
        match (name.as_str(), ty.as_str()) {
            ("id" | "subscription_id", "string") => {
                prost::encoding::string::encode(*number, &id.to_owned(), &mut out);
                has_id = true;
            }
            ("schema_major", "uint32") => prost::encoding::uint32::encode(*number, &1, &mut out),
            ("credential_json", _) => prost::encoding::string::encode(
                *number,
                &r#"{"username":"u","password":"p"}"#.to_owned(),
                &mut out,
            ),
            ("role_arn", _) => prost::encoding::string::encode(
                *number,
                &"arn:aws:iam::123456789012:role/x".to_owned(),
                &mut out,
            ),
            ("region", _) => {
                prost::encoding::string::encode(*number, &"us-east-1".to_owned(), &mut out)
            }
            _ => {}
        }
    }
    has_id.then_some(out)
}

/// Sends and receives protobuf messages as bytes: the walk needs no generated types.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        Ok(Some(bytes.to_vec()))
    }
}

async fn grpc_walk(hub: &Hub, other: &str, id: &str) -> usize {
    let base = serve(hub).await;
    let channel = tonic::transport::Endpoint::from_shared(base)
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut walked = 0;
    for rpc in proto_rpcs() {
        let Some(message) = grpc_message(&rpc, id) else {
            continue;
        };
        let mut client = tonic::client::Grpc::new(channel.clone());
        client.ready().await.expect("ready");
        let mut request = tonic::Request::new(message);
        let meta = request.metadata_mut();
        meta.insert(
            "authorization",
            format!("Bearer {other}").parse().expect("metadata"),
        );
        let key = format!("iso-grpc-{walked}");
        meta.insert("x-idempotency", key.parse().expect("metadata"));
        let path = rpc.path.parse().expect("path");
        let status = if rpc.streams {
            client
                .server_streaming(request, path, RawCodec)
                .await
                .map(drop)
        } else {
            client.unary(request, path, RawCodec).await.map(drop)
        }
        .expect_err(&rpc.path);
        assert_eq!(
            (status.code(), super::reason(&status).as_str()),
            (tonic::Code::NotFound, "subscription_not_found"),
            "gRPC {}",
            rpc.path
        );
        walked += 1;
    }
    walked
}

/// R-SEC-3 (issue 16): every route of every transport that takes a subscription id answers
/// another tenant's id as absent, and changes nothing of it.
pub(super) async fn r_sec_3_every_route_of_every_transport_reads_another_tenants_id_as_absent(
    store: Store,
) {
    let hub = super::hub(store).await;
    let (a, b) = (hub.token("t-a", ALL), hub.token("t-b", ALL));
    let created = create(&hub, &a, "k", &webhook("mine")).await;
    let id = created.json["id"].as_str().expect("id").to_owned();
    let etag = created.headers["etag"].to_str().expect("etag").to_owned();

    let rest = rest_walk(&hub, &b, &id).await;
    let graphql = graphql_walk(&hub, &b, &id).await;
    let live = graphql_ws_walk(&hub, &b, &id).await;
    let grpc = grpc_walk(&hub, &b, &id).await;
    // The walks found what the documents declare (a parser gone blind would pass vacuously).
    assert!(
        rest >= 15 && graphql >= 15 && live >= 2 && grpc >= 16,
        "walked {rest} REST, {graphql} GraphQL, {live} live GraphQL, {grpc} gRPC"
    );

    let path = format!("/v1/subscriptions/{id}");
    let after = call(&hub, "GET", &path, Some(&a), &[], "").await;
    assert_eq!(
        after.headers["etag"].to_str().expect("etag"),
        etag,
        "unchanged"
    );
    let listed = call(&hub, "GET", "/v1/subscriptions", Some(&b), &[], "").await;
    assert_eq!(listed.json["items"], json!([]));
}
