//! The effective settings of a profile: its level's values, then its overrides, each value
//! remembering the profile field that decided it (`spec.level` for the level's own values); and
//! the checks that refuse bad or contradictory input with the field at fault.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tenantplane_api::IsolationLevel;
use tenantplane_api::isolation_profile::{IsolationProfileSpec, PodSecurityLevel};

use crate::{CompileError, quantity};

/// The field path recorded when a value comes from the level rather than an override.
pub(crate) const LEVEL_FIELD: &str = "spec.level";

/// The Pod Security Standards version every level pins (a cluster upgrade does not silently
/// tighten or loosen a tenant's pods; raise it here or with `spec.podSecurity.version`).
pub(crate) const PSS_VERSION: &str = "v1.34";

/// The RuntimeClass `strict` requires unless `spec.runtimeClass.required` names another.
pub(crate) const STRICT_RUNTIME_CLASS: &str = "gvisor";

/// A value and the profile field that decided it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sourced<T> {
    pub value: T,
    pub field: String,
}

impl<T> Sourced<T> {
    fn level(value: T) -> Self {
        Sourced {
            value,
            field: LEVEL_FIELD.to_string(),
        }
    }

    fn is_override(&self) -> bool {
        self.field != LEVEL_FIELD
    }
}

/// Resource names to quantities, each entry with its own deciding field.
pub(crate) type Quantities = BTreeMap<String, Sourced<String>>;

/// Everything the compiler needs, decided.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Settings {
    pub enforce: Sourced<PodSecurityLevel>,
    pub audit: Sourced<PodSecurityLevel>,
    pub warn: Sourced<PodSecurityLevel>,
    pub version: Sourced<String>,
    pub deny_ingress: Sourced<bool>,
    pub deny_egress: Sourced<bool>,
    pub allow_dns: Sourced<bool>,
    pub allow_intra_tenant: Sourced<bool>,
    pub egress_cidrs: Sourced<Vec<String>>,
    pub egress_namespaces: Sourced<Vec<String>>,
    pub quota: Quantities,
    pub limit_default: Quantities,
    pub limit_default_request: Quantities,
    pub limit_max: Quantities,
    pub runtime_class: Sourced<Option<String>>,
    pub image_pull_always: Sourced<bool>,
    pub deny_node_ports: Sourced<bool>,
}

fn quantities(entries: &[(&str, &str)]) -> Quantities {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), Sourced::level(v.to_string())))
        .collect()
}

const OBJECT_COUNTS_BASELINE: &[(&str, &str)] = &[
    ("configmaps", "200"),
    ("persistentvolumeclaims", "50"),
    ("pods", "200"),
    ("secrets", "200"),
    ("services", "50"),
    ("services.loadbalancers", "0"),
    ("services.nodeports", "0"),
];

const QUOTA_RESTRICTED: &[(&str, &str)] = &[
    ("configmaps", "100"),
    ("limits.cpu", "16"),
    ("limits.memory", "32Gi"),
    ("persistentvolumeclaims", "20"),
    ("pods", "100"),
    ("requests.cpu", "8"),
    ("requests.memory", "16Gi"),
    ("requests.storage", "200Gi"),
    ("secrets", "100"),
    ("services", "20"),
    ("services.loadbalancers", "0"),
    ("services.nodeports", "0"),
];

const QUOTA_STRICT: &[(&str, &str)] = &[
    ("configmaps", "50"),
    ("limits.cpu", "8"),
    ("limits.memory", "16Gi"),
    ("persistentvolumeclaims", "10"),
    ("pods", "50"),
    ("requests.cpu", "4"),
    ("requests.memory", "8Gi"),
    ("requests.storage", "50Gi"),
    ("secrets", "50"),
    ("services", "10"),
    ("services.loadbalancers", "0"),
    ("services.nodeports", "0"),
];

