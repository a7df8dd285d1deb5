//! `hubctl`: the hub for tenants and operators from a terminal, over gRPC (R-TR-3). Human tables
//! by default, `--json` for scripts (one JSON object per result; per event for `events tail`).
//! Exit codes say what failed: 0 done, 2 usage, 3 not authenticated or not allowed, 4 not found,
//! 5 conflict (name taken, stale `--if-match`, idempotency), 6 invalid input, 7 hub unreachable
//! or unavailable, 1 anything else.

mod cli;
mod render;

use clap::Parser;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

use cli::{Cli, Command, DeadLettersCommand, EventsCommand, SubsCommand};
use hub_control::grpc::pb;
use pb::admin_client::AdminClient;
use pb::catalog_client::CatalogClient;
use pb::dead_letters_client::DeadLettersClient;
use pb::deliveries_client::DeliveriesClient;
use pb::events_client::EventsClient;
use pb::subscriptions_client::SubscriptionsClient;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = Cli::parse();
    let code = match run(&cli).await {
        Ok(()) => 0,
        Err(Failure::Connect(e)) => {
            eprintln!("hubctl: cannot reach the hub at {}: {e}", cli.addr);
            7
        }
        Err(Failure::Status(s)) => {
            eprintln!("hubctl: {}", render::status_line(&s));
            exit_code(&s)
        }
    };
    std::process::exit(code);
}

enum Failure {
    Connect(tonic::transport::Error),
    Status(Status),
}

impl From<Status> for Failure {
    fn from(s: Status) -> Self {
        Failure::Status(s)
    }
}

/// The exit code of a refused call (see the module's doc).
fn exit_code(s: &Status) -> i32 {
    match s.code() {
        Code::Unauthenticated | Code::PermissionDenied => 3,
        Code::NotFound => 4,
        Code::AlreadyExists | Code::Aborted | Code::FailedPrecondition => 5,
        Code::InvalidArgument | Code::OutOfRange => 6,
        Code::Unavailable | Code::DeadlineExceeded => 7,
        _ => 1,
    }
}

