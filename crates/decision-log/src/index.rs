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

/// The index columns of a decision, borrowed from it: what an append binds to the row and
/// what Watch filters on, without copying the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexRef<'a> {
    pub id: &'a str,
    pub time_us: i64,
    pub tenant: &'a str,
    pub subject_kind: &'a str,
    pub subject_namespace: &'a str,
    pub subject_name: &'a str,
    pub host_kind: &'a str,
    pub host_namespace: &'a str,
    pub host_name: &'a str,
    pub outcome: &'static str,
    pub rule: &'a str,
}

impl<'a> IndexRef<'a> {
    /// What the columns hold for `decision`.
    pub(crate) fn of(decision: &'a Decision) -> IndexRef<'a> {
        let (host_kind, host_namespace, host_name) = decision
            .target
            .as_ref()
            .map_or(("", "", ""), |t| (&*t.kind, &*t.namespace, &*t.name));
        IndexRef {
            id: &decision.id,
            time_us: decision.time.as_microsecond(),
            tenant: &decision.tenant,
            subject_kind: &decision.subject.kind,
            subject_namespace: &decision.subject.namespace,
            subject_name: &decision.subject.name,
            host_kind,
            host_namespace,
            host_name,
            outcome: decision.outcome.as_str(),
            rule: decision
                .policy
                .as_ref()
                .and_then(|p| p.rule.as_deref())
                .unwrap_or(""),
        }
    }
}

impl IndexColumns {
    /// What the columns hold for `decision`.
    pub fn of(decision: &Decision) -> IndexColumns {
        let c = IndexRef::of(decision);
        IndexColumns {
            id: c.id.to_string(),
            time_us: c.time_us,
            tenant: c.tenant.to_string(),
            subject_kind: c.subject_kind.to_string(),
            subject_namespace: c.subject_namespace.to_string(),
            subject_name: c.subject_name.to_string(),
            host_kind: c.host_kind.to_string(),
            host_namespace: c.host_namespace.to_string(),
            host_name: c.host_name.to_string(),
            outcome: c.outcome.to_string(),
            rule: c.rule.to_string(),
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
