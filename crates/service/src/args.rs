//! Configuration every service takes, by flag or environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use tenantplane_telemetry::LogFormat;

use crate::Server;

/// Flags shared by every service (each also read from the environment variable it names).
#[derive(Clone, Debug, clap::Args)]
pub struct ServiceArgs {
    /// Log format.
    #[arg(long, env = "TENANTPLANE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter, in tracing's EnvFilter syntax (`info`, `tenantplane_grpc=debug,info`).
    #[arg(long, env = "TENANTPLANE_LOG", default_value = "info")]
    pub log_filter: String,

    /// Seconds in-flight calls get to finish after SIGTERM or Ctrl-C before the process stops
    /// regardless.
    #[arg(long, env = "TENANTPLANE_SHUTDOWN_GRACE_SECONDS", default_value_t = crate::DEFAULT_SHUTDOWN_GRACE.as_secs())]
    pub shutdown_grace_seconds: u64,

    /// TLS for the gRPC port.
    #[command(flatten)]
    pub tls: TlsArgs,
}

impl ServiceArgs {
    /// Logs and traces of `service` as configured (OTLP export from the standard `OTEL_*`
    /// variables), and the bound ports of a server configured by these flags. When a tracing
    /// subscriber is already installed (several servers in one test process), it is kept.
    pub async fn start(
        &self,
        service: &str,
        grpc_addr: SocketAddr,
        admin_addr: SocketAddr,
    ) -> anyhow::Result<Server> {
        let telemetry = if tracing::dispatcher::has_been_set() {
            None
        } else {
            Some(tenantplane_telemetry::init(
                service,
                self.log_format,
                &self.log_filter,
            )?)
        };
        Ok(
            Server::bind(grpc_addr, admin_addr, self.tls.server_config()?)
                .await?
                .with_shutdown_grace(Duration::from_secs(self.shutdown_grace_seconds))
                .with_telemetry(telemetry),
        )
    }
}

/// TLS and mutual TLS (rustls) for the gRPC port. Without a certificate the port speaks
/// plaintext HTTP/2, which suits loopback and service meshes that add their own mTLS.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct TlsArgs {
    /// PEM certificate chain the gRPC port presents; enables TLS.
    #[arg(
        long,
        env = "TENANTPLANE_TLS_CERT",
        requires = "tls_key",
        value_name = "FILE"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of that certificate.
    #[arg(
        long,
        env = "TENANTPLANE_TLS_KEY",
        requires = "tls_cert",
        value_name = "FILE"
    )]
    pub tls_key: Option<PathBuf>,

    /// PEM CA certificates; when given, clients must present a certificate they signed (mutual
    /// TLS).
    #[arg(
        long,
        env = "TENANTPLANE_TLS_CLIENT_CA",
        requires = "tls_cert",
        value_name = "FILE"
    )]
    pub tls_client_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// The server TLS configuration these flags ask for (`None`: plaintext).
    pub fn server_config(&self) -> anyhow::Result<Option<ServerTlsConfig>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let read = |path: &PathBuf| {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))
        };
        let mut config =
            ServerTlsConfig::new().identity(Identity::from_pem(read(cert)?, read(key)?));
        if let Some(ca) = &self.tls_client_ca {
            config = config.client_ca_root(Certificate::from_pem(read(ca)?));
        }
        Ok(Some(config))
    }
}