impl Settings {
    /// The level's own values, before any override.
    pub(crate) fn of_level(level: IsolationLevel) -> Settings {
        use IsolationLevel::{Baseline, Restricted, Strict};
        use PodSecurityLevel as Pss;
        let hardened = level != Baseline;
        let (quota, default, default_request, max): (&[_], &[_], &[_], &[_]) = match level {
            Baseline => (OBJECT_COUNTS_BASELINE, &[], &[], &[]),
            Restricted => (
                QUOTA_RESTRICTED,
                &[("cpu", "500m"), ("memory", "512Mi")],
                &[("cpu", "100m"), ("memory", "128Mi")],
                &[("cpu", "4"), ("memory", "8Gi")],
            ),
            Strict => (
                QUOTA_STRICT,
                &[("cpu", "250m"), ("memory", "256Mi")],
                &[("cpu", "50m"), ("memory", "64Mi")],
                &[("cpu", "2"), ("memory", "4Gi")],
            ),
        };
        Settings {
            enforce: Sourced::level(if hardened {
                Pss::Restricted
            } else {
                Pss::Baseline
            }),
            audit: Sourced::level(Pss::Restricted),
            warn: Sourced::level(Pss::Restricted),
            version: Sourced::level(PSS_VERSION.to_string()),
            deny_ingress: Sourced::level(true),
            deny_egress: Sourced::level(hardened),
            allow_dns: Sourced::level(true),
            allow_intra_tenant: Sourced::level(true),
            egress_cidrs: Sourced::level(Vec::new()),
            egress_namespaces: Sourced::level(Vec::new()),
            quota: quantities(quota),
            limit_default: quantities(default),
            limit_default_request: quantities(default_request),
            limit_max: quantities(max),
            runtime_class: Sourced::level((level == Strict).then(|| STRICT_RUNTIME_CLASS.into())),
            image_pull_always: Sourced::level(hardened),
            deny_node_ports: Sourced::level(hardened),
        }
    }

    /// The level's values with the profile's overrides applied, checked.
    pub(crate) fn of_profile(spec: &IsolationProfileSpec) -> Result<Settings, CompileError> {
        let mut s = Settings::of_level(spec.level);
        if let Some(p) = &spec.pod_security {
            set(&mut s.enforce, p.enforce, "spec.podSecurity.enforce");
            set(&mut s.audit, p.audit, "spec.podSecurity.audit");
            set(&mut s.warn, p.warn, "spec.podSecurity.warn");
            set(
                &mut s.version,
                p.version.clone(),
                "spec.podSecurity.version",
            );
        }
        if let Some(n) = &spec.network {
            set(
                &mut s.deny_ingress,
                n.default_deny_ingress,
                "spec.network.defaultDenyIngress",
            );
            set(
                &mut s.deny_egress,
                n.default_deny_egress,
                "spec.network.defaultDenyEgress",
            );
            set(&mut s.allow_dns, n.allow_dns, "spec.network.allowDns");
            set(
                &mut s.allow_intra_tenant,
                n.allow_intra_tenant,
                "spec.network.allowIntraTenant",
            );
            let non_empty = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
            set(
                &mut s.egress_cidrs,
                non_empty(&n.allowed_egress_cidrs),
                "spec.network.allowedEgressCidrs",
            );
            set(
                &mut s.egress_namespaces,
                non_empty(&n.allowed_egress_namespaces),
                "spec.network.allowedEgressNamespaces",
            );
        }
        if let Some(q) = &spec.resource_quota {
            set_entries(&mut s.quota, &q.hard, "spec.resourceQuota.hard");
        }
        if let Some(l) = &spec.limit_range {
            set_entries(&mut s.limit_default, &l.default, "spec.limitRange.default");
            set_entries(
                &mut s.limit_default_request,
                &l.default_request,
                "spec.limitRange.defaultRequest",
            );
            set_entries(&mut s.limit_max, &l.max, "spec.limitRange.max");
        }
        if let Some(r) = &spec.runtime_class {
            set(
                &mut s.runtime_class,
                r.required.clone().map(Some),
                "spec.runtimeClass.required",
            );
        }
        if let Some(i) = &spec.image_pull_policy {
            set(
                &mut s.image_pull_always,
                i.require_always,
                "spec.imagePullPolicy.requireAlways",
            );
        }
        if let Some(v) = &spec.services {
            set(
                &mut s.deny_node_ports,
                v.deny_node_ports,
                "spec.services.denyNodePorts",
            );
        }
        s.check()?;
        Ok(s)
    }

