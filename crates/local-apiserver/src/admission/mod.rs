//! Layer 4, admission: what kube-apiserver does with a write between decoding it and storing it,
//! in its order ([`chain`], the store's [`WritePolicy`](crate::storage::store::WritePolicy)):
//! validation (names, Events, Pod updates, a CRD's schema), defaults, the ServiceAccount
//! admission plugin, Pod Security and ValidatingAdmissionPolicies; and the service account
//! tokens that plugin mounts and TokenRequest issues. Uses storage, CEL and CRD validation.

pub mod chain;
pub mod defaults;
pub mod pod_security;
pub mod pods;
pub mod request;
pub mod service_accounts;
pub mod tokens;
pub mod validating_policy;
