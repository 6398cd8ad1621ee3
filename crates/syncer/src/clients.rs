//! The syncer's Kubernetes clients: of the host cluster, and of each tenant control plane. A
//! replica holds a client per Tenant it serves (and builds one more at each of its reconciles),
//! so what building and keeping one costs is paid once per Tenant. Two of kube's defaults cost
//! per Tenant what a replica cannot pay a thousand times, and [`client`] builds around them:
//!
//! - **TLS roots.** kube gives every client a TLS setup of its own, and for a kubeconfig that
//!   names no CA it reads the system's CA store for it, even when the server speaks plain HTTP (a
//!   local tenant control plane does): every certificate parsed again into a root store of the
//!   client's own. At a thousand Tenants that was a thousand reads of the store at the syncer's
//!   start, and once the file descriptors ran out, `No CA certificates were loaded from the
//!   system`. Here the roots are the kubeconfig's CA when it names one (kube's own path); none
//!   when no TLS is spoken (a plain-HTTP server, reached directly or through a plain-HTTP proxy);
//!   otherwise the system's, read once per process and shared.
//! - **Idle connections.** kube's HTTP client (HTTP/1.1: a request in flight, a watch included,
//!   holds a connection) keeps every connection it ever opened: a burst of requests to a tenant
//!   control plane left that many connections open for good, each a file descriptor and its
//!   buffers on both ends. Here a client keeps at most `max_idle` idle connections, each for
//!   [`IDLE_TIMEOUT`]; at rest a Tenant holds its watches' connections and nothing else.
//!
//! The client is otherwise kube's stack (base URI, retries unless the config turns them off,
//! authentication, extra headers, the kubeconfig's timeouts), without kube's debug-level HTTP
//! spans. A kubeconfig with a proxy gets kube's own client, with the roots above.

use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context as _;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::Client;
use kube::client::ConfigExt as _;
use kube::client::retry::RetryPolicy;

/// How long an idle connection is kept for the next request.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle connections a tenant client keeps: its requests besides the watches come a few at a
/// time (the Events of a batch, status and tokens written up).
pub const TENANT_IDLE: usize = 2;
/// Idle connections the host client keeps: every Tenant's host writes share it.
pub const HOST_IDLE: usize = 32;

/// A client for `config`, keeping at most `max_idle` idle connections (see the module
/// documentation).
pub fn client(mut config: kube::Config, max_idle: usize) -> anyhow::Result<Client> {
    if config.root_cert.is_none() && config.root_cert_file.is_none() {
        config.root_cert = Some(if speaks_tls(&config) {
            system_roots()?.to_vec()
        } else {
            Vec::new()
        });
    }
    if config.proxy_url.is_some() {
        return Client::try_from(config).context("building a client");
    }
    let mut connector =
        hyper_timeout::TimeoutConnector::new(config.rustls_https_connector().context("TLS")?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(IDLE_TIMEOUT)
        .pool_max_idle_per_host(max_idle)
        .build(connector);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| tower::retry::RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer().context("authentication")?)
        .layer(config.extra_headers_layer().context("extra headers")?)
        .map_err(tower::BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace))
}

/// Whether a client of `config` makes TLS connections: to an `https` server, or through an
/// `https` proxy.
fn speaks_tls(config: &kube::Config) -> bool {
    config.cluster_url.scheme_str() == Some("https")
        || config
            .proxy_url
            .as_ref()
            .is_some_and(|proxy| proxy.scheme_str() == Some("https"))
}

/// The system's CA certificates (DER), read on first use.
fn system_roots() -> anyhow::Result<&'static [Vec<u8>]> {
    static ROOTS: OnceLock<Result<Vec<Vec<u8>>, String>> = OnceLock::new();
    let roots = ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        if found.certs.is_empty() {
            let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
            return Err(format!(
                "the kubeconfig names no certificate authority and the system's CA store has \
                 none{}",
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", errors.join("; "))
                }
            ));
        }
        Ok(found.certs.into_iter().map(|c| c.to_vec()).collect())
    });
    roots.as_deref().map_err(|e| anyhow::anyhow!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> kube::Config {
        kube::Config::new(url.parse().expect("a URL"))
    }

    #[test]
    fn tls_is_spoken_to_an_https_server_or_through_an_https_proxy() {
        assert!(!speaks_tls(&config("http://127.0.0.1:6443")));
        assert!(speaks_tls(&config("https://10.0.0.5:6443")));
        let mut proxied = config("http://10.0.0.5:6443");
        proxied.proxy_url = Some("https://proxy:3128".parse().unwrap());
        assert!(speaks_tls(&proxied));
        proxied.proxy_url = Some("http://proxy:3128".parse().unwrap());
        assert!(!speaks_tls(&proxied));
    }
}