    fn check(&self) -> Result<(), CompileError> {
        if !(self.version.value == "latest" || is_minor_version(&self.version.value)) {
            return Err(CompileError::new(
                &self.version.field,
                format!(
                    "{:?} is not a Pod Security Standards version: use `latest` or `v1.<minor>`, e.g. {PSS_VERSION}",
                    self.version.value
                ),
            ));
        }
        for (i, cidr) in self.egress_cidrs.value.iter().enumerate() {
            check_cidr(cidr)
                .map_err(|p| CompileError::new(format!("{}[{i}]", self.egress_cidrs.field), p))?;
        }
        for (i, ns) in self.egress_namespaces.value.iter().enumerate() {
            if !is_dns_label(ns) {
                return Err(CompileError::new(
                    format!("{}[{i}]", self.egress_namespaces.field),
                    format!(
                        "{ns:?} is not a namespace name (a DNS-1123 label: lowercase letters, digits and '-', at most 63)"
                    ),
                ));
            }
        }
        for quantities in [
            &self.quota,
            &self.limit_default,
            &self.limit_default_request,
            &self.limit_max,
        ] {
            for (name, q) in quantities {
                if !is_resource_name(name) {
                    return Err(CompileError::new(
                        &q.field,
                        format!(
                            "{name:?} is not a resource name (e.g. requests.cpu, count/pods, services.nodeports)"
                        ),
                    ));
                }
                quantity::parse(&q.value).map_err(|p| CompileError::new(&q.field, p))?;
            }
        }
        if let Some(class) = &self.runtime_class.value
            && !is_dns_subdomain(class)
        {
            return Err(CompileError::new(
                &self.runtime_class.field,
                format!("{class:?} is not a RuntimeClass name (a DNS-1123 subdomain)"),
            ));
        }
        self.check_contradictions()
    }

    fn check_contradictions(&self) -> Result<(), CompileError> {
        if !self.deny_egress.value {
            for list in [&self.egress_cidrs, &self.egress_namespaces] {
                if !list.value.is_empty() {
                    return Err(CompileError::new(
                        &list.field,
                        format!(
                            "an egress allow-list takes effect only with default-deny egress, and {} leaves egress open: set spec.network.defaultDenyEgress: true or drop the list",
                            self.deny_egress.field
                        ),
                    ));
                }
            }
        }
        for (lower, lower_name, upper, upper_name) in [
            (
                &self.limit_default_request,
                "defaultRequest",
                &self.limit_default,
                "default",
            ),
            (&self.limit_default, "default", &self.limit_max, "max"),
            (
                &self.limit_default_request,
                "defaultRequest",
                &self.limit_max,
                "max",
            ),
        ] {
            for (resource, low) in lower {
                let Some(high) = upper.get(resource) else {
                    continue;
                };
                if parse_checked(low) > parse_checked(high) {
                    let (at, other) = if low.is_override() {
                        (low, high)
                    } else {
                        (high, low)
                    };
                    return Err(CompileError::new(
                        &at.field,
                        format!(
                            "the LimitRange {lower_name} {resource} {} exceeds its {upper_name} {} (from {}); Kubernetes would refuse the LimitRange",
                            low.value, high.value, other.field
                        ),
                    ));
                }
            }
        }
        if self.deny_node_ports.value
            && let Some(ports) = self.quota.get("services.nodeports")
            && !parse_checked(ports).is_zero()
        {
            let (at, other) = if ports.is_override() {
                (&ports.field, &self.deny_node_ports.field)
            } else {
                (&self.deny_node_ports.field, &ports.field)
            };
            return Err(CompileError::new(
                at,
                format!(
                    "the quota grants {} node ports that denyNodePorts (from {other}) refuses at admission: set services.nodeports to 0 or spec.services.denyNodePorts: false",
                    ports.value
                ),
            ));
        }
        Ok(())
    }
}

/// Parses a quantity `check` has already accepted.
fn parse_checked(q: &Sourced<String>) -> quantity::Milli {
    quantity::parse(&q.value).expect("quantities are checked before contradictions")
}

fn set<T>(slot: &mut Sourced<T>, value: Option<T>, field: &str) {
    if let Some(value) = value {
        *slot = Sourced {
            value,
            field: field.to_string(),
        };
    }
}

fn set_entries(slot: &mut Quantities, entries: &BTreeMap<String, Quantity>, field: &str) {
    for (name, q) in entries {
        slot.insert(
            name.clone(),
            Sourced {
                value: q.0.clone(),
                field: format!("{field}[{name}]"),
            },
        );
    }
}

fn check_cidr(text: &str) -> Result<(), String> {
    let net: ipnet::IpNet = text
        .parse()
        .map_err(|_| format!("{text:?} is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32"))?;
    if net.trunc() != net {
        return Err(format!(
            "{text:?} has host bits set: the network is {}",
            net.trunc()
        ));
    }
    Ok(())
}

fn is_minor_version(v: &str) -> bool {
    v.strip_prefix("v1.")
        .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
}

/// A DNS-1123 label: what namespace names and label values of tenant names are.
pub(crate) fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A resource name as quotas and limits spell it: `cpu`, `requests.memory`, `count/pods`,
/// `requests.nvidia.com/gpu`, `hugepages-2Mi`.
fn is_resource_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 253
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-._/".contains(c))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}
