//! gRPC over TLS (`GRPC_SERVER_USE_TLS` with `GRPC_SERVER_TLS_CERT` / `_KEY`), mutual with
//! `GRPC_CLIENT_TLS_CACERT` (a client certificate chaining to it is required) and
//! `GRPC_CLIENT_TLS_SAN` (which must be among that certificate's SANs), as the reference's
//! server sets them up. The files are read with warden-tls, and read again when they change:
//! each new connection checks their stamps (inode, size, mtime), so a rotated certificate is
//! served from the next connection on; while the new files do not form a valid pair (a
//! half-written rotation), the last good config keeps serving.

use arc_swap::ArcSwap;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::io::{AsyncRead, AsyncWrite};
use warden_tls::file_stamps::FileStamps;
use warden_tls::rustls::ServerConfig;
use warden_tls::server::{self, ServerSpec};
use warden_tls::tokio_rustls::{server::TlsStream, TlsAcceptor};
use warden_tls::PeerIdentity;

/// The TLS settings of the gRPC listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcTlsSettings {
    /// `GRPC_SERVER_TLS_CERT` / `GRPC_SERVER_TLS_KEY`.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// `GRPC_CLIENT_TLS_CACERT`: clients must present a certificate chaining to it.
    pub client_ca: Option<PathBuf>,
    /// `GRPC_CLIENT_TLS_SAN`: the client certificate must carry this SAN.
    pub client_san: Option<String>,
}

impl GrpcTlsSettings {
    fn spec(&self) -> ServerSpec {
        ServerSpec {
            cert: self.cert.clone(),
            key: self.key.clone(),
            client_ca: self.client_ca.clone(),
            mutual: self.client_ca.is_some(),
            alpn: vec![b"h2".to_vec()],
            ..ServerSpec::default()
        }
    }
}

struct Loaded {
    config: Arc<ServerConfig>,
    stamps: FileStamps,
}

/// The listener's TLS: the current config, re-read when its files change.
pub(crate) struct GrpcTls {
    settings: GrpcTlsSettings,
    current: ArcSwap<Loaded>,
    /// One reload at a time.
    reloading: Mutex<()>,
}

impl std::fmt::Debug for GrpcTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcTls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn load(settings: &GrpcTlsSettings) -> Result<Loaded, String> {
    let spec = settings.spec();
    // Stamps first: a change while reading is seen at the next connection.
    let stamps = FileStamps::of(server::files(&spec));
    let config = server::server_config(&spec, SystemTime::now()).map_err(|errors| {
        errors
            .iter()
            .map(|e| e.message.clone())
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    Ok(Loaded { config, stamps })
}

impl GrpcTls {
    /// Reads the files now: a bad file fails the start, as in the reference.
    pub fn new(settings: GrpcTlsSettings) -> Result<GrpcTls, String> {
        let loaded = load(&settings)?;
        Ok(GrpcTls {
            settings,
            current: ArcSwap::from_pointee(loaded),
            reloading: Mutex::new(()),
        })
    }

    /// The config for a new connection, re-read first when the files changed.
    fn config(&self) -> Arc<ServerConfig> {
        let current = self.current.load();
        if !current.stamps.changed() {
            return current.config.clone();
        }
        let _one = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.current.load();
        if !current.stamps.changed() {
            return current.config.clone();
        }
        match load(&self.settings) {
            Ok(loaded) => {
                tracing::info!(cert = %self.settings.cert.display(), "gRPC TLS certificate reloaded");
                let config = loaded.config.clone();
                self.current.store(Arc::new(loaded));
                config
            }
            Err(e) => {
                tracing::warn!(error = %e, "gRPC TLS files changed but do not load; serving the previous certificate");
                current.config.clone()
            }
        }
    }

    /// The server side of the handshake, then the SAN check of `GRPC_CLIENT_TLS_SAN`.
    pub async fn accept<S>(&self, stream: S) -> io::Result<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let tls = TlsAcceptor::from(self.config()).accept(stream).await?;
        if let Some(san) = &self.settings.client_san {
            let allowed = std::slice::from_ref(san);
            let ok = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(PeerIdentity::from_leaf)
                .is_some_and(|id| id.has_san_in(allowed));
            if !ok {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("client certificate does not carry the SAN '{san}'"),
                ));
            }
        }
        Ok(tls)
    }
}
