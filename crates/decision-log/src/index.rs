//! The index columns stored beside each record: derived from the decision at append time, and
//! checked against the hashed record by verification, since queries select rows by them.

use serde::{Deserialize, Serialize};
use tenantplane_core::decision::Decision;

/// The columns of a `decisions` row that queries filter on, other than `seq`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexColumns {
    /// Decision id.
    pub id: String,
    /// Decision time, microseconds since the Unix epoch.
    pub time_us: i64,
    /// Tenant.
    pub tenant: String,
    /// Subject kind.
    pub subject_kind: String,
    /// Subject namespace.
    pub subject_namespace: String,
    /// Subject name.
    pub subject_name: String,
    /// Host object kind (empty without a target).
    pub host_kind: String,
    /// Host object namespace (empty without a target).
    pub host_namespace: String,
    /// Host object name (empty without a target).
    pub host_name: String,
    /// Outcome.
    pub outcome: String,
    /// SyncPolicy rule (empty when the policy default decided or no policy did).
    pub rule: String,
}

impl IndexColumns {
    /// What the columns hold for `decision`.
    pub fn of(decision: &Decision) -> IndexColumns {
        let (host_kind, host_namespace, host_name) = decision
            .target
            .as_ref()
            .map_or(("", "", ""), |t| (&*t.kind, &*t.namespace, &*t.name));
        let rule = decision
            .policy
            .as_ref()
            .and_then(|p| p.rule.as_deref())
            .unwrap_or("");
        IndexColumns {
            id: decision.id.clone(),
            time_us: decision.time.as_microsecond(),
            tenant: decision.tenant.clone(),
            subject_kind: decision.subject.kind.clone(),
            subject_namespace: decision.subject.namespace.clone(),
            subject_name: decision.subject.name.clone(),
            host_kind: host_kind.to_string(),
            host_namespace: host_namespace.to_string(),
            host_name: host_name.to_string(),
            outcome: decision.outcome.as_str().to_string(),
            rule: rule.to_string(),
        }
    }

    /// The columns as (SQL column name, value as text), in table order.
    pub fn columns(&self) -> [(&'static str, String); 11] {
        [
            ("id", self.id.clone()),
            ("time_us", self.time_us.to_string()),
            ("tenant", self.tenant.clone()),
            ("subject_kind", self.subject_kind.clone()),
            ("subject_namespace", self.subject_namespace.clone()),
            ("subject_name", self.subject_name.clone()),
            ("host_kind", self.host_kind.clone()),
            ("host_namespace", self.host_namespace.clone()),
            ("host_name", self.host_name.clone()),
            ("outcome", self.outcome.clone()),
            ("rule", self.rule.clone()),
        ]
    }

    /// The first column whose stored value differs from what `recorded` says:
    /// (column, stored, recorded).
    pub fn first_difference(
        &self,
        recorded: &IndexColumns,
    ) -> Option<(&'static str, String, String)> {
        if self == recorded {
            return None;
        }
        self.columns()
            .into_iter()
            .zip(recorded.columns())
            .find(|((_, stored), (_, want))| stored != want)
            .map(|((column, stored), (_, want))| (column, stored, want))
    }
}
