//! CQL with authentication and TLS (issue 16) against the services' second Cassandra, which
//! takes only TLS connections (its certificate signed by the test CA) from authenticated users.
//! Both stores connect with the right credentials and CA; a wrong password, or no TLS, is
//! refused with a clear error that never holds the password.

use hub_control::store::cql::CqlControlStore;
use hub_core::cql::CqlAccess;
use hub_engine::store::cql::{CqlSettings, CqlStore};
use hub_engine::store::Jobs;
use hub_tests::{report, require, test_ca, CQL_SECURE};

fn access(password: &str, tls: bool) -> CqlAccess {
    CqlAccess {
        username: Some("cassandra".into()),
        password: Some(password.into()),
        tls_ca_file: tls.then(test_ca),
    }
}

async fn engine_store(access: CqlAccess) -> Result<CqlStore, String> {
    CqlStore::connect(CqlSettings {
        nodes: vec![CQL_SECURE.into()],
        access,
        keyspace: "hub_secure_it".into(),
        ..CqlSettings::default()
    })
    .await
    .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_3_both_cql_stores_connect_with_a_password_over_tls() {
    require("cqlsecure", CQL_SECURE);
    let store = engine_store(access("cassandra", true))
        .await
        .expect("the engine's store over TLS with a password");
    store
        .pending_jobs()
        .await
        .expect("a read over the authenticated TLS session");
    CqlControlStore::connect(
        (&[CQL_SECURE.to_owned()], &access("cassandra", true)),
        "hub_secure_control_it",
        "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        3600,
    )
    .await
    .expect("the control plane's store over TLS with a password");
    report("cqlsecure", "both stores connected over TLS as cassandra");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_3_a_wrong_password_or_no_tls_is_refused_without_echoing_the_password() {
    require("cqlsecure", CQL_SECURE);
    let wrong = "not-the-password-91c2";
    let Err(refused) = engine_store(access(wrong, true)).await else {
        panic!("a wrong password connected");
    };
    assert!(!refused.contains(wrong), "{refused}");
    assert!(
        refused.to_ascii_lowercase().contains("auth")
            || refused.to_ascii_lowercase().contains("credentials"),
        "says why: {refused}"
    );
    let plain = engine_store(access("cassandra", false)).await;
    assert!(plain.is_err(), "no TLS: refused");
    let printed = format!("{:?}", access(wrong, true));
    assert!(!printed.contains(wrong), "{printed}");
    report(
        "cqlsecure",
        "a wrong password and a plain connection were refused",
    );
}
