//! The engine's integration tests: the `streaming-hub` binary against real Kafka (started by
//! `scripts/services up`), checked through its store file and Kafka's committed offsets.

mod aws;
mod backpressure;
mod catalog;
mod delivery;
mod delivery_load;
mod dlq;
mod edit;
mod graphql_live;
mod hubctl;
mod ingest_http;
mod ingest_kafka;
mod keys;
mod logs;
mod marks;
mod ownership_view;
mod partition_feed;
mod partners;
mod pull;
mod pull_grpc;
mod rabbitmq;
mod readiness;
mod receiver;
mod scale_out;
mod static_membership;
mod support;
mod trace;
mod transport_security;
mod two_process;
