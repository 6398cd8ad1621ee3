//! A pod's world: what a synced pod sees of its tenant's cluster while it runs on the host.
//!
//! A pod that reaches the host still belongs to its tenant. The kubelet's behaviour is the
//! reference for what it sees, with the tenant's cluster in place of the host's:
//!
//! * **API access** ([`ApiAccess`], one per Tenant): the endpoint at which host pods reach the
//!   tenant API server (`spec.controlPlane.podEndpoint`, by default the kubeconfig's server) as
//!   `KUBERNETES_SERVICE_HOST`/`PORT` and the `KUBERNETES_PORT*` family, and, for an IP address,
//!   as `kubernetes`, `kubernetes.default`, `kubernetes.default.svc[.<domain>]` in the pod's hosts
//!   file. No variable names the host's API server: with no API access they are set empty.
//! * **Tokens** ([`TokenRequest`]): every projected `serviceAccountToken` source of the tenant
//!   pod (the `kube-api-access-*` volume the tenant API server's ServiceAccount admission adds
//!   by the rules of `automountServiceAccountToken`, or one the tenant wrote) is served from the
//!   pod's token Secret ([`crate::mapping::token_secret_name`]), which the syncer fills with
//!   tokens of the pod's own ServiceAccount from the TENANT API server's TokenRequest, bound to
//!   the tenant pod, and refreshes at 80% of their life ([`refresh_at`]); the tenant's
//!   `kube-root-ca.crt` in that volume becomes the Secret's `ca.crt`. The host never mints a token
//!   for a tenant pod.
//! * **DNS** ([`Resolver`]): a pod whose `dnsPolicy` is `ClusterFirst` resolves with the tenant's
//!   DNS Service (by default `kube-system/kube-dns`, synced like any Service): `dnsPolicy: None`
//!   with its host address as nameserver, the tenant's search domains and `ndots:5`, the pod's own
//!   `dnsConfig` added as the kubelet adds it.
//! * **Service links**: the host's are off (`enableServiceLinks: false`); the tenant Services of
//!   the pod's namespace become the `<NAME>_SERVICE_HOST` family, with tenant names and host
//!   addresses, as the kubelet writes them.
//!
//! All of it depends on other objects (the endpoint, the DNS Service's address, the Services of
//! the namespace) and is fixed when the host pod is created, as the kubelet fixes a container's
//! environment when it starts: [`PodWorld::furnish`] adds it to the create, an update of a host
//! pod carries only what Kubernetes lets a pod change ([`crate::translate::pod_update`]), and the
//! desired digest covers the tenant's pod alone.

use std::fmt;
use std::net::IpAddr;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tenantplane_api::Tenant;
use tenantplane_api::tenant::DnsPolicy;

use crate::mapping::token_secret_name;
use crate::object::TenantObject;

/// Where the kubelet mounts a pod's service account credentials.
pub const SERVICE_ACCOUNT_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The lifetime the kubelet asks for its own projected tokens. A tenant API server extends a
/// token asked for exactly this long to a year (`--service-account-extend-token-expiration`),
/// so the syncer asks for [`DEFAULT_TOKEN_SECONDS`] instead.
const KUBELET_TOKEN_SECONDS: i64 = 3607;
/// A token's lifetime when its projection names none (the API's default).
pub const DEFAULT_TOKEN_SECONDS: i64 = 3600;
/// The longest a token is kept before it is refreshed, whatever its lifetime (the kubelet's).
const MAX_TOKEN_AGE: SignedDuration = SignedDuration::from_hours(24);

/// `host:port` of the tenant API server as host pods reach it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// An IP address or a DNS name.
    pub host: String,
    /// The port.
    pub port: u16,
}

impl Endpoint {
    /// Reads `host:port` (an IPv6 address in brackets).
    pub fn parse(text: &str) -> Result<Endpoint, String> {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("{text:?} is not host:port"))?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{text:?}: the port must be a number from 1 to 65535"))?;
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) => match v6.parse::<IpAddr>() {
                Ok(IpAddr::V6(ip)) => ip.to_string(),
                _ => return Err(format!("{text:?}: {v6:?} is not an IPv6 address")),
            },
            None if host.parse::<IpAddr>().is_ok() => host.to_string(),
            None if is_dns_name(host) => host.to_ascii_lowercase(),
            None => {
                return Err(format!(
                    "{text:?}: {host:?} is neither an IP address nor a DNS name"
                ));
            }
        };
        Ok(Endpoint { host, port })
    }

    /// The endpoint of a kubeconfig's `server` URL (`https://host[:port][/path]`), and whether it
    /// is served over HTTPS (the only scheme in-cluster clients speak).
    fn of_server(server: &str) -> Result<(Endpoint, bool), String> {
        let uri: http::Uri = server
            .parse()
            .map_err(|e| format!("the kubeconfig's server {server:?} is not a URL: {e}"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(format!(
                    "the kubeconfig's server {server:?} is neither an https:// nor an http:// URL"
                ));
            }
        };
        let host = uri
            .host()
            .ok_or_else(|| format!("the kubeconfig's server {server:?} names no host"))?;
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Endpoint::parse(&Endpoint::join(host, port)).map(|e| (e, https))
    }

    fn join(host: &str, port: u16) -> String {
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    }

    /// The host as an IP address, when it is one.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    fn is_loopback(&self) -> bool {
        self.ip().is_some_and(|ip| ip.is_loopback()) || self.host == "localhost"
    }

    /// The host as it goes in a URL (`tcp://HOST:PORT`): an IPv6 address in brackets.
    fn url_host(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Endpoint::join(&self.host, self.port))
    }
}

/// A DNS name (DNS-1123 subdomain, any case).
fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// The kubeconfig the syncer reaches the tenant API server with, as far as pods are concerned.
#[derive(Clone, Copy, Debug)]
pub struct Kubeconfig<'a> {
    /// Its cluster's `server` URL.
    pub server: &'a str,
    /// Whether it carries the CA that verifies the server (`certificate-authority-data`).
    pub has_ca: bool,
}

/// Why pods may not be able to use an endpoint they are given all the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Caveat {
    /// Machine reason (the `PodAPIAccess` condition's).
    pub reason: &'static str,
    /// What it means.
    pub message: String,
}

/// How the tenant's pods on the host reach its API server: the same for every pod of a Tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "access")]
pub enum ApiAccess {
    /// Pods reach the tenant API server at the endpoint, each with tokens of its own.
    Granted {
        /// The endpoint; absent offline, where only the syncer reads the kubeconfig's server.
        #[serde(skip_serializing_if = "Option::is_none")]
        endpoint: Option<Endpoint>,
        /// Where it comes from: `spec.controlPlane.podEndpoint` or `kubeconfig`.
        source: &'static str,
        /// Why pods may not be able to use it all the same.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        caveats: Vec<Caveat>,
    },
    /// Pods get no API access: no token, and no variable naming an API server.
    Denied {
        /// Machine reason.
        reason: &'static str,
        /// Why.
        message: String,
    },
}

impl ApiAccess {
    /// The API access of a Tenant's pods: its `spec.controlPlane.podEndpoint`, else its
    /// kubeconfig's server (`None` offline, where the kubeconfig is not read).
    pub fn of(tenant: &Tenant, kubeconfig: Option<Kubeconfig<'_>>) -> ApiAccess {
        let mut caveats = Vec::new();
        let (endpoint, source) = match (&tenant.spec.control_plane.pod_endpoint, kubeconfig) {
            (Some(text), _) => match Endpoint::parse(text) {
                Ok(e) => (Some(e), "spec.controlPlane.podEndpoint"),
                Err(problem) => {
                    return ApiAccess::Denied {
                        reason: "InvalidPodEndpoint",
                        message: format!("spec.controlPlane.podEndpoint: {problem}"),
                    };
                }
            },
            (None, Some(kc)) => match Endpoint::of_server(kc.server) {
                Ok((e, https)) => {
                    if !https {
                        caveats.push(Caveat {
                            reason: "PlainHttpEndpoint",
                            message: format!(
                                "the tenant API server is served over plain HTTP at {e}; \
                                 in-cluster clients speak HTTPS: set \
                                 spec.controlPlane.podEndpoint to an HTTPS endpoint"
                            ),
                        });
                    }
                    (Some(e), "kubeconfig")
                }
                Err(problem) => {
                    return ApiAccess::Denied {
                        reason: "InvalidKubeconfigServer",
                        message: format!(
                            "{problem}; set spec.controlPlane.podEndpoint to the address at \
                             which pods reach the tenant API server"
                        ),
                    };
                }
            },
            (None, None) => (None, "kubeconfig"),
        };
        if let Some(e) = endpoint.as_ref().filter(|e| e.is_loopback()) {
            caveats.insert(
                0,
                Caveat {
                    reason: "LoopbackEndpoint",
                    message: format!(
                        "{e} is a loopback address: pods on a real host cannot reach it; \
                         set spec.controlPlane.podEndpoint to an address of the host's pod \
                         network (such as the tenant API server's Service)"
                    ),
                },
            );
        }
        if kubeconfig.is_some_and(|kc| !kc.has_ca) {
            caveats.push(Caveat {
                reason: "NoCertificateAuthority",
                message: "the kubeconfig carries no certificate-authority-data: pods get an \
                          empty ca.crt and verify the tenant API server with their system roots"
                    .into(),
            });
        }
        ApiAccess::Granted {
            endpoint,
            source,
            caveats,
        }
    }

