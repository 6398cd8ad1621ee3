//! The `tenantplane.io/` keys that tie every host object back to the tenant object that caused it.
//!
//! Labels carry what must be selectable (and fits a label value: at most 63 characters);
//! annotations carry the full identity. tenantplane alone writes these keys: a tenant object's own
//! `tenantplane.io/` labels and annotations are stripped before placement, and the strip is
//! recorded in the decision (see the core crate's mapping).

/// Every key tenantplane writes starts with this prefix; tenant-supplied keys with it are stripped.
pub const PREFIX: &str = "tenantplane.io/";

/// Label: the Tenant that owns the host object.
pub const TENANT: &str = "tenantplane.io/tenant";
/// Label: namespace of the source object in the tenant control plane.
pub const SOURCE_NAMESPACE: &str = "tenantplane.io/source-namespace";
/// Label: uid of the source object in the tenant control plane.
pub const SOURCE_UID: &str = "tenantplane.io/source-uid";
/// Label: `true` on every host object tenantplane manages.
pub const MANAGED: &str = "tenantplane.io/managed";

/// Annotation: apiVersion of the source object (`v1`, `networking.k8s.io/v1`).
pub const SOURCE_API_VERSION: &str = "tenantplane.io/source-api-version";
/// Annotation: kind of the source object.
pub const SOURCE_KIND: &str = "tenantplane.io/source-kind";
/// Annotation: full name of the source object (names can exceed a label value's 63 characters).
pub const SOURCE_NAME: &str = "tenantplane.io/source-name";
/// Annotation: the mapping scheme version that computed the host name.
pub const MAPPING_VERSION: &str = "tenantplane.io/mapping-version";
/// Annotation: id of the decision that last wrote the host object.
pub const DECISION_ID: &str = "tenantplane.io/decision-id";

/// Annotation: name of the IsolationProfile an isolation object was compiled from.
pub const ISOLATION_PROFILE: &str = "tenantplane.io/isolation-profile";
/// Annotation: `metadata.generation` of that IsolationProfile.
pub const ISOLATION_PROFILE_GENERATION: &str = "tenantplane.io/isolation-profile-generation";
/// Annotation: the isolation level of that IsolationProfile.
pub const ISOLATION_LEVEL: &str = "tenantplane.io/isolation-level";
/// Annotation: the IsolationProfile field paths that produced the object, comma-separated
/// (`spec.level` when the level's default decided).
pub const ISOLATION_FIELD: &str = "tenantplane.io/isolation-field";

/// Annotation: name of the SyncPolicy a tenant-side admission object was compiled from.
pub const SYNC_POLICY: &str = "tenantplane.io/sync-policy";
/// Annotation: content revision of that SyncPolicy (`sha256:` and 12 hex digits).
pub const SYNC_POLICY_REVISION: &str = "tenantplane.io/sync-policy-revision";
/// Annotation: the SyncPolicy rule a tenant-side admission object enforces.
pub const SYNC_POLICY_RULE: &str = "tenantplane.io/sync-policy-rule";
/// Annotation: how the rule is enforced in the tenant control plane: its validationActions
/// (`Deny`, `Warn`, `Audit`).
pub const ADMISSION_ACTIONS: &str = "tenantplane.io/admission-actions";
/// Annotation: the Reject rules of the SyncPolicy enforced on the host side only, each with why
/// (`rule: why`, one per line).
pub const HOST_SIDE_ONLY: &str = "tenantplane.io/host-side-only";

/// Annotation on the host Secret holding a synced pod's service account tokens: what each of its
/// keys holds, as JSON (`[{"key", "serviceAccount", "audiences", "expirationSeconds", "expires",
/// "refreshAt"}]`); never a token.
pub const SERVICE_ACCOUNT_TOKENS: &str = "tenantplane.io/service-account-tokens";
/// Annotation on that Secret: when its first token is due for refresh (RFC 3339).
pub const REFRESH_AT: &str = "tenantplane.io/refresh-at";

/// True for a key tenantplane reserves for itself.
pub fn is_reserved(key: &str) -> bool {
    key.starts_with(PREFIX)
}
