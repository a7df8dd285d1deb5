//! The ScyllaDB (CQL) store. See `schema/cql/`.
