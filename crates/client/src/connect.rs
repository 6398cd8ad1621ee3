//! Where a service is and how to reach it.

use std::path::Path;
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
}

impl ClientConfig {
    /// A plaintext connection to `address`.
    pub fn new(address: impl Into<String>) -> Self {
        ClientConfig {
            address: address.into(),
            tls: None,
            connect_timeout: Duration::from_secs(5),
        }
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
    endpoint
        .connect()
        .await
        .map_err(|source| ClientError::Connect {
            address: url,
            source,
        })
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