    /// The Tenant's `PodAPIAccess` condition: status, reason, message.
    pub fn condition(&self) -> (bool, &'static str, String) {
        match self {
            ApiAccess::Denied { reason, message } => (
                false,
                reason,
                format!("{message}; pods are synced without API access"),
            ),
            ApiAccess::Granted {
                endpoint, caveats, ..
            } => {
                let at = endpoint
                    .as_ref()
                    .map_or("the kubeconfig's server".to_string(), Endpoint::to_string);
                match caveats.first() {
                    None => (
                        true,
                        "EndpointUsable",
                        format!("pods reach the tenant API server at {at}"),
                    ),
                    Some(first) => (
                        false,
                        first.reason,
                        format!(
                            "pods are given {at}, but: {}",
                            caveats
                                .iter()
                                .map(|c| c.message.as_str())
                                .collect::<Vec<_>>()
                                .join("; ")
                        ),
                    ),
                }
            }
        }
    }
}

/// The tenant's DNS as its Tenant configures it (`spec.dns`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsSettings {
    /// Whose resolver pods use.
    pub policy: DnsPolicy,
    /// Namespace of the tenant's DNS Service.
    pub namespace: String,
    /// Name of the tenant's DNS Service.
    pub name: String,
    /// The tenant cluster's DNS domain.
    pub cluster_domain: String,
}

impl From<&Tenant> for DnsSettings {
    fn from(tenant: &Tenant) -> Self {
        let dns = tenant.spec.dns.clone().unwrap_or_default();
        let service = dns.service.unwrap_or_default();
        let or = |s: String, default: &str| {
            if s.is_empty() { default.to_string() } else { s }
        };
        DnsSettings {
            policy: dns.policy,
            namespace: or(service.namespace, "kube-system"),
            name: or(service.name, "kube-dns"),
            cluster_domain: dns.cluster_domain.unwrap_or_else(|| "cluster.local".into()),
        }
    }
}

/// What every pod of a Tenant shares of its world.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantWorld {
    /// How pods reach the tenant API server.
    pub api: ApiAccess,
    /// What they resolve names with.
    pub dns: DnsSettings,
}

impl TenantWorld {
    /// The world of a Tenant's pods (`kubeconfig`: `None` offline).
    pub fn of(tenant: &Tenant, kubeconfig: Option<Kubeconfig<'_>>) -> TenantWorld {
        TenantWorld {
            api: ApiAccess::of(tenant, kubeconfig),
            dns: DnsSettings::from(tenant),
        }
    }
}

/// Where a tenant Service is on the host, as a pod's world needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostAddress {
    /// Its host Service's cluster IP.
    ClusterIp(String),
    /// A headless or ExternalName Service: no address (no links, not a nameserver).
    None,
    /// The SyncPolicy syncs it, and its host Service has no address yet.
    Awaited,
    /// It does not reach the host: why.
    NotSynced(String),
}

impl HostAddress {
    /// The address of a tenant Service, from its host Service's cluster IP (when there is a
    /// host Service with one) and whether the SyncPolicy syncs it (`Err` with why not).
    pub fn of(
        tenant_service: &Value,
        host_cluster_ip: Option<&str>,
        synced: Result<(), String>,
    ) -> Self {
        let kind = tenant_service.pointer("/spec/type").and_then(Value::as_str);
        let tenant_ip = tenant_service
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str);
        if kind == Some("ExternalName") || tenant_ip == Some("None") {
            return HostAddress::None;
        }
        match (synced, host_cluster_ip) {
            (Err(why), _) => HostAddress::NotSynced(why),
            (Ok(()), Some("None")) => HostAddress::None,
            (Ok(()), Some(ip)) if !ip.is_empty() => HostAddress::ClusterIp(ip.to_string()),
            (Ok(()), _) => HostAddress::Awaited,
        }
    }
}

/// A tenant Service as a pod's world sees it: its tenant name and ports, its host address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantService {
    /// Its name in the tenant.
    pub name: String,
    /// Where it is on the host.
    pub address: HostAddress,
    /// `(name, port, protocol)` of each port, in order.
    pub ports: Vec<(Option<String>, i64, String)>,
}

impl TenantService {
    /// A tenant Service object as the SyncPolicy `policy` and its host Service's cluster IP
    /// (when there is a host Service with one) place it on the host.
    pub fn placed(
        tenant_service: &Value,
        host_cluster_ip: Option<&str>,
        policy: &crate::CompiledPolicy,
    ) -> TenantService {
        let synced = match TenantObject::from_value(tenant_service.clone()) {
            Ok(object) => {
                let verdict = policy.evaluate(&object);
                match verdict.action {
                    tenantplane_api::SyncAction::Sync => Ok(()),
                    _ => Err(format!("{} ({})", verdict.reason, verdict.message)),
                }
            }
            Err(e) => Err(e.to_string()),
        };
        TenantService::of(
            tenant_service,
            HostAddress::of(tenant_service, host_cluster_ip, synced),
        )
    }

    /// A tenant Service object at a host address.
    pub fn of(tenant_service: &Value, address: HostAddress) -> TenantService {
        let ports = tenant_service
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p.get("name")
                        .and_then(Value::as_str)
                        .filter(|n| !n.is_empty())
                        .map(str::to_string),
                    p.get("port")?.as_i64()?,
                    p.get("protocol")
                        .and_then(Value::as_str)
                        .unwrap_or("TCP")
                        .to_string(),
                ))
            })
            .collect();
        TenantService {
            name: tenant_service
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            address,
            ports,
        }
    }
}

/// The tenant's Services, as the syncer's stores or explain-sync's inputs know them.
pub trait TenantServices {
    /// The tenant Service `namespace/name`; `None` when the tenant has none (or its Services
    /// are not known: see [`TenantServices::known`]).
    fn service(&self, namespace: &str, name: &str) -> Option<TenantService>;
    /// Every tenant Service of `namespace`, ordered by name.
    fn services_in(&self, namespace: &str) -> Vec<TenantService>;
    /// Why the tenant's Services are not known (the SyncPolicy syncs no Services), if so.
    fn known(&self) -> Result<(), String> {
        Ok(())
    }
}

/// One token a pod's projections ask for: the key of the token Secret that holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRequest {
    /// Key of the token Secret.
    pub key: String,
    /// Audience, when the projection names one (else the tenant API server's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// The lifetime asked of the tenant API server.
    pub expiration_seconds: i64,
}

impl TokenRequest {
    /// The token requests of a tenant pod's projected `serviceAccountToken` sources, one per
    /// distinct (audience, lifetime), those for the tenant API server's own audience first, then
    /// in the order they appear; the first is `token`, the others `token-2`, `token-3`, ...
    pub fn of_pod(pod: &Value) -> Vec<TokenRequest> {
        let mut requests: Vec<TokenRequest> = Vec::new();
        for source in token_sources(pod) {
            let audience = source
                .get("audience")
                .and_then(Value::as_str)
                .filter(|a| !a.is_empty())
                .map(str::to_string);
            let asked = source
                .get("expirationSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(DEFAULT_TOKEN_SECONDS);
            let expiration_seconds = if asked == KUBELET_TOKEN_SECONDS {
                DEFAULT_TOKEN_SECONDS
            } else {
                asked
            };
            if !requests
                .iter()
                .any(|r| r.audience == audience && r.expiration_seconds == expiration_seconds)
            {
                requests.push(TokenRequest {
                    key: String::new(),
                    audience,
                    expiration_seconds,
                });
            }
        }
        requests.sort_by_key(|r| r.audience.is_some());
        for (i, r) in requests.iter_mut().enumerate() {
            r.key = match i {
                0 => "token".to_string(),
                n => format!("token-{}", n + 1),
            };
        }
        requests
    }

    /// The key that serves a projected `serviceAccountToken` source.
    fn key_for<'r>(requests: &'r [TokenRequest], source: &Value) -> Option<&'r str> {
        let audience = source
            .get("audience")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty());
        let asked = source
            .get("expirationSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(DEFAULT_TOKEN_SECONDS);
        requests
            .iter()
            .find(|r| {
                r.audience.as_deref() == audience
                    && (r.expiration_seconds == asked
                        || (asked == KUBELET_TOKEN_SECONDS
                            && r.expiration_seconds == DEFAULT_TOKEN_SECONDS))
            })
            .map(|r| r.key.as_str())
    }
}

