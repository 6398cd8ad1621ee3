//! Where a service is and how to reach it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::ClientError;

/// The largest response the client accepts. A Plan response grows with the batch; the client
/// splits batches well below this.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// How to reach a tenantplane service.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `host:port`, or a URL `http://host:port` / `https://host:port`. Without a scheme the
    /// address is plaintext unless `tls` is set.
    pub address: String,
    /// TLS (and mutual TLS) settings; `None` for plaintext.
    pub tls: Option<ClientTls>,
    /// How long to wait for the connection.
    pub connect_timeout: Duration,
    /// How long a call may take before it fails with DEADLINE_EXCEEDED; `None`: no limit.
    pub timeout: Option<Duration>,
}

impl ClientConfig {
    /// A plaintext connection to `address`.
    pub fn new(address: impl Into<String>) -> Self {
        ClientConfig {
            address: address.into(),
            tls: None,
            connect_timeout: Duration::from_secs(5),
            timeout: None,
        }
    }

    /// The same, with calls limited to `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The same address over TLS.
    pub fn with_tls(mut self, tls: ClientTls) -> Self {
        self.tls = Some(tls);
        self
    }
}

/// TLS settings of a client.
#[derive(Clone, Debug)]
pub struct ClientTls {
    /// PEM CA certificates the server's certificate must chain to.
    pub ca_pem: Vec<u8>,
    /// PEM certificate chain and private key the client presents (mutual TLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Name to verify the server certificate against, when not the address's host.
    pub domain: Option<String>,
}

impl ClientTls {
    /// TLS settings read from PEM files: a CA bundle and, for mutual TLS, a certificate and key.
    pub fn from_files(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<Self, ClientError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| ClientError::Config(format!("{}: {e}", path.display())))
        };
        Ok(ClientTls {
            ca_pem: read(ca)?,
            identity: identity
                .map(|(cert, key)| Ok::<_, ClientError>((read(cert)?, read(key)?)))
                .transpose()?,
            domain: None,
        })
    }
}

/// Connects to a service.
pub async fn connect(config: &ClientConfig) -> Result<Channel, ClientError> {
    let (url, endpoint) = endpoint(config)?;
    endpoint
        .connect()
        .await
        .map_err(|source| ClientError::Connect {
            address: url,
            source,
        })
}

/// A channel that connects on its first call and reconnects by itself: for long-running callers
/// (the syncer), which must start while a service is down and wait for it, not fail.
pub fn connect_lazy(config: &ClientConfig) -> Result<Channel, ClientError> {
    Ok(endpoint(config)?.1.connect_lazy())
}

/// The URL and endpoint a configuration describes.
fn endpoint(config: &ClientConfig) -> Result<(String, Endpoint), ClientError> {
    let url = if config.address.contains("://") {
        config.address.clone()
    } else if config.tls.is_some() {
        format!("https://{}", config.address)
    } else {
        format!("http://{}", config.address)
    };
    let invalid = |problem: String| ClientError::Config(format!("address {url:?}: {problem}"));
    let mut endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| invalid(e.to_string()))?
        .connect_timeout(config.connect_timeout);
    if let Some(timeout) = config.timeout {
        endpoint = endpoint.timeout(timeout);
    }
    if let Some(tls) = &config.tls {
        let mut tls_config =
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
        if let Some((cert, key)) = &tls.identity {
            tls_config = tls_config.identity(Identity::from_pem(cert, key));
        }
        if let Some(domain) = &tls.domain {
            tls_config = tls_config.domain_name(domain.clone());
        }
        endpoint = endpoint
            .tls_config(tls_config)
            .map_err(|e| invalid(e.to_string()))?;
    }
    Ok((url, endpoint))
}

/// TLS flags of a program that calls the services (the syncer), read into a [`ClientTls`].
/// Named `--client-tls-*` so that they sit beside a service's own `--tls-*` server flags.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ClientTlsArgs {
    /// PEM CA certificates the services' certificates must chain to; enables TLS to them.
    #[arg(long, env = "TENANTPLANE_CLIENT_TLS_CA", value_name = "FILE")]
    pub client_tls_ca: Option<PathBuf>,
    /// PEM certificate chain presented to the services (mutual TLS).
    #[arg(
        long,
        env = "TENANTPLANE_CLIENT_TLS_CERT",
        requires_all = ["client_tls_ca", "client_tls_key"],
        value_name = "FILE"
    )]
    pub client_tls_cert: Option<PathBuf>,
    /// PEM private key of that certificate.
    #[arg(
        long,
        env = "TENANTPLANE_CLIENT_TLS_KEY",
        requires = "client_tls_cert",
        value_name = "FILE"
    )]
    pub client_tls_key: Option<PathBuf>,
    /// Name to verify the services' certificates against, when not the address's host.
    #[arg(
        long,
        env = "TENANTPLANE_CLIENT_TLS_SERVER_NAME",
        requires = "client_tls_ca"
    )]
    pub client_tls_server_name: Option<String>,
}

impl ClientTlsArgs {
    /// The TLS settings these flags ask for (`None`: plaintext).
    pub fn client_tls(&self) -> Result<Option<ClientTls>, ClientError> {
        let Some(ca) = &self.client_tls_ca else {
            return Ok(None);
        };
        let identity = match (&self.client_tls_cert, &self.client_tls_key) {
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            _ => None,
        };
        let mut tls = ClientTls::from_files(ca, identity)?;
        tls.domain = self.client_tls_server_name.clone();
        Ok(Some(tls))
    }

    /// A client configuration for `address` with these TLS settings.
    pub fn config(&self, address: &str) -> Result<ClientConfig, ClientError> {
        let config = ClientConfig::new(address);
        Ok(match self.client_tls()? {
            Some(tls) => config.with_tls(tls),
            None => config,
        })
    }
}

/// The response size limit clients set on their stubs.
pub(crate) fn max_response_bytes() -> usize {
    MAX_RESPONSE_BYTES
}

/// A channel whose requests carry the caller's W3C trace context (`traceparent`), so that the
/// services' spans are children of the span that made the call.
pub type TracedChannel = tonic::service::interceptor::InterceptedService<Channel, TraceContext>;

/// The interceptor of [`TracedChannel`].
pub type TraceContext = fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>;

/// Wraps a channel so its requests carry the current span's trace context.
pub(crate) fn traced(channel: Channel) -> TracedChannel {
    tonic::service::interceptor::InterceptedService::new(
        channel,
        tenantplane_telemetry::propagation::inject_trace_context as TraceContext,
    )
}
