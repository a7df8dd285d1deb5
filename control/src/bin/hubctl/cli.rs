//! The command line.

use clap::{Args, Parser, Subcommand};

use hub_control::grpc::pb;

#[derive(Debug, Parser)]
#[command(name = "hubctl", about = "Streaming Hub from a terminal, over gRPC")]
pub struct Cli {
    /// The hub's address (gRPC shares the HTTP listener).
    #[arg(long, env = "HUBCTL_ADDR", default_value = "http://127.0.0.1:8080")]
    pub addr: String,
    /// A bearer token (`hub-control token` mints one for a local hub).
    #[arg(long, env = "HUBCTL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, read, change and probe subscriptions.
    #[command(alias = "subs")]
    Subscriptions {
        #[command(subcommand)]
        command: SubsCommand,
    },
    /// Read a pull subscription's events by seq.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// What ran out of attempts, and replaying it.
    DeadLetters {
        #[command(subcommand)]
        command: DeadLettersCommand,
    },
    /// A subscription's delivery health: status, recent outcomes, counts.
    Health { id: String },
    /// The event types subscriptions may name.
    Catalog,
    /// Which engine delivers which partitions (an operator token).
    Ownership,
}

#[derive(Debug, Subcommand)]
pub enum DeadLettersCommand {
    List {
        id: String,
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Fresh attempts for the given dead letters (`--letter`, repeatable), or for all of them.
    Replay {
        id: String,
        #[arg(long = "letter")]
        letters: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SubsCommand {
    Create {
        #[command(flatten)]
        fields: NewFields,
        /// Made for you (and printed) when absent.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    List {
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
    Get {
        id: String,
    },
    Edit {
        id: String,
        #[command(flatten)]
        fields: EditFields,
        /// The ETag the change is meant for (a stale one is refused).
        #[arg(long)]
        if_match: Option<String>,
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    Pause {
        id: String,
    },
    Resume {
        id: String,
    },
    Ping {
        id: String,
    },
    Verify {
        id: String,
    },
    RotateSecret {
        id: String,
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    Delete {
        id: String,
        #[arg(long)]
        idempotency_key: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct NewFields {
    #[arg(long)]
    name: String,
    /// webhook, pull, sqs, rabbitmq or eventbridge.
    #[arg(long)]
    kind: String,
    #[arg(long)]
    endpoint: Option<String>,
    /// An event type to receive (repeatable); none: every event.
    #[arg(long = "event-type")]
    event_types: Vec<String>,
    #[arg(long)]
    schema_major: Option<u32>,
    #[arg(long)]
    origin: Option<String>,
    #[arg(long)]
    timeout_ms: Option<u32>,
}

impl NewFields {
    pub fn message(&self) -> pb::CreateSubscriptionRequest {
        pb::CreateSubscriptionRequest {
            name: self.name.clone(),
            sink_kind: self.kind.clone(),
            endpoint: self.endpoint.clone(),
            event_types: self.event_types.clone(),
            schema_major: self.schema_major,
            origin: self.origin.clone(),
            timeout_ms: self.timeout_ms,
            ..Default::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct EditFields {
    /// Required on every edit, as on REST.
    #[arg(long)]
    schema_major: u32,
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    endpoint: Option<String>,
    /// Replaces the event types (repeatable).
    #[arg(long = "event-type")]
    event_types: Vec<String>,
    #[arg(long)]
    timeout_ms: Option<u32>,
}

impl EditFields {
    pub fn message(&self, id: &str) -> pb::EditSubscriptionRequest {
        pb::EditSubscriptionRequest {
            id: id.to_owned(),
            schema_major: self.schema_major,
            name: self.name.clone(),
            endpoint: self.endpoint.clone(),
            event_types: (!self.event_types.is_empty()).then(|| pb::EventTypes {
                values: self.event_types.clone(),
            }),
            timeout_ms: self.timeout_ms,
            ..Default::default()
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// One page; without --after it continues from the subscription's read position.
    Pull {
        id: String,
        #[arg(long)]
        after: Option<u64>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Prints events as they are stored, from --after (0: the start of retention).
    Tail {
        id: String,
        #[arg(long)]
        after: Option<u64>,
        /// Stop after this many events.
        #[arg(long)]
        count: Option<u64>,
    },
}