/// The name of the projected volume a pod read from a file is given by [`as_admitted`] (the
/// tenant API server adds `kube-api-access-<5 random characters>`).
const API_ACCESS_VOLUME: &str = "kube-api-access";

/// A tenant pod as the tenant API server's ServiceAccount admission stores it, for a pod read
/// from a file (explain-sync): unless `automountServiceAccountToken` is false on the pod (or,
/// unset there, on its ServiceAccount `account`, when it is known), every init container and
/// container without a mount at [`SERVICE_ACCOUNT_MOUNT`] mounts a projected volume of the
/// kubelet's token, the tenant's CA and the namespace, as kube-apiserver adds it. A pod that
/// already has token projections (one read from an API server) is returned as it is.
pub fn as_admitted(pod: &TenantObject, account: Option<&Value>) -> Option<TenantObject> {
    if token_sources(&pod.object).next().is_some() {
        return None;
    }
    let spec = pod.object.get("spec")?;
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| account?.get("automountServiceAccountToken")?.as_bool())
        .unwrap_or(true);
    if !automount {
        return None;
    }
    let mut admitted = pod.clone();
    let spec = admitted.object.get_mut("spec")?.as_object_mut()?;
    let mut mounted = false;
    for list in ["initContainers", "containers"] {
        let Some(Value::Array(containers)) = spec.get_mut(list) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
            let Some(mounts) = mounts.as_array_mut() else {
                continue;
            };
            if !mounts
                .iter()
                .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(SERVICE_ACCOUNT_MOUNT))
            {
                mounts.push(json!({"name": API_ACCESS_VOLUME, "readOnly": true,
                    "mountPath": SERVICE_ACCOUNT_MOUNT}));
                mounted = true;
            }
        }
    }
    if !mounted {
        return None;
    }
    let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
    volumes.as_array_mut()?.push(json!({"name": API_ACCESS_VOLUME, "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": KUBELET_TOKEN_SECONDS, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}));
    Some(admitted)
}

/// The projected `serviceAccountToken` sources of a pod, in order.
fn token_sources(pod: &Value) -> impl Iterator<Item = &Map<String, Value>> {
    pod.pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.pointer("/projected/sources").and_then(Value::as_array))
        .flatten()
        .filter_map(|s| s.get("serviceAccountToken").and_then(Value::as_object))
}

/// When a token issued at `issued` and expiring at `expires` is refreshed: at 80% of its life,
/// and at most 24 hours after it was issued (the kubelet's rule).
pub fn refresh_at(issued: Timestamp, expires: Timestamp) -> Timestamp {
    let life = expires.duration_since(issued);
    let at = issued + life.checked_mul(4).map_or(life, |l| l / 5);
    at.min(issued + MAX_TOKEN_AGE)
}

/// What a pod resolves names with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "resolver")]
pub enum Resolver {
    /// The tenant's DNS Service, at its host address.
    Tenant {
        /// Host address of the tenant's DNS Service.
        nameserver: String,
        /// `namespace/name` of that Service in the tenant.
        service: String,
        /// Search domains, the tenant's first.
        searches: Vec<String>,
    },
    /// The tenant's DNS Service is synced and its host Service has no address yet: the pod is
    /// not created before it has one, so that it never starts with the wrong resolver.
    Awaited {
        /// `namespace/name` of the tenant's DNS Service.
        service: String,
    },
    /// The host cluster's resolver.
    Host {
        /// Machine reason (the `TenantDNS` condition's).
        reason: &'static str,
        /// Why.
        message: String,
    },
    /// The pod's own `dnsPolicy`, which does not ask for the cluster's DNS.
    Own {
        /// The pod's dnsPolicy.
        dns_policy: String,
    },
}

/// What one synced pod sees of its tenant's cluster: computed when its host pod is created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodWorld {
    /// How it reaches the tenant API server.
    pub api: ApiAccess,
    /// `namespace/name` of its ServiceAccount in the tenant.
    pub service_account: String,
    /// The tokens its projections ask for (none: the tenant pod has no token projection, as
    /// with `automountServiceAccountToken: false`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<TokenRequest>,
    /// The host Secret holding them, when there are any and API access is granted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_secret: Option<String>,
    /// What it resolves names with.
    pub dns: Resolver,
    /// The tenant Services whose links it gets (`None`: `enableServiceLinks: false`).
    pub service_links: Option<Vec<String>>,
    /// Tenant Services of its namespace not yet on the host when it was planned (no links).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub services_awaited: Vec<String>,
    #[serde(skip)]
    links: Vec<TenantService>,
    #[serde(skip)]
    cluster_domain: String,
}

impl PodWorld {
    /// The world of the tenant pod `pod`, whose host pod is `host_pod`, in `tenant`'s world, with
    /// the tenant's Services as `services` knows them.
    pub fn of(
        tenant: &TenantWorld,
        pod: &TenantObject,
        host_pod: &str,
        services: &dyn TenantServices,
    ) -> PodWorld {
        let object = &pod.object;
        let namespace = &pod.identity.namespace;
        let spec = object.get("spec");
        let field = |name: &str| spec.and_then(|s| s.get(name));
        let service_account = format!(
            "{namespace}/{}",
            field("serviceAccountName")
                .and_then(Value::as_str)
                .unwrap_or("default")
        );
        let tokens = TokenRequest::of_pod(object);
        let token_secret = (!tokens.is_empty() && matches!(tenant.api, ApiAccess::Granted { .. }))
            .then(|| token_secret_name(host_pod));
        let dns = resolver(
            &tenant.dns,
            field("dnsPolicy").and_then(Value::as_str),
            field("hostNetwork").and_then(Value::as_bool) == Some(true),
            namespace,
            services,
        );
        let links_on = field("enableServiceLinks").and_then(Value::as_bool) != Some(false);
        let (mut links, mut services_awaited) = (Vec::new(), Vec::new());
        if links_on {
            for s in services.services_in(namespace) {
                if namespace == "default" && s.name == "kubernetes" {
                    // The tenant API server's own Service: its variables come from the endpoint.
                    continue;
                }
                match s.address {
                    HostAddress::ClusterIp(_) => links.push(s),
                    HostAddress::Awaited => services_awaited.push(s.name),
                    HostAddress::None | HostAddress::NotSynced(_) => {}
                }
            }
        }
        PodWorld {
            api: tenant.api.clone(),
            service_account,
            tokens,
            token_secret,
            dns,
            service_links: links_on.then(|| links.iter().map(|s| s.name.clone()).collect()),
            services_awaited,
            links,
            cluster_domain: tenant.dns.cluster_domain.clone(),
        }
    }

    /// Why the pod must not be created yet, if it must wait.
    pub fn awaits(&self) -> Option<String> {
        match &self.dns {
            Resolver::Awaited { service } => Some(format!(
                "the tenant's DNS Service {service} has no host address yet: the pod is created \
                 once it has one, so that it never starts with the wrong resolver"
            )),
            _ => None,
        }
    }

    /// The Tenant's `TenantDNS` condition as this pod found it (`None` when the pod's own
    /// dnsPolicy decided, which says nothing of the Tenant).
    pub fn dns_condition(&self) -> Option<(bool, &'static str, String)> {
        match &self.dns {
            Resolver::Tenant {
                nameserver,
                service,
                ..
            } => Some((
                true,
                "TenantResolver",
                format!(
                    "pods resolve names with the tenant's DNS Service {service} at {nameserver}"
                ),
            )),
            Resolver::Host { reason, message } => Some((false, reason, message.clone())),
            Resolver::Awaited { .. } | Resolver::Own { .. } => None,
        }
    }

