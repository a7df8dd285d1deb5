//! One integration-test binary for the workspace: real services on loopback.

mod control_store_cql;
mod cql_security;
mod grant_aws;
mod smoke_aws;
mod smoke_cql;
mod smoke_kafka;
mod smoke_rabbitmq;
mod smoke_runtime;
mod store_cql;
