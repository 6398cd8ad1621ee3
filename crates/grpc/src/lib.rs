//! The tenantplane gRPC services over the pure core, and the conversions between core and wire.
//!
//! ```text
//!  PlanRequest ──convert::from_proto──▶ Tenant, TenantObjects, HostState ──▶ core Planner
//!  PlanResponse ◀──convert::to_proto── Plan + Decision per object ◀──────────────┘
//!  CompileRequest ──▶ Tenant, IsolationProfile ──▶ tenantplane_isolation::compile ──▶ CompileResponse
//!  any core error ──▶ error::RequestError ──▶ tonic::Status (INVALID_ARGUMENT + google.rpc.BadRequest)
//! ```
//!
//! The servers hold no cluster client and do no I/O besides answering: [`PlannerService`] and
//! [`IsolationService`] are handed to the service runtime (`tenantplane-service`) by the binaries.
//! [`error`] is the one place where core errors become gRPC status codes. The client crate
//! reuses [`convert::from_proto`] to hand callers the same core types the offline path produces.

pub mod convert;
pub mod error;
mod isolation;
mod planner;

pub use error::{FieldError, RequestError};
pub use isolation::IsolationService;
pub use planner::{COMPONENT, PLAN_OBJECT_SPAN, PlannerService};