    /// Adds the pod's world to the desired host pod `host` (translated from the tenant pod
    /// `tenant_pod`) before it is created: token sources, API variables and hosts entries, the
    /// resolver, service links.
    pub fn furnish(&self, tenant_pod: &Value, host: &mut Value) {
        let Some(spec) = host.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        self.token_volumes(tenant_pod, spec);
        let env = self.environment();
        for list in ["initContainers", "containers"] {
            let Some(Value::Array(containers)) = spec.get_mut(list) else {
                continue;
            };
            for c in containers.iter_mut().filter_map(Value::as_object_mut) {
                prepend_env(c, &env);
            }
        }
        spec.insert("enableServiceLinks".into(), json!(false));
        if let ApiAccess::Granted {
            endpoint: Some(endpoint),
            ..
        } = &self.api
            && let Some(ip) = endpoint.ip()
        {
            let aliases = spec
                .entry("hostAliases")
                .or_insert_with(|| json!([]))
                .as_array_mut();
            if let Some(aliases) = aliases
                && !aliases
                    .iter()
                    .any(|a| a.get("ip").and_then(Value::as_str) == Some(ip.to_string().as_str()))
            {
                let d = &self.cluster_domain;
                aliases.push(json!({"ip": ip.to_string(), "hostnames": [
                    "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                    format!("kubernetes.default.svc.{d}")]}));
            }
        }
        if let Resolver::Tenant {
            nameserver,
            searches,
            ..
        } = &self.dns
        {
            let pod_config = spec.remove("dnsConfig");
            let own = |key: &str| {
                pod_config
                    .as_ref()
                    .and_then(|c| c.get(key))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            };
            let mut nameservers = vec![json!(nameserver)];
            nameservers.extend(own("nameservers"));
            let mut all_searches: Vec<Value> = searches.iter().map(|s| json!(s)).collect();
            for s in own("searches") {
                if !all_searches.contains(&s) {
                    all_searches.push(s);
                }
            }
            let own_options = own("options");
            let mut options: Vec<Value> = Vec::new();
            if !own_options
                .iter()
                .any(|o| o.get("name").and_then(Value::as_str) == Some("ndots"))
            {
                options.push(json!({"name": "ndots", "value": "5"}));
            }
            options.extend(own_options);
            spec.insert("dnsPolicy".into(), json!("None"));
            spec.insert(
                "dnsConfig".into(),
                json!({"nameservers": nameservers, "searches": all_searches, "options": options}),
            );
        }
    }

    /// The pod's projected token sources served from its token Secret (or, with no API access,
    /// dropped), and the tenant's `kube-root-ca.crt` beside them as that Secret's `ca.crt`.
    fn token_volumes(&self, tenant_pod: &Value, spec: &mut Map<String, Value>) {
        let tenant_volumes = tenant_pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array);
        let (Some(tenant_volumes), Some(Value::Array(volumes))) =
            (tenant_volumes, spec.get_mut("volumes"))
        else {
            return;
        };
        for (tenant_volume, volume) in tenant_volumes.iter().zip(volumes.iter_mut()) {
            let Some(tenant_sources) = tenant_volume
                .pointer("/projected/sources")
                .and_then(Value::as_array)
                .filter(|s| s.iter().any(|s| s.get("serviceAccountToken").is_some()))
            else {
                continue;
            };
            let Some(Value::Array(sources)) = volume.pointer_mut("/projected/sources") else {
                continue;
            };
            // The host sources are the tenant's without the token ones, in the same order.
            let mut translated = std::mem::take(sources).into_iter();
            for tenant_source in tenant_sources {
                if let Some(token) = tenant_source.get("serviceAccountToken") {
                    let key = TokenRequest::key_for(&self.tokens, token);
                    if let (Some(secret), Some(key)) = (&self.token_secret, key) {
                        let path = token.get("path").cloned().unwrap_or(json!("token"));
                        sources.push(json!({"secret": {"name": secret,
                            "items": [{"key": key, "path": path}]}}));
                    }
                    continue;
                }
                let Some(host_source) = translated.next() else {
                    break;
                };
                match (&self.token_secret, root_ca_items(tenant_source)) {
                    (Some(secret), Some(items)) => {
                        sources.push(json!({"secret": {"name": secret, "items": items}}));
                    }
                    _ => sources.push(host_source),
                }
            }
        }
    }

    /// The variables of the API endpoint and of the service links, as the kubelet writes them.
    fn environment(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        match &self.api {
            ApiAccess::Granted {
                endpoint: Some(e), ..
            } => {
                let (host, port) = (e.url_host(), e.port);
                push_links(
                    &mut env,
                    "KUBERNETES",
                    &e.host,
                    &host,
                    &[(Some("https".into()), i64::from(port), "TCP".into())],
                );
                if port != 443 {
                    mask_port(&mut env, "KUBERNETES", 443);
                }
            }
            ApiAccess::Granted { endpoint: None, .. } => {}
            ApiAccess::Denied { .. } => {
                for name in ["KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"] {
                    env.push((name.to_string(), String::new()));
                }
                env.push(("KUBERNETES_SERVICE_PORT_HTTPS".into(), String::new()));
                env.push(("KUBERNETES_PORT".into(), String::new()));
                mask_port(&mut env, "KUBERNETES", 443);
            }
        }
        for s in &self.links {
            if let HostAddress::ClusterIp(ip) = &s.address {
                let url_host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip.clone()
                };
                push_links(&mut env, &env_name(&s.name), ip, &url_host, &s.ports);
            }
        }
        env
    }

    /// One line for the decision that creates the host pod.
    pub fn describe(&self) -> String {
        let api = match &self.api {
            ApiAccess::Denied { reason, message } => {
                format!("API: none ({reason}: {message})")
            }
            ApiAccess::Granted {
                endpoint, caveats, ..
            } => {
                let at = endpoint
                    .as_ref()
                    .map_or("the kubeconfig's server".into(), |e| e.to_string());
                let caveats = if caveats.is_empty() {
                    String::new()
                } else {
                    let reasons: Vec<&str> = caveats.iter().map(|c| c.reason).collect();
                    format!(" ({})", reasons.join(", "))
                };
                match &self.token_secret {
                    None => format!(
                        "API: {at}{caveats}, no token (the pod projects none: \
                         automountServiceAccountToken is off for it)"
                    ),
                    Some(secret) => {
                        let tokens: Vec<String> = self
                            .tokens
                            .iter()
                            .map(|t| match &t.audience {
                                Some(a) => {
                                    format!("{}: audience {a}, {} s", t.key, t.expiration_seconds)
                                }
                                None => format!(
                                    "{}: the tenant API server's audience, {} s",
                                    t.key, t.expiration_seconds
                                ),
                            })
                            .collect();
                        format!(
                            "API: {at}{caveats} with tokens of ServiceAccount {} from the \
                             tenant's TokenRequest, bound to the pod, in Secret {secret} ({}), \
                             refreshed at 80% of their life",
                            self.service_account,
                            tokens.join("; ")
                        )
                    }
                }
            }
        };
        let dns = match &self.dns {
            Resolver::Tenant {
                nameserver,
                service,
                ..
            } => format!("DNS: {nameserver} (the tenant's {service})"),
            Resolver::Awaited { service } => {
                format!("DNS: the host address of the tenant's {service}, once it has one")
            }
            Resolver::Host { message, .. } => {
                format!("DNS: the host's resolver, because {message}")
            }
            Resolver::Own { dns_policy } => format!("DNS: the pod's own dnsPolicy {dns_policy}"),
        };
        let mut links = match &self.service_links {
            None => "service links: off".to_string(),
            Some(names) if names.is_empty() => "service links: none".to_string(),
            Some(names) => format!("service links: {}", names.join(", ")),
        };
        if !self.services_awaited.is_empty() {
            links.push_str(&format!(
                " (not on the host yet: {})",
                self.services_awaited.join(", ")
            ));
        }
        format!("pod world: {api}; {dns}; {links}")
    }
}

/// The items of a projected `kube-root-ca.crt` ConfigMap source that the token Secret's `ca.crt`
/// serves: only when it asks for `ca.crt` alone (or everything).
fn root_ca_items(source: &Value) -> Option<Value> {
    let cm = source.get("configMap")?;
    if cm.get("name").and_then(Value::as_str) != Some("kube-root-ca.crt") {
        return None;
    }
    match cm.get("items").and_then(Value::as_array) {
        None => Some(json!([{"key": "ca.crt", "path": "ca.crt"}])),
        Some(items)
            if items
                .iter()
                .all(|i| i.get("key").and_then(Value::as_str) == Some("ca.crt")) =>
        {
            Some(Value::Array(items.clone()))
        }
        Some(_) => None,
    }
}

/// The resolver of a pod with `dns_policy` (absent: `ClusterFirst`) in `namespace`.
fn resolver(
    dns: &DnsSettings,
    dns_policy: Option<&str>,
    host_network: bool,
    namespace: &str,
    services: &dyn TenantServices,
) -> Resolver {
    let dns_policy = dns_policy.unwrap_or("ClusterFirst");
    let cluster_first = match dns_policy {
        "ClusterFirstWithHostNet" => true,
        // A hostNetwork pod with ClusterFirst gets the node's resolver (the kubelet's rule).
        "ClusterFirst" => !host_network,
        _ => false,
    };
    if !cluster_first {
        return Resolver::Own {
            dns_policy: dns_policy.to_string(),
        };
    }
    let service = format!("{}/{}", dns.namespace, dns.name);
    if dns.policy == DnsPolicy::Host {
        return Resolver::Host {
            reason: "HostResolverChosen",
            message: "spec.dns.policy is Host".into(),
        };
    }
    if let Err(why) = services.known() {
        return Resolver::Host {
            reason: "TenantServicesNotSynced",
            message: format!("the tenant's DNS Service {service} cannot reach the host: {why}"),
        };
    }
    let Some(found) = services.service(&dns.namespace, &dns.name) else {
        return Resolver::Host {
            reason: "TenantDnsServiceMissing",
            message: format!(
                "the tenant has no DNS Service {service} (spec.dns.service names another)"
            ),
        };
    };
    match found.address {
        HostAddress::ClusterIp(nameserver) => {
            let d = &dns.cluster_domain;
            Resolver::Tenant {
                nameserver,
                service,
                searches: vec![
                    format!("{namespace}.svc.{d}"),
                    format!("svc.{d}"),
                    d.clone(),
                ],
            }
        }
        HostAddress::Awaited => Resolver::Awaited { service },
        HostAddress::None => Resolver::Host {
            reason: "TenantDnsServiceHasNoAddress",
            message: format!("the tenant's DNS Service {service} is headless: it has no address"),
        },
        HostAddress::NotSynced(why) => Resolver::Host {
            reason: "TenantDnsServiceNotSynced",
            message: format!("the tenant's DNS Service {service} is not synced: {why}"),
        },
    }
}

/// The kubelet's variable name of a Service: upper case, `-` as `_`.
fn env_name(service: &str) -> String {
    service.to_ascii_uppercase().replace('-', "_")
}

/// The kubelet's variables of a Service `name` at `ip` (`url_host` as it goes in a URL).
fn push_links(
    env: &mut Vec<(String, String)>,
    name: &str,
    ip: &str,
    url_host: &str,
    ports: &[(Option<String>, i64, String)],
) {
    let Some((_, first, _)) = ports.first() else {
        return;
    };
    env.push((format!("{name}_SERVICE_HOST"), ip.to_string()));
    env.push((format!("{name}_SERVICE_PORT"), first.to_string()));
    for (port_name, port, _) in ports {
        if let Some(port_name) = port_name {
            env.push((
                format!("{name}_SERVICE_PORT_{}", env_name(port_name)),
                port.to_string(),
            ));
        }
    }
    for (i, (_, port, protocol)) in ports.iter().enumerate() {
        let proto = protocol.to_ascii_lowercase();
        let url = format!("{proto}://{url_host}:{port}");
        if i == 0 {
            env.push((format!("{name}_PORT"), url.clone()));
        }
        let prefix = format!("{name}_PORT_{port}_{}", protocol.to_ascii_uppercase());
        env.push((prefix.clone(), url));
        env.push((format!("{prefix}_PROTO"), proto));
        env.push((format!("{prefix}_PORT"), port.to_string()));
        env.push((format!("{prefix}_ADDR"), ip.to_string()));
    }
}

/// Empty variables over the host kubelet's `<name>_PORT_<port>_TCP*` family, so that none names
/// the host's Service.
fn mask_port(env: &mut Vec<(String, String)>, name: &str, port: u16) {
    let prefix = format!("{name}_PORT_{port}_TCP");
    for suffix in ["", "_PROTO", "_PORT", "_ADDR"] {
        env.push((format!("{prefix}{suffix}"), String::new()));
    }
}

/// Puts `env` before a container's own variables, leaving out those it sets itself: the kubelet
/// gives its own variables the lowest precedence and lets a container's `$(VAR)` references see
/// them, which only variables earlier in the list do on the host.
fn prepend_env(container: &mut Map<String, Value>, env: &[(String, String)]) {
    let own: Vec<Value> = container
        .get("env")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let sets = |name: &str| {
        own.iter()
            .any(|e| e.get("name").and_then(Value::as_str) == Some(name))
    };
    let mut all: Vec<Value> = env
        .iter()
        .filter(|(name, _)| !sets(name))
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    if all.is_empty() {
        return;
    }
    all.extend(own);
    container.insert("env".into(), Value::Array(all));
}

/// A token the tenant API server issued for one of a pod's [`TokenRequest`]s. Its `Debug` leaves
/// the token out: nothing that prints it may show it.
#[derive(Clone, PartialEq, Eq)]
pub struct MintedToken {
    /// What it was asked for.
    pub request: TokenRequest,
    /// The token.
    pub token: String,
    /// When the syncer received it.
    pub issued: Timestamp,
    /// When it expires, as the tenant API server said.
    pub expires: Timestamp,
}

impl fmt::Debug for MintedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MintedToken")
            .field("request", &self.request)
            .field("token", &"(not shown)")
            .field("issued", &self.issued)
            .field("expires", &self.expires)
            .finish()
    }
}

