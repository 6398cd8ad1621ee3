//! Discovery of the kinds a Tenant's SyncPolicy syncs in the tenant control plane, one API
//! group version at a time and only in the groups the policy names (every group for a `*`
//! rule). Which discovered kinds are watched is `tenantplane_core::watch`'s rule, the one
//! explain-sync and `why --tenant` apply to the objects the syncer never sees.
//!
//! A group version that does not answer (an aggregated API whose service is down, as
//! metrics-server often is, or one that answers garbage) costs its own kinds and nothing else:
//! it is reported as an [`UnavailableGroup`], which the Tenant controller turns into a condition
//! message and a Deferred decision about the group's APIService
//! ([`crate::reconcile::deferred::api_group_unavailable`]), and looks at again sooner than the usual
//! resync. Only a control plane whose group list (`/api`, `/apis`) cannot be read is
//! unreachable.

use kube::Client;
use kube::core::{ApiResource, GroupVersion};
use kube::discovery::{self, ApiCapabilities};
use serde_json::json;
use tenantplane_core::CompiledPolicy;
use tenantplane_core::watch::{is_watchable, names_kind};

/// How long the discovery of one group version may take: an aggregated API whose service
/// accepts connections but never answers must not hold up the others.
const GROUP_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// The prefix of the ledger keys of discovery decisions.
pub const LEDGER_PREFIX: &str = "discovery:";

/// What discovery found of the kinds a policy syncs.
#[derive(Debug, Default)]
pub struct SyncedKinds {
    /// Namespaced kinds that can be listed and watched and that the policy syncs, sorted by
    /// (group, kind).
    pub kinds: Vec<(ApiResource, ApiCapabilities)>,
    /// Group versions the policy may sync from whose discovery failed.
    pub unavailable: Vec<UnavailableGroup>,
}

/// A group version whose discovery failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnavailableGroup {
    /// API group (`metrics.k8s.io`; empty for the core group).
    pub group: String,
    /// Version (`v1beta1`).
    pub version: String,
    /// What the control plane answered.
    pub error: String,
}

impl UnavailableGroup {
    /// `group/version` (`version` for the core group).
    pub fn group_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The APIService that serves the group version (`v1beta1.metrics.k8s.io`): every group
    /// version a Kubernetes API server serves has one, and that of an aggregated API says why
    /// it is unavailable.
    pub fn api_service(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}.{}", self.version, self.group)
        }
    }

    /// The key of its decisions in the Tenant's ledger.
    pub fn ledger_key(&self) -> String {
        format!("{LEDGER_PREFIX}APIService/{}", self.api_service())
    }

    /// `sha256:` of what was observed (the group version and the error).
    pub fn digest(&self) -> String {
        tenantplane_core::planner::input_digest(
            &json!({"groupVersion": self.group_version(), "error": self.error}),
        )
    }
}

/// Which API groups a set of wanted (group, kind) pairs needs: `None` for every group.
fn wanted_groups(wanted: &[(String, String)]) -> Option<Vec<&str>> {
    if wanted.iter().any(|(g, _)| g == "*") {
        return None;
    }
    let mut groups: Vec<&str> = wanted.iter().map(|(g, _)| g.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    Some(groups)
}

/// The versions of each API group the control plane serves, preferred version first: the core
/// group from `/api`, the others from `/apis`. Failing to read these two is failing to reach
/// the control plane.
pub async fn served_groups(client: &Client) -> Result<Vec<(String, Vec<String>)>, kube::Error> {
    let core = client.list_core_api_versions().await?;
    let mut groups = vec![(String::new(), core.versions)];
    for group in client.list_api_groups().await?.groups {
        let preferred = group.preferred_version.map(|p| p.version);
        let mut versions: Vec<String> = group.versions.into_iter().map(|v| v.version).collect();
        if let Some(p) = preferred
            && let Some(at) = versions.iter().position(|v| *v == p)
        {
            let v = versions.remove(at);
            versions.insert(0, v);
        }
        groups.push((group.name, versions));
    }
    Ok(groups)
}

/// Every resource of one group version, or why its discovery failed.
pub async fn group_version_resources(
    client: &Client,
    group: &str,
    version: &str,
) -> Result<Vec<(ApiResource, ApiCapabilities)>, UnavailableGroup> {
    let gv = GroupVersion::gv(group, version);
    let unavailable = |error: String| UnavailableGroup {
        group: group.to_string(),
        version: version.to_string(),
        error,
    };
    match tokio::time::timeout(GROUP_PATIENCE, discovery::pinned_group(client, &gv)).await {
        Ok(Ok(found)) => Ok(found.versioned_resources(version)),
        Ok(Err(e)) => Err(unavailable(e.to_string())),
        Err(_) => Err(unavailable(format!(
            "no answer within {} s",
            GROUP_PATIENCE.as_secs()
        ))),
    }
}

/// Discovers the kinds `policy` syncs in the tenant control plane of `client`. Each kind is
/// taken at the most preferred version of its group that serves it.
pub async fn synced_kinds(
    client: &Client,
    policy: &CompiledPolicy,
) -> Result<SyncedKinds, kube::Error> {
    let wanted = policy.synced_kinds();
    let groups = wanted_groups(&wanted);
    let mut found = SyncedKinds::default();
    for (group, versions) in served_groups(client).await? {
        if groups
            .as_ref()
            .is_some_and(|g| !g.contains(&group.as_str()))
        {
            continue;
        }
        for version in versions {
            let resources = match group_version_resources(client, &group, &version).await {
                Ok(resources) => resources,
                Err(unavailable) => {
                    found.unavailable.push(unavailable);
                    continue;
                }
            };
            for (ar, caps) in resources {
                if is_watchable(&ar, &caps)
                    && names_kind(&wanted, &ar.group, &ar.kind)
                    && !found
                        .kinds
                        .iter()
                        .any(|(a, _)| a.group == ar.group && a.kind == ar.kind)
                {
                    found.kinds.push((ar, caps));
                }
            }
        }
    }
    found
        .kinds
        .sort_by(|a, b| (&a.0.group, &a.0.kind).cmp(&(&b.0.group, &b.0.kind)));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(g, k)| (g.to_string(), k.to_string()))
            .collect()
    }

    #[test]
    fn only_the_groups_a_policy_names_are_discovered() {
        let named = wanted(&[("", "ConfigMap"), ("apps", "*"), ("", "Pod")]);
        assert_eq!(wanted_groups(&named), Some(vec!["", "apps"]));
        assert_eq!(wanted_groups(&wanted(&[("*", "Widget")])), None);
    }

    #[test]
    fn an_unavailable_group_is_known_by_its_api_service_and_its_answer() {
        let group = UnavailableGroup {
            group: "metrics.k8s.io".into(),
            version: "v1beta1".into(),
            error: "ServiceUnavailable (503)".into(),
        };
        assert_eq!(group.api_service(), "v1beta1.metrics.k8s.io");
        assert_eq!(group.group_version(), "metrics.k8s.io/v1beta1");
        assert_eq!(
            group.ledger_key(),
            "discovery:APIService/v1beta1.metrics.k8s.io"
        );
        let again = UnavailableGroup {
            error: "another answer".into(),
            ..group.clone()
        };
        assert_ne!(
            group.digest(),
            again.digest(),
            "a new answer is a new input"
        );
    }
}
