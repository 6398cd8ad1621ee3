//! The pure core of tenantplane: everything that decides, nothing that talks.
//!
//! ```text
//!  tenant object ──▶ policy::CompiledPolicy::evaluate ──▶ Verdict (Sync | Skip | Reject, rule, reason)
//!        │                                                   │
//!        └──────▶ mapping::place ──▶ Placement ──▶ collision::check(existing host object)
//!                                                            │
//!                        planner::Planner::plan ◀────────────┘──▶ Plan ──▶ decision::Decision
//!                                 │
//!        translate::to_host ──▶ host object ──▶ boundary::Boundary::admit (Pod Security,
//!                                               the IsolationProfile's admission policies)
//! ```
//!
//! No Kubernetes client, no gRPC, no async I/O: `tenantplane explain-sync`, the planner service
//! and the syncer all call these functions, so an offline prediction is the same computation the
//! syncer performs against live clusters.

pub mod boundary;
pub mod collision;
pub mod decision;
pub mod documents;
pub mod drift;
pub mod mapping;
pub mod object;
pub mod parallel;
pub mod planner;
pub mod pod_security;
pub mod pod_world;
pub mod policy;
pub mod reference;
pub mod scope;
pub mod translate;
pub mod watch;

pub use collision::Collision;
pub use decision::{Decision, Outcome};
pub use mapping::{MappingVersion, Placement};
pub use object::{ObjectError, SourceIdentity, TenantObject};
pub use planner::{Plan, Planner};
pub use policy::{AtApply, CompiledPolicy, PolicyError, RuleAdmission, TenantAdmission, Verdict};

/// Version of this core, recorded in decisions as the acting component's version.
pub const ENGINE_VERSION: &str = env!("CARGO_PKG_VERSION");