/// What a token Secret says of each of its tokens in its [`provenance::SERVICE_ACCOUNT_TOKENS`]
/// annotation: never the token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRecord {
    /// Its key in the Secret.
    pub key: String,
    /// `namespace/name` of the tenant ServiceAccount.
    pub service_account: String,
    /// Its audiences (empty: the tenant API server's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
    /// The lifetime asked for.
    pub expiration_seconds: i64,
    /// When it expires.
    pub expires: Timestamp,
    /// When it is refreshed.
    pub refresh_at: Timestamp,
}

impl TokenRecord {
    fn of(token: &MintedToken, service_account: &str) -> TokenRecord {
        TokenRecord {
            key: token.request.key.clone(),
            service_account: service_account.to_string(),
            audiences: token.request.audience.iter().cloned().collect(),
            expiration_seconds: token.request.expiration_seconds,
            expires: token.expires,
            refresh_at: refresh_at(token.issued, token.expires),
        }
    }
}

/// The `type` of a token Secret: not `kubernetes.io/service-account-token`, which the host's
/// token controller would fill with a host token.
pub const TOKEN_SECRET_TYPE: &str = "tenantplane.io/service-account-token";

/// The host Secret that holds a pod's tokens: `ca.crt` (the CA that verifies the tenant API
/// server) and one key per token, owned by the host pod (`host_pod`: its name and uid), so that
/// it goes with it, and carrying the pod's provenance (its `why`) and what each token is.
pub fn token_secret(
    placement: &crate::mapping::Placement,
    host_pod_uid: &str,
    service_account: &str,
    minted: &[MintedToken],
    ca_bundle: &str,
) -> Value {
    use data_encoding::BASE64;
    use tenantplane_api::provenance;
    let records: Vec<TokenRecord> = minted
        .iter()
        .map(|t| TokenRecord::of(t, service_account))
        .collect();
    let refresh = records.iter().map(|r| r.refresh_at).min();
    let reserved = |map: &crate::mapping::MetadataMap| -> Map<String, Value> {
        map.iter()
            .filter(|(k, _)| provenance::is_reserved(k))
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect()
    };
    let mut annotations = reserved(&placement.annotations);
    annotations.remove(provenance::DECISION_ID);
    annotations.remove(crate::translate::DESIRED_DIGEST);
    annotations.insert(
        provenance::SERVICE_ACCOUNT_TOKENS.into(),
        json!(serde_json::to_string(&records).expect("token records serialize")),
    );
    if let Some(at) = refresh {
        annotations.insert(provenance::REFRESH_AT.into(), json!(at.to_string()));
    }
    let mut data = Map::new();
    data.insert("ca.crt".into(), json!(BASE64.encode(ca_bundle.as_bytes())));
    for t in minted {
        data.insert(
            t.request.key.clone(),
            json!(BASE64.encode(t.token.as_bytes())),
        );
    }
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": TOKEN_SECRET_TYPE,
        "metadata": {
            "name": token_secret_name(&placement.name),
            "namespace": placement.namespace,
            "labels": reserved(&placement.labels),
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": placement.name,
                                 "uid": host_pod_uid}],
        },
        "data": data,
    })
}

/// The key of a token Secret that holds the CA, not a token.
const CA_KEY: &str = "ca.crt";

/// `secret`, a token Secret as the host sent it, with its tokens withheld: each value of its
/// `data` but the CA's emptied. What the syncer keeps of a token Secret changed on the host, to
/// look for drift: never a token.
pub fn withhold_tokens(secret: &mut Value) {
    if let Some(Value::Object(data)) = secret.get_mut("data") {
        for (key, value) in data.iter_mut() {
            if key != CA_KEY {
                *value = json!("");
            }
        }
    }
}

/// The drift of the token Secret `live` (as the host sent it, managedFields and all, its tokens
/// withheld: [`withhold_tokens`]) of the pod placed at `placement`, mounted by the host pod with
/// uid `host_pod_uid`, whose tokens of `service_account` serve `requests` with the CA
/// `ca_bundle`: [`drift::detect`]'s rule for every field tenantplane sets, but for what is not
/// kept here (the tokens, their records and refresh time, the decision id), which another field
/// manager has changed when it owns it. `None` when it holds what tenantplane set, or when
/// tenantplane never wrote it (something else at its name, not this pod's: [`TokenUpkeep`]).
///
/// [`drift::detect`]: crate::drift::detect
pub fn token_secret_drift(
    live: &Value,
    placement: &crate::mapping::Placement,
    host_pod_uid: &str,
    service_account: &str,
    requests: &[TokenRequest],
    ca_bundle: &str,
) -> Option<crate::drift::Drift> {
    use crate::drift::{FIELD_MANAGER, detect_withheld, written_by};
    use tenantplane_api::provenance;
    if !written_by(live, FIELD_MANAGER) {
        return None;
    }
    let mut desired = token_secret(placement, host_pod_uid, service_account, &[], ca_bundle);
    let annotations = [
        provenance::SERVICE_ACCOUNT_TOKENS,
        provenance::REFRESH_AT,
        provenance::DECISION_ID,
    ];
    let mut withheld: Vec<[&str; 3]> = Vec::new();
    for key in annotations {
        desired["metadata"]["annotations"][key] = json!("");
        withheld.push(["metadata", "annotations", key]);
    }
    for request in requests {
        desired["data"][&request.key] = json!("");
    }
    let mut paths: Vec<&[&str]> = withheld.iter().map(|p| &p[..]).collect();
    let data: Vec<[&str; 2]> = requests.iter().map(|r| ["data", r.key.as_str()]).collect();
    paths.extend(data.iter().map(|p| &p[..]));
    detect_withheld(&desired, live, FIELD_MANAGER, &paths)
}

