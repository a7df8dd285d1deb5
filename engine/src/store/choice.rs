//! Which embedded store a data directory holds: the append-only log (`log/`, the default since
//! issue 17) or the redb file of earlier releases (`hub.redb`), kept when a directory already
//! has one and no log, so an upgrade never starts an empty store beside a full one.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use super::embedded::EmbeddedStore;
use super::log::LogStore;
use super::{Retention, Store, StoreError};

/// How the embedded store keeps its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddedFormat {
    /// Append-only segments under `<data_dir>/log` with in-memory indexes.
    Log,
    /// One redb file, `<data_dir>/hub.redb`.
    Redb,
}

impl std::str::FromStr for EmbeddedFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "log" => Ok(Self::Log),
            "redb" => Ok(Self::Redb),
            other => Err(format!(
                "unknown embedded format {other:?} (expected log or redb)"
            )),
        }
    }
}

/// The format to open `data_dir` with: the one chosen, else redb when the directory holds only
/// a redb file, else the log.
pub fn embedded_format(data_dir: &Path, chosen: Option<EmbeddedFormat>) -> EmbeddedFormat {
    chosen.unwrap_or_else(|| {
        let redb_only = data_dir.join("hub.redb").exists() && !data_dir.join("log").exists();
        if redb_only {
            EmbeddedFormat::Redb
        } else {
            EmbeddedFormat::Log
        }
    })
}

/// Opens the embedded store of `data_dir` in its format.
pub fn open_embedded(
    data_dir: &Path,
    chosen: Option<EmbeddedFormat>,
    retention: Retention,
) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match embedded_format(data_dir, chosen) {
        EmbeddedFormat::Log => {
            Arc::new(LogStore::open(&data_dir.join("log"))?.with_retention(retention))
        }
        EmbeddedFormat::Redb => {
            Arc::new(EmbeddedStore::open(&data_dir.join("hub.redb"))?.with_retention(retention))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_op_2_a_directory_with_only_a_redb_file_stays_on_redb() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(embedded_format(dir.path(), None), EmbeddedFormat::Log);
        std::fs::write(dir.path().join("hub.redb"), b"").expect("file");
        assert_eq!(embedded_format(dir.path(), None), EmbeddedFormat::Redb);
        std::fs::create_dir(dir.path().join("log")).expect("log dir");
        assert_eq!(embedded_format(dir.path(), None), EmbeddedFormat::Log);
        let chosen = Some(EmbeddedFormat::Redb);
        assert_eq!(embedded_format(dir.path(), chosen), EmbeddedFormat::Redb);
    }
}
