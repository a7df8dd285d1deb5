//! CQL plumbing shared by the engine's ingest store and the control plane's store: opening a
//! session on a keyspace with its schema applied, and reading a single row. Errors are text; each
//! store wraps them in its own error type.

use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::response::query_result::QueryResult;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlValue, Row};

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

/// How the hub reaches a secured CQL cluster (issue 16): username and password (the server's
/// password authenticator), and TLS with the CA(s) that signed the nodes' certificates. The
/// password is never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CqlAccess {
    /// Env `STREAMING_HUB_CQL_USERNAME`.
    pub username: Option<String>,
    /// Env `STREAMING_HUB_CQL_PASSWORD`.
    pub password: Option<String>,
    /// PEM CA file; set, every connection is TLS verified against it (the node's address must
    /// be in its certificate). Env `STREAMING_HUB_CQL_TLS_CA_FILE`.
    pub tls_ca_file: Option<String>,
}

impl std::fmt::Debug for CqlAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqlAccess")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("tls_ca_file", &self.tls_ca_file)
            .finish()
    }
}

impl CqlAccess {
    /// From the `STREAMING_HUB_CQL_*` settings `get` returns; a username without a password (or
    /// the reverse) is refused.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let read = |k: &str| get(k).filter(|v| !v.is_empty());
        let access = Self {
            username: read("STREAMING_HUB_CQL_USERNAME"),
            password: read("STREAMING_HUB_CQL_PASSWORD"),
            tls_ca_file: read("STREAMING_HUB_CQL_TLS_CA_FILE"),
        };
        access.validate()?;
        Ok(access)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.username.is_some() != self.password.is_some() {
            return Err(
                "STREAMING_HUB_CQL_USERNAME and STREAMING_HUB_CQL_PASSWORD go together".into(),
            );
        }
        if let Some(ca) = &self.tls_ca_file {
            std::fs::metadata(ca).map_err(|e| format!("the CQL CA file {ca}: {e}"))?;
        }
        Ok(())
    }

    /// A rustls client configuration trusting the CA file, when TLS is asked for.
    fn tls(&self) -> Result<Option<std::sync::Arc<rustls::ClientConfig>>, String> {
        use rustls_pki_types::pem::PemObject;
        let Some(ca) = &self.tls_ca_file else {
            return Ok(None);
        };
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pki_types::CertificateDer::pem_file_iter(ca)
            .map_err(|e| format!("reading the CQL CA file {ca}: {e}"))?
        {
            let cert = cert.map_err(|e| format!("reading the CQL CA file {ca}: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("a CA certificate in {ca}: {e}"))?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Some(std::sync::Arc::new(config)))
    }
}

/// Connects to `nodes` as `access` says, creates `keyspace` with `replication` if missing,
/// selects it and applies `schema` (idempotent statements), waiting for schema agreement.
pub async fn open(
    nodes: &[String],
    access: &CqlAccess,
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
    let mut builder = SessionBuilder::new()
        .known_nodes(nodes)
        .tls_context(access.tls()?);
    if let (Some(user), Some(password)) = (&access.username, &access.password) {
        builder = builder.user(user, password);
    }
    let session = builder
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
    first_of(session.execute_unpaged(stmt, values).await)
}

/// The first row of a single-row read's answer, if any.
pub fn first_of<R>(
    answer: Result<scylla::response::query_result::QueryResult, scylla::errors::ExecutionError>,
) -> Result<Option<R>, String>
where
    R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
{
    answer
        .map_err(|e| e.to_string())?
        .into_rows_result()
        .map_err(|e| e.to_string())?
        .maybe_first_row::<R>()
        .map_err(|e| e.to_string())
}

/// The answer of a lightweight transaction (one conditional statement or batch). When a
/// condition holds, Cassandra returns only `[applied]`; when it fails, ScyllaDB and Cassandra
/// return the current row(s) as well, in an order of their own — so every column is found by
/// name, never by position.
#[derive(Debug)]
pub struct LwtAnswer {
    pub applied: bool,
    names: Vec<String>,
    rows: Vec<Vec<Option<CqlValue>>>,
}

/// One row of an LWT answer.
#[derive(Debug, Clone, Copy)]
pub struct LwtRow<'a> {
    names: &'a [String],
    values: &'a [Option<CqlValue>],
}

impl<'a> LwtRow<'a> {
    /// A column by name, `None` when absent or null.
    pub fn get(&self, name: &str) -> Option<&'a CqlValue> {
        let i = self.names.iter().position(|n| n == name)?;
        self.values.get(i)?.as_ref()
    }
}

impl LwtAnswer {
    pub fn read(result: QueryResult) -> Result<Self, String> {
        let rows = result.into_rows_result().map_err(|e| e.to_string())?;
        let names: Vec<String> = rows
            .column_specs()
            .iter()
            .map(|spec| spec.name().to_owned())
            .collect();
        let at = names
            .iter()
            .position(|n| n == "[applied]")
            .ok_or("LWT answer has no [applied]")?;
        let mut all = Vec::new();
        for row in rows.rows::<Row>().map_err(|e| e.to_string())? {
            all.push(row.map_err(|e| e.to_string())?.columns);
        }
        let applied = match all.first().and_then(|r| r.get(at)) {
            Some(Some(CqlValue::Boolean(b))) => *b,
            other => return Err(format!("[applied] is not a boolean: {other:?}")),
        };
        Ok(Self {
            applied,
            names,
            rows: all,
        })
    }

    /// Whether the answer carries the column at all (null or not).
    pub fn has(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// Every row of the answer (a refused batch answers one row per conditional statement).
    pub fn rows(&self) -> impl Iterator<Item = LwtRow<'_>> {
        self.rows.iter().map(|values| LwtRow {
            names: &self.names,
            values,
        })
    }

    /// A column of every row of the answer (one row per statement of a refused batch).
    pub fn column_of_rows<'a>(&'a self, name: &str) -> impl Iterator<Item = Option<&'a CqlValue>> {
        let at = self.names.iter().position(|n| n == name);
        self.rows
            .iter()
            .map(move |r| at.and_then(|i| r.get(i)).and_then(Option::as_ref))
    }

    fn first(&self, name: &str) -> Option<&CqlValue> {
        self.column_of_rows(name).next().flatten()
    }

    /// A `bigint` column of the (first) current row, `None` when absent or null.
    pub fn bigint(&self, name: &str) -> Option<i64> {
        match self.first(name) {
            Some(CqlValue::BigInt(v)) => Some(*v),
            _ => None,
        }
    }

    pub fn text(&self, name: &str) -> Option<&str> {
        match self.first(name) {
            Some(CqlValue::Text(v)) => Some(v),
            _ => None,
        }
    }

    pub fn blob(&self, name: &str) -> Option<&[u8]> {
        match self.first(name) {
            Some(CqlValue::Blob(v)) => Some(v),
            _ => None,
        }
    }
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