/// What a pod's token Secret needs, from what the host store shows of it (its metadata).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenUpkeep {
    /// There is none: issue its tokens.
    Issue,
    /// It is this pod's, but for another incarnation of the tenant pod or host pod, or for
    /// other requests: replace its tokens.
    Replace(String),
    /// Its first token is due for refresh.
    Refresh,
    /// Its tokens are current; look again at this time.
    Current(Timestamp),
    /// Something else is at its name (not this pod's token Secret): left untouched.
    Foreign(String),
}

impl TokenUpkeep {
    /// What the token Secret `secret` (as the host store shows it, or `None`) of the tenant pod
    /// `pod` in `tenant`, mounted by the host pod with uid `host_pod_uid`, needs at `now` to
    /// serve `requests`.
    pub fn of(
        secret: Option<&Value>,
        tenant: &str,
        pod: &TenantObject,
        host_pod_uid: &str,
        requests: &[TokenRequest],
        now: Timestamp,
    ) -> TokenUpkeep {
        use tenantplane_api::provenance;
        let Some(secret) = secret else {
            return TokenUpkeep::Issue;
        };
        let label = |k: &str| {
            secret
                .pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
        };
        let annotation = |k: &str| {
            secret
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(k))
                .and_then(Value::as_str)
        };
        let id = &pod.identity;
        let this_pod = label(provenance::TENANT) == Some(tenant)
            && annotation(provenance::SOURCE_KIND) == Some("Pod")
            && label(provenance::SOURCE_NAMESPACE) == Some(id.namespace.as_str())
            && annotation(provenance::SOURCE_NAME) == Some(id.name.as_str())
            && secret
                .get("type")
                .and_then(Value::as_str)
                .is_none_or(|t| t == TOKEN_SECRET_TYPE);
        if !this_pod {
            return TokenUpkeep::Foreign(match label(provenance::TENANT) {
                Some(t) => format!(
                    "its provenance names {}/{}/{} of tenant {t}",
                    annotation(provenance::SOURCE_KIND).unwrap_or("?"),
                    label(provenance::SOURCE_NAMESPACE).unwrap_or("?"),
                    annotation(provenance::SOURCE_NAME).unwrap_or("?")
                ),
                None => "it has no tenantplane provenance".into(),
            });
        }
        if label(provenance::SOURCE_UID) != Some(id.uid.as_str()) {
            return TokenUpkeep::Replace(
                "it holds the tokens of an earlier incarnation of the tenant pod".into(),
            );
        }
        let owner = secret
            .pointer("/metadata/ownerReferences/0/uid")
            .and_then(Value::as_str);
        if owner != Some(host_pod_uid) {
            return TokenUpkeep::Replace(
                "it belongs to an earlier incarnation of the host pod".into(),
            );
        }
        let records: Vec<TokenRecord> = annotation(provenance::SERVICE_ACCOUNT_TOKENS)
            .and_then(|a| serde_json::from_str(a).ok())
            .unwrap_or_default();
        let serves = records.len() == requests.len()
            && requests.iter().all(|r| {
                records.iter().any(|t| {
                    t.key == r.key
                        && t.audiences == r.audience.iter().cloned().collect::<Vec<_>>()
                        && t.expiration_seconds == r.expiration_seconds
                })
            });
        if !serves {
            return TokenUpkeep::Replace("its tokens are not the ones the pod asks for".into());
        }
        match annotation(provenance::REFRESH_AT).and_then(|a| a.parse::<Timestamp>().ok()) {
            Some(at) if at > now => TokenUpkeep::Current(at),
            _ => TokenUpkeep::Refresh,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::{MappingVersion, TenantPlacement, place};
    use crate::translate::to_host;
    use pretty_assertions::assert_eq;

    fn placement() -> TenantPlacement {
        TenantPlacement {
            tenant: "acme".into(),
            host_namespace: "tenant-acme".into(),
            mapping: MappingVersion::V2,
        }
    }

    fn tenant(pod_endpoint: Option<&str>) -> Tenant {
        let mut t = Tenant::new("acme", Default::default());
        t.spec.control_plane.pod_endpoint = pod_endpoint.map(str::to_string);
        t
    }

    fn with_ca(server: &str) -> Option<Kubeconfig<'_>> {
        Some(Kubeconfig {
            server,
            has_ca: true,
        })
    }