/// A request with the token and any extra metadata.
fn request<T>(cli: &Cli, message: T, meta: &[(&'static str, &str)]) -> Result<Request<T>, Failure> {
    let mut r = Request::new(message);
    let mut put = |name: &'static str, value: &str| {
        value
            .parse()
            .map(|v| {
                r.metadata_mut().insert(name, v);
            })
            .map_err(|_| Status::invalid_argument(format!("{name} is not valid metadata text")))
    };
    if let Some(t) = &cli.token {
        put("authorization", &format!("Bearer {t}"))?;
    }
    for (k, v) in meta {
        put(k, v)?;
    }
    Ok(r)
}

async fn channel(cli: &Cli) -> Result<Channel, Failure> {
    let endpoint = Endpoint::from_shared(cli.addr.clone()).map_err(Failure::Connect)?;
    endpoint.connect().await.map_err(Failure::Connect)
}

/// The key of a change: the user's, or a new one (printed to stderr so a retry can reuse it).
fn key(given: &Option<String>) -> String {
    given.clone().unwrap_or_else(|| {
        let made = uuid::Uuid::now_v7().to_string();
        eprintln!("hubctl: idempotency key {made}");
        made
    })
}

async fn run(cli: &Cli) -> Result<(), Failure> {
    let channel = channel(cli).await?;
    match &cli.command {
        Command::Subscriptions { command } => subscriptions(cli, channel, command).await,
        Command::Events { command } => events(cli, channel, command).await,
        Command::DeadLetters { command } => dead_letters(cli, channel, command).await,
        Command::Health { id } => {
            let q = pb::DeliveryHealthRequest {
                subscription_id: id.clone(),
            };
            let health = DeliveriesClient::new(channel)
                .health(request(cli, q, &[])?)
                .await?
                .into_inner();
            render::health(cli.json, &health);
            Ok(())
        }
        Command::Catalog => {
            let list = CatalogClient::new(channel)
                .list(request(cli, pb::ListCatalogRequest {}, &[])?)
                .await?
                .into_inner();
            render::catalog(cli.json, &list);
            Ok(())
        }
        Command::Ownership => {
            let view = AdminClient::new(channel)
                .ownership(request(cli, pb::OwnershipRequest {}, &[])?)
                .await?
                .into_inner();
            render::ownership(cli.json, &view);
            Ok(())
        }
    }
}

async fn subscriptions(cli: &Cli, channel: Channel, command: &SubsCommand) -> Result<(), Failure> {
    let mut client = SubscriptionsClient::new(channel);
    let id = |id: &str| pb::SubscriptionId { id: id.to_owned() };
    let shown = match command {
        SubsCommand::Create {
            fields,
            idempotency_key,
        } => {
            let key = key(idempotency_key);
            let r = request(cli, fields.message(), &[("x-idempotency", &key)])?;
            client.create(r).await?.into_inner()
        }
        SubsCommand::List { cursor, limit } => {
            let q = pb::ListSubscriptionsRequest {
                cursor: cursor.clone(),
                limit: *limit,
            };
            let page = client.list(request(cli, q, &[])?).await?.into_inner();
            render::subscription_page(cli.json, &page);
            return Ok(());
        }
        SubsCommand::Get { id: sub } => {
            let q = pb::GetSubscriptionRequest { id: sub.clone() };
            client.get(request(cli, q, &[])?).await?.into_inner()
        }
        SubsCommand::Edit {
            id: sub,
            fields,
            if_match,
            idempotency_key,
        } => {
            let key = key(idempotency_key);
            let mut meta = vec![("x-idempotency", key.as_str())];
            if let Some(m) = if_match {
                meta.push(("if-match", m.as_str()));
            }
            let r = request(cli, fields.message(sub), &meta)?;
            client.edit(r).await?.into_inner()
        }
        SubsCommand::Pause { id: sub } => client
            .pause(request(cli, id(sub), &[])?)
            .await?
            .into_inner(),
        SubsCommand::Resume { id: sub } => client
            .resume(request(cli, id(sub), &[])?)
            .await?
            .into_inner(),
        SubsCommand::Ping { id: sub } | SubsCommand::Verify { id: sub } => {
            let r = request(cli, id(sub), &[])?;
            let probe = match command {
                SubsCommand::Ping { .. } => client.ping(r).await?,
                _ => client.verify(r).await?,
            };
            render::probe(cli.json, &probe.into_inner());
            return Ok(());
        }
        SubsCommand::RotateSecret {
            id: sub,
            idempotency_key,
        } => {
            let key = key(idempotency_key);
            let r = request(cli, id(sub), &[("x-idempotency", &key)])?;
            render::rotated(cli.json, &client.rotate_secret(r).await?.into_inner());
            return Ok(());
        }
        SubsCommand::Delete {
            id: sub,
            idempotency_key,
        } => {
            let key = key(idempotency_key);
            client
                .delete(request(cli, id(sub), &[("x-idempotency", &key)])?)
                .await?;
            render::deleted(cli.json, sub);
            return Ok(());
        }
    };
    render::subscription(cli.json, &shown);
    Ok(())
}

async fn dead_letters(
    cli: &Cli,
    channel: Channel,
    command: &DeadLettersCommand,
) -> Result<(), Failure> {
    let mut client = DeadLettersClient::new(channel);
    match command {
        DeadLettersCommand::List { id, cursor, limit } => {
            let q = pb::ListDeadLettersRequest {
                subscription_id: id.clone(),
                cursor: cursor.clone(),
                limit: *limit,
            };
            let page = client.list(request(cli, q, &[])?).await?.into_inner();
            render::dead_letters(cli.json, &page);
        }
        DeadLettersCommand::Replay { id, letters } => {
            let q = pb::ReplayDeadLettersRequest {
                subscription_id: id.clone(),
                ids: letters.clone(),
            };
            let done = client.replay(request(cli, q, &[])?).await?.into_inner();
            render::replayed(cli.json, done.replayed);
        }
    }
    Ok(())
}

async fn events(cli: &Cli, channel: Channel, command: &EventsCommand) -> Result<(), Failure> {
    let mut client = EventsClient::new(channel);
    match command {
        EventsCommand::Pull { id, after, limit } => {
            let q = pb::PullRequest {
                subscription_id: id.clone(),
                after: *after,
                limit: *limit,
            };
            let page = client.pull(request(cli, q, &[])?).await?.into_inner();
            render::page(cli.json, &page);
        }
        EventsCommand::Tail { id, after, count } => {
            let q = pb::SubscribeRequest {
                subscription_id: id.clone(),
                after: after.unwrap_or(0),
            };
            let mut stream = client.subscribe(request(cli, q, &[])?).await?.into_inner();
            let mut seen = 0u64;
            while count.is_none_or(|c| seen < c) {
                match stream.message().await? {
                    Some(e) => render::event(cli.json, &e),
                    None => break,
                }
                seen += 1;
            }
        }
    }
    Ok(())
}
