//! CQL plumbing shared by the engine's ingest store and the control plane's store: opening a
//! session on a keyspace with its schema applied, and reading a single row. Errors are text; each
//! store wraps them in its own error type.

use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::prepared::PreparedStatement;

/// A schema file's statements: comment lines dropped first (they may hold `;`), then split.
pub fn statements(schema: &str) -> Vec<String> {
    let code: String = schema
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect();
    code.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Connects to `nodes`, creates `keyspace` with `replication` if missing, selects it and applies
/// `schema` (idempotent statements), waiting for schema agreement.
pub async fn open(
    nodes: &[String],
    keyspace: &str,
    replication: &str,
    schema: &str,
) -> Result<Session, String> {
    if keyspace.is_empty()
        || !keyspace
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(format!("invalid keyspace name {keyspace:?}"));
    }
    let session = SessionBuilder::new()
        .known_nodes(nodes)
        .build()
        .await
        .map_err(|e| format!("connecting to {nodes:?}: {e}"))?;
    let create =
        format!("CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {replication}");
    session
        .query_unpaged(create, ())
        .await
        .map_err(|e| format!("creating keyspace {keyspace}: {e}"))?;
    session
        .use_keyspace(keyspace, false)
        .await
        .map_err(|e| e.to_string())?;
    for stmt in statements(schema) {
        session
            .query_unpaged(stmt.as_str(), ())
            .await
            .map_err(|e| format!("applying schema: {e}: {stmt}"))?;
    }
    session
        .await_schema_agreement()
        .await
        .map_err(|e| e.to_string())?;
    Ok(session)
}

/// The first row of a single-row read, if any.
pub async fn first_row<R>(
    session: &Session,
    stmt: &PreparedStatement,
    values: impl scylla::serialize::row::SerializeRow,
) -> Result<Option<R>, String>
where
    R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
{
    session
        .execute_unpaged(stmt, values)
        .await
        .map_err(|e| e.to_string())?
        .into_rows_result()
        .map_err(|e| e.to_string())?
        .maybe_first_row::<R>()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn statements_ignore_comments_even_with_semicolons() {
        let s = super::statements("-- a; b\nCREATE TABLE x (a int PRIMARY KEY);\n\n-- c\nCREATE TABLE y (b int PRIMARY KEY);\n");
        assert_eq!(s.len(), 2);
        assert!(s[0].starts_with("CREATE TABLE x"));
    }
}
