//! CQL: a lightweight transaction applies once and is refused the second time. Cassandra returns
//! only `[applied]` when applied and the existing row too when not, so `[applied]` is read by name.

use hub_tests::{report, require, CQL};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::value::{CqlValue, Row};

async fn applied(session: &Session, key: &str, value: &str) -> anyhow::Result<bool> {
    let result = session
        .query_unpaged(
            "INSERT INTO hub_smoke.lwt (k, v) VALUES (?, ?) IF NOT EXISTS",
            (key, value),
        )
        .await?
        .into_rows_result()?;
    let index = result
        .column_specs()
        .iter()
        .position(|spec| spec.name() == "[applied]")
        .ok_or_else(|| anyhow::anyhow!("LWT result has no [applied] column"))?;
    let row: Row = result.first_row()?;
    match row.columns.get(index) {
        Some(Some(CqlValue::Boolean(b))) => Ok(*b),
        other => anyhow::bail!("[applied] is not a boolean: {other:?}"),
    }
}

#[tokio::test]
async fn cql_insert_if_not_exists_applies_once() -> anyhow::Result<()> {
    require("cassandra", CQL);
    let session = SessionBuilder::new().known_node(CQL).build().await?;
    session
        .query_unpaged(
            "CREATE KEYSPACE IF NOT EXISTS hub_smoke WITH replication = \
             {'class': 'SimpleStrategy', 'replication_factor': 1}",
            &[],
        )
        .await?;
    session
        .query_unpaged(
            "CREATE TABLE IF NOT EXISTS hub_smoke.lwt (k text PRIMARY KEY, v text)",
            &[],
        )
        .await?;
    session.await_schema_agreement().await?;

    let key = hub_tests::unique("k");
    assert!(
        applied(&session, &key, "first").await?,
        "first insert applies"
    );
    assert!(
        !applied(&session, &key, "second").await?,
        "second insert is refused"
    );
    let (stored,): (String,) = session
        .query_unpaged("SELECT v FROM hub_smoke.lwt WHERE k = ?", (key.as_str(),))
        .await?
        .into_rows_result()?
        .first_row()?;
    assert_eq!(stored, "first", "the first write wins");
    report("cql", &format!("{CQL}: INSERT IF NOT EXISTS on key {key}: applied once, refused once, first value kept"));
    Ok(())
}
