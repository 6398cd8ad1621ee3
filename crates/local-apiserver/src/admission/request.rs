//! One create or update as the admission plugins (Pod Security, ValidatingAdmissionPolicies)
//! see it.

use serde_json::Value;

use crate::storage::resources::ResourceType;

/// One create or update, as admission sees it.
pub struct Request<'a> {
    /// The resource written to.
    pub rt: &'a ResourceType,
    /// `CREATE` or `UPDATE`.
    pub operation: &'static str,
    /// The object's namespace (empty for cluster-scoped kinds).
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The object after defaulting.
    pub object: &'a Value,
    /// The stored object, for an update.
    pub old: Option<&'a Value>,
    /// The Namespace object of `namespace`.
    pub namespace_object: Option<&'a Value>,
    /// Whether the request is a dry run.
    pub dry_run: bool,
}
