//! Optional TLS on the listeners (issue 16): a certificate chain and key from PEM files, served
//! with rustls (ALPN `h2` and `http/1.1`, so gRPC and REST share the port), read again when a
//! file changes or on SIGHUP — a renewed certificate takes effect without a restart, and a
//! broken one is refused (logged) while the one in use stays.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Where the certificate and key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first. Env `STREAMING_HUB_TLS_CERT_FILE`.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1). Env `STREAMING_HUB_TLS_KEY_FILE`.
    pub key: PathBuf,
}

/// The server's TLS configuration, replaceable while it serves.
#[derive(Debug)]
pub struct ServerTls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    /// The files' modification times when last read.
    read_at: RwLock<(Option<SystemTime>, Option<SystemTime>)>,
}

impl ServerTls {
    /// Reads the files; a start with an unreadable certificate fails here, saying why.
    pub fn load(files: TlsFiles) -> Result<Arc<Self>, String> {
        let config = server_config(&files)?;
        let stamps = modified(&files);
        Ok(Arc::new(Self {
            files,
            current: RwLock::new(Arc::new(config)),
            read_at: RwLock::new(stamps),
        }))
    }

    /// The configuration new connections use.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    /// Reads the files again; on failure the configuration in use stays.
    pub fn reload(&self) -> Result<(), String> {
        let stamps = modified(&self.files);
        let config = server_config(&self.files)?;
        if let Ok(mut current) = self.current.write() {
            *current = Arc::new(config);
        }
        if let Ok(mut read_at) = self.read_at.write() {
            *read_at = stamps;
        }
        Ok(())
    }

    /// Reloads on SIGHUP and whenever a file's modification time changes (checked every
    /// `every`), until the runtime stops.
    pub fn watch(self: Arc<Self>, every: Duration) {
        let tls = self;
        tokio::spawn(async move {
            let mut hangups =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
            loop {
                let hangup = async {
                    match hangups.as_mut() {
                        Some(h) => drop(h.recv().await),
                        None => std::future::pending::<()>().await,
                    }
                };
                let asked = tokio::select! {
                    () = hangup => true,
                    () = tokio::time::sleep(every) => false,
                };
                let changed = tls
                    .read_at
                    .read()
                    .map(|r| *r != modified(&tls.files))
                    .unwrap_or(true);
                if asked || changed {
                    match tls.reload() {
                        Ok(()) => {
                            tracing::info!(cert = %tls.files.cert.display(), "TLS certificate read again")
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "the new TLS certificate is refused; the one in use stays")
                        }
                    }
                }
            }
        });
    }
}

fn modified(files: &TlsFiles) -> (Option<SystemTime>, Option<SystemTime>) {
    let at = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (at(&files.cert), at(&files.key))
}

/// A rustls server configuration from the files (ring, TLS 1.2 and 1.3).
fn server_config(files: &TlsFiles) -> Result<ServerConfig, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| format!("reading {}: {e}", files.cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("reading {}: {e}", files.cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{} holds no certificate", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("reading the key {}: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate and key do not make a TLS identity: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