    /// A tenant pod as a tenant API server stores it: with the `kube-api-access-*` volume its
    /// ServiceAccount admission adds, and a second projection for another audience.
    fn pod() -> TenantObject {
        TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "shop", "uid": "pod-uid"},
            "spec": {
                "serviceAccountName": "builder",
                "dnsConfig": {"searches": ["corp.example"], "options": [{"name": "edns0"}]},
                "containers": [{"name": "app", "image": "nginx",
                    "env": [{"name": "URL", "value": "http://$(BACKEND_SERVICE_HOST)"},
                            {"name": "BACKEND_SERVICE_PORT", "value": "mine"}],
                    "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": true,
                        "mountPath": SERVICE_ACCOUNT_MOUNT}]}],
                "volumes": [
                    {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}},
                    {"name": "vault", "projected": {"sources": [
                        {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 600,
                            "path": "vault-token"}}]}}]}}))
        .unwrap()
    }

    /// The tenant's Services: its DNS and `backend` in `shop` on the host, `pending` not yet.
    struct Services;

    impl TenantServices for Services {
        fn service(&self, namespace: &str, name: &str) -> Option<TenantService> {
            if (namespace, name) == ("kube-system", "kube-dns") {
                return Some(TenantService {
                    name: "kube-dns".into(),
                    address: HostAddress::ClusterIp("10.96.0.10".into()),
                    ports: vec![(Some("dns".into()), 53, "UDP".into())],
                });
            }
            self.services_in(namespace)
                .into_iter()
                .find(|s| s.name == name)
        }

        fn services_in(&self, namespace: &str) -> Vec<TenantService> {
            if namespace != "shop" {
                return Vec::new();
            }
            vec![
                TenantService {
                    name: "backend".into(),
                    address: HostAddress::ClusterIp("10.96.7.8".into()),
                    ports: vec![
                        (Some("http".into()), 8080, "TCP".into()),
                        (Some("metrics".into()), 9090, "TCP".into()),
                    ],
                },
                TenantService {
                    name: "pending".into(),
                    address: HostAddress::Awaited,
                    ports: vec![(None, 80, "TCP".into())],
                },
            ]
        }
    }

    fn env_of(host: &Value) -> Vec<(String, String)> {
        host.pointer("/spec/containers/0/env")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    e["value"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    fn furnished(world: &TenantWorld, pod: &TenantObject) -> (PodWorld, Value) {
        let p = place(&placement(), pod);
        let mut host = to_host(&placement(), pod, &p).unwrap().object;
        let pod_world = PodWorld::of(world, pod, &p.name, &Services);
        pod_world.furnish(&pod.object, &mut host);
        (pod_world, host)
    }

    #[test]
    fn endpoints_are_host_and_port_and_say_what_is_wrong() {
        assert_eq!(
            Endpoint::parse("10.96.12.7:443").unwrap().to_string(),
            "10.96.12.7:443"
        );
        let v6 = Endpoint::parse("[fd00::1]:6443").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("fd00::1", 6443));
        assert_eq!(v6.to_string(), "[fd00::1]:6443");
        assert_eq!(
            Endpoint::parse("API.tenant-acme.svc:443").unwrap().host,
            "api.tenant-acme.svc"
        );
        for (bad, says) in [
            ("10.0.0.1", "is not host:port"),
            ("10.0.0.1:0", "from 1 to 65535"),
            ("10.0.0.1:http", "from 1 to 65535"),
            ("[not-v6]:443", "is not an IPv6 address"),
            ("bad_host:443", "neither an IP address nor a DNS name"),
        ] {
            let e = Endpoint::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn api_access_comes_from_the_pod_endpoint_or_the_kubeconfig_with_its_caveats() {
        let set = ApiAccess::of(
            &tenant(Some("10.96.12.7:443")),
            with_ca("https://127.0.0.1:1"),
        );
        assert_eq!(set.condition().1, "EndpointUsable");
        let from_kubeconfig = ApiAccess::of(&tenant(None), with_ca("https://k.example:6443/"));
        assert_eq!(
            from_kubeconfig,
            ApiAccess::Granted {
                endpoint: Some(Endpoint::parse("k.example:6443").unwrap()),
                source: "kubeconfig",
                caveats: Vec::new(),
            }
        );
        let loopback = ApiAccess::of(&tenant(None), with_ca("https://[::1]:6443"));
        let (granted, reason, message) = loopback.condition();
        assert_eq!((granted, reason), (false, "LoopbackEndpoint"));
        assert!(
            message.contains("pods on a real host cannot reach it"),
            "{message}"
        );
        let ApiAccess::Denied { reason, message } =
            ApiAccess::of(&tenant(Some("api:99999")), with_ca("https://h:1"))
        else {
            panic!("an invalid podEndpoint gives no access")
        };
        assert_eq!(reason, "InvalidPodEndpoint");
        assert!(
            message.starts_with("spec.controlPlane.podEndpoint:"),
            "{message}"
        );
        assert!(matches!(
            ApiAccess::of(&tenant(None), with_ca("unix:///run/k.sock")),
            ApiAccess::Denied {
                reason: "InvalidKubeconfigServer",
                ..
            }
        ));
    }

    #[test]
    fn a_pods_token_requests_follow_its_projections_without_a_year_long_token() {
        assert_eq!(
            TokenRequest::of_pod(&pod().object),
            vec![
                TokenRequest {
                    key: "token".into(),
                    audience: None,
                    expiration_seconds: DEFAULT_TOKEN_SECONDS,
                },
                TokenRequest {
                    key: "token-2".into(),
                    audience: Some("vault".into()),
                    expiration_seconds: 600,
                },
            ]
        );
        let none = json!({"spec": {"containers": [{"name": "a", "image": "x"}]}});
        assert!(TokenRequest::of_pod(&none).is_empty());
    }

    #[test]
    fn tokens_are_refreshed_at_four_fifths_of_their_life_and_within_a_day() {
        let issued: Timestamp = "2026-12-03T10:00:00Z".parse().unwrap();
        let hour = issued + SignedDuration::from_hours(1);
        assert_eq!(refresh_at(issued, hour).to_string(), "2026-12-03T10:48:00Z");
        let two_days = issued + SignedDuration::from_hours(48);
        assert_eq!(
            refresh_at(issued, two_days).to_string(),
            "2026-12-04T10:00:00Z"
        );
    }

    #[test]
    fn a_created_pod_gets_its_tenant_api_its_tokens_its_dns_and_its_service_links() {
        let world = TenantWorld::of(&tenant(Some("10.96.12.7:6443")), with_ca("https://x:1"));
        let pod = pod();
        let (pod_world, host) = furnished(&world, &pod);
        assert_eq!(pod_world.awaits(), None);
        let secret = "web-x-shop.sa-token";
        assert_eq!(pod_world.token_secret.as_deref(), Some(secret));
        let spec = &host["spec"];
        assert_eq!(
            spec["volumes"][0]["projected"]["sources"],
            json!([
                {"secret": {"name": secret, "items": [{"key": "token", "path": "token"}]}},
                {"secret": {"name": secret, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                    "fieldPath": "metadata.labels['tenantplane.io/source-namespace']"}}]}},
            ]),
            "the kube-api-access volume: the tenant's token and CA from the token Secret"
        );
        assert_eq!(
            spec["volumes"][1]["projected"]["sources"],
            json!([{"secret": {"name": secret,
                "items": [{"key": "token-2", "path": "vault-token"}]}}])
        );
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["enableServiceLinks"], false);
        assert_eq!(
            spec["hostAliases"],
            json!([{"ip": "10.96.12.7", "hostnames": ["kubernetes", "kubernetes.default",
                "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"]}])
        );
        assert_eq!(spec["dnsPolicy"], "None");
        assert_eq!(
            spec["dnsConfig"],
            json!({"nameservers": ["10.96.0.10"],
                "searches": ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local",
                             "corp.example"],
                "options": [{"name": "ndots", "value": "5"}, {"name": "edns0"}]})
        );
        let env = env_of(&host);
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        let value = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(value("KUBERNETES_SERVICE_HOST"), Some("10.96.12.7"));
        assert_eq!(value("KUBERNETES_SERVICE_PORT"), Some("6443"));
        assert_eq!(value("KUBERNETES_SERVICE_PORT_HTTPS"), Some("6443"));
        assert_eq!(value("KUBERNETES_PORT"), Some("tcp://10.96.12.7:6443"));
        assert_eq!(value("KUBERNETES_PORT_6443_TCP_ADDR"), Some("10.96.12.7"));
        assert_eq!(
            value("KUBERNETES_PORT_443_TCP_ADDR"),
            Some(""),
            "the host kubelet's variables of its own API server are masked"
        );
        assert_eq!(value("BACKEND_SERVICE_HOST"), Some("10.96.7.8"));
        assert_eq!(value("BACKEND_SERVICE_PORT_METRICS"), Some("9090"));
        assert_eq!(value("BACKEND_PORT_8080_TCP"), Some("tcp://10.96.7.8:8080"));
        assert_eq!(
            value("BACKEND_SERVICE_PORT"),
            Some("mine"),
            "the container's own wins"
        );
        assert!(
            !names.iter().any(|n| n.starts_with("PENDING_")),
            "a Service not on the host yet has no links"
        );
        assert!(
            names.iter().position(|n| *n == "BACKEND_SERVICE_HOST")
                < names.iter().position(|n| *n == "URL"),
            "the kubelet's variables come first, so the container's $(VAR) references see them"
        );
        assert_eq!(pod_world.service_links, Some(vec!["backend".to_string()]));
        assert_eq!(pod_world.services_awaited, vec!["pending".to_string()]);
        let described = pod_world.describe();
        for says in [
            "10.96.12.7:6443",
            "ServiceAccount shop/builder",
            "Secret web-x-shop.sa-token",
            "DNS: 10.96.0.10",
            "service links: backend",
        ] {
            assert!(described.contains(says), "{described}");
        }
    }

    #[test]
    fn with_no_api_access_a_pod_gets_no_token_and_no_api_server_at_all() {
        let world = TenantWorld::of(&tenant(Some("nope")), with_ca("https://x:1"));
        let (pod_world, host) = furnished(&world, &pod());
        assert_eq!(pod_world.token_secret, None);
        let sources = &host["spec"]["volumes"][0]["projected"]["sources"];
        assert!(
            !sources.to_string().contains("sa-token")
                && !sources.to_string().contains("serviceAccountToken"),
            "{sources}"
        );
        assert!(host["spec"].get("hostAliases").is_none());
        let env = env_of(&host);
        for name in ["KUBERNETES_SERVICE_HOST", "KUBERNETES_PORT_443_TCP_ADDR"] {
            assert!(
                env.contains(&(name.into(), String::new())),
                "{name}: {env:?}"
            );
        }
        assert!(
            pod_world
                .describe()
                .contains("API: none (InvalidPodEndpoint")
        );
    }

    #[test]
    fn a_pods_resolver_is_the_tenants_dns_or_says_why_not() {
        let world = |policy: DnsPolicy, service: &str| {
            let mut t = tenant(Some("10.0.0.1:443"));
            let (namespace, name) = service.split_once('/').unwrap();
            t.spec.dns = Some(tenantplane_api::tenant::TenantDns {
                policy,
                service: Some(tenantplane_api::tenant::ServiceRef {
                    namespace: namespace.into(),
                    name: name.into(),
                }),
                cluster_domain: None,
            });
            TenantWorld::of(&t, None)
        };
        let dns =
            |world: &TenantWorld, pod: &TenantObject| PodWorld::of(world, pod, "h", &Services).dns;
        let pod = pod();
        assert!(matches!(
            dns(&world(DnsPolicy::Tenant, "kube-system/kube-dns"), &pod),
            Resolver::Tenant { .. }
        ));
        assert!(matches!(
            dns(&world(DnsPolicy::Tenant, "kube-system/coredns"), &pod),
            Resolver::Host {
                reason: "TenantDnsServiceMissing",
                ..
            }
        ));
        assert!(matches!(
            dns(&world(DnsPolicy::Host, "kube-system/kube-dns"), &pod),
            Resolver::Host {
                reason: "HostResolverChosen",
                ..
            }
        ));
        let mut own = pod.clone();
        own.object["spec"]["dnsPolicy"] = json!("Default");
        assert_eq!(
            dns(&world(DnsPolicy::Tenant, "kube-system/kube-dns"), &own),
            Resolver::Own {
                dns_policy: "Default".into()
            }
        );
        let mut host_network = pod.clone();
        host_network.object["spec"]["hostNetwork"] = json!(true);
        assert!(matches!(
            dns(
                &world(DnsPolicy::Tenant, "kube-system/kube-dns"),
                &host_network
            ),
            Resolver::Own { .. }
        ));
        let awaited = world(DnsPolicy::Tenant, "shop/pending");
        let pod_world = PodWorld::of(&awaited, &pod, "h", &Services);
        let waits = pod_world
            .awaits()
            .expect("a pod waits for its DNS Service's address");
        assert!(waits.contains("shop/pending"), "{waits}");
    }

    fn secret_of(minted: &[MintedToken]) -> Value {
        let pod = pod();
        token_secret(
            &place(&placement(), &pod),
            "host-pod-uid",
            "shop/builder",
            minted,
            "PEM",
        )
    }

    fn minted(issued: &str) -> Vec<MintedToken> {
        let issued: Timestamp = issued.parse().unwrap();
        TokenRequest::of_pod(&pod().object)
            .into_iter()
            .map(|request| MintedToken {
                expires: issued + SignedDuration::from_secs(request.expiration_seconds),
                request,
                token: "SECRET-TOKEN-BYTES".into(),
                issued,
            })
            .collect()
    }

    #[test]
    fn a_token_secret_is_the_pods_owned_by_its_host_pod_and_says_what_it_holds() {
        use data_encoding::BASE64;
        use tenantplane_api::provenance;
        let tokens = minted("2026-12-03T10:00:00Z");
        let secret = secret_of(&tokens);
        assert_eq!(secret["type"], TOKEN_SECRET_TYPE);
        let meta = &secret["metadata"];
        assert_eq!(meta["name"], "web-x-shop.sa-token");
        assert_eq!(meta["ownerReferences"][0]["uid"], "host-pod-uid");
        assert_eq!(meta["labels"][provenance::SOURCE_UID], "pod-uid");
        assert_eq!(meta["annotations"][provenance::SOURCE_KIND], "Pod");
        assert_eq!(
            meta["annotations"][provenance::REFRESH_AT],
            "2026-12-03T10:08:00Z"
        );
        let said = meta["annotations"][provenance::SERVICE_ACCOUNT_TOKENS]
            .as_str()
            .unwrap();
        assert!(!said.contains("SECRET-TOKEN-BYTES"), "{said}");
        let data = &secret["data"];
        assert_eq!(data["ca.crt"], BASE64.encode(b"PEM"));
        assert_eq!(data["token-2"], BASE64.encode(b"SECRET-TOKEN-BYTES"));
        assert!(!format!("{tokens:?}").contains("SECRET-TOKEN-BYTES"));
    }

    #[test]
    fn a_token_secret_is_issued_replaced_refreshed_or_left_alone() {
        let pod = pod();
        let requests = TokenRequest::of_pod(&pod.object);
        let secret = secret_of(&minted("2026-12-03T10:00:00Z"));
        let at = |t: &str| t.parse::<Timestamp>().unwrap();
        let upkeep = |secret: Option<&Value>, host_uid: &str, now: &str| {
            TokenUpkeep::of(secret, "acme", &pod, host_uid, &requests, at(now))
        };
        assert_eq!(
            upkeep(None, "host-pod-uid", "2026-12-03T10:01:00Z"),
            TokenUpkeep::Issue
        );
        assert_eq!(
            upkeep(Some(&secret), "host-pod-uid", "2026-12-03T10:01:00Z"),
            TokenUpkeep::Current(at("2026-12-03T10:08:00Z"))
        );
        assert_eq!(
            upkeep(Some(&secret), "host-pod-uid", "2026-12-03T10:08:00Z"),
            TokenUpkeep::Refresh
        );
        assert!(matches!(
            upkeep(Some(&secret), "another-host-pod", "2026-12-03T10:01:00Z"),
            TokenUpkeep::Replace(_)
        ));
        let mut recreated = secret.clone();
        recreated["metadata"]["labels"]["tenantplane.io/source-uid"] = json!("old-pod-uid");
        assert!(matches!(
            upkeep(Some(&recreated), "host-pod-uid", "2026-12-03T10:01:00Z"),
            TokenUpkeep::Replace(_)
        ));
        let platform = json!({"metadata": {"name": "web-x-shop.sa-token"}});
        assert_eq!(
            upkeep(Some(&platform), "host-pod-uid", "2026-12-03T10:01:00Z"),
            TokenUpkeep::Foreign("it has no tenantplane provenance".into())
        );
    }

    /// The token Secret as the host sends it once tenantplane wrote it, and `others` after,
    /// each `(manager, the fields it owns)`, its tokens withheld.
    fn live_token_secret(others: &[(&str, Value)]) -> Value {
        let mut live = secret_of(&minted("2026-12-03T10:00:00Z"));
        live["metadata"]["annotations"]["tenantplane.io/decision-id"] = json!("d-1");
        let mut entries = vec![json!({"manager": crate::drift::FIELD_MANAGER,
            "operation": "Apply", "fieldsV1": {"f:data": {"f:ca.crt": {}, "f:token-2": {}}}})];
        for (manager, fields) in others {
            entries.push(json!({"manager": manager, "operation": "Update",
                "time": "2026-12-03T10:05:00Z", "fieldsV1": fields}));
        }
        live["metadata"]["managedFields"] = json!(entries);
        withhold_tokens(&mut live);
        live
    }

    fn token_drift(live: &Value) -> Option<crate::drift::Drift> {
        let pod = pod();
        token_secret_drift(
            live,
            &place(&placement(), &pod),
            "host-pod-uid",
            "shop/builder",
            &TokenRequest::of_pod(&pod.object),
            "PEM",
        )
    }

    #[test]
    fn a_token_secret_changed_on_the_host_is_drift_told_by_who_owns_its_tokens() {
        use crate::drift::{DriftChange, FieldChange};
        let untouched = live_token_secret(&[]);
        assert_eq!(untouched["data"]["token-2"], "", "no token is kept");
        assert_eq!(token_drift(&untouched), None);

        let labelled = live_token_secret(&[(
            "label-bot",
            json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
        )]);
        assert_eq!(token_drift(&labelled), None, "another's label is theirs");

        let mut stolen = live_token_secret(&[(
            "kubectl-edit",
            json!({"f:data": {"f:token-2": {}, "f:extra": {}}}),
        )]);
        stolen["data"]["extra"] = json!("");
        let drift = token_drift(&stolen).expect("drift");
        assert_eq!(drift.change, DriftChange::Edited);
        let fields: Vec<(&str, FieldChange, Option<&str>)> = drift
            .fields
            .iter()
            .map(|f| {
                (
                    f.path.as_str(),
                    f.change,
                    f.by.as_ref().map(|b| b.manager.as_str()),
                )
            })
            .collect();
        assert_eq!(
            fields,
            [
                ("data.token-2", FieldChange::Changed, Some("kubectl-edit")),
                ("data.extra", FieldChange::Added, Some("kubectl-edit")),
            ]
        );

        let mut stripped = live_token_secret(&[]);
        stripped["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("tenantplane.io/tenant");
        stripped["data"].as_object_mut().unwrap().remove("ca.crt");
        let drift = token_drift(&stripped).expect("drift");
        assert_eq!(drift.change, DriftChange::ProvenanceRemoved);
        assert_eq!(drift.fields.len(), 2, "{drift:?}");

        let mut foreign = live_token_secret(&[]);
        foreign["metadata"]["managedFields"] = json!([{"manager": "someone", "operation": "Update",
            "fieldsV1": {"f:data": {}}}]);
        assert_eq!(
            token_drift(&foreign),
            None,
            "never tenantplane's: not drift"
        );
    }

    #[test]
    fn a_pod_read_from_a_file_is_given_what_the_tenant_api_servers_admission_gives_it() {
        let plain = TenantObject::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {"containers": [{"name": "a", "image": "x"}]}}))
        .unwrap();
        let admitted = as_admitted(&plain, None).expect("automounted by default");
        assert_eq!(TokenRequest::of_pod(&admitted.object).len(), 1);
        assert_eq!(
            admitted.object["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
            SERVICE_ACCOUNT_MOUNT
        );
        let quiet = json!({"automountServiceAccountToken": false});
        assert_eq!(as_admitted(&plain, Some(&quiet)), None);
        let mut wants = plain.clone();
        wants.object["spec"]["automountServiceAccountToken"] = json!(true);
        assert!(
            as_admitted(&wants, Some(&quiet)).is_some(),
            "the pod's own setting wins"
        );
        assert_eq!(as_admitted(&pod(), None), None, "a pod as stored is kept");
    }

    #[test]
    fn a_token_secret_name_is_never_a_synced_objects() {
        assert_eq!(token_secret_name("web-x-shop"), "web-x-shop.sa-token");
        let long = "a".repeat(250);
        let name = token_secret_name(&long);
        assert!(name.len() <= 253 && name.ends_with(".sa-token"), "{name}");
        assert_ne!(name, token_secret_name(&"a".repeat(251)));
    }
}
