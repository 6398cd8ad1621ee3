//! The Rust client of the tenantplane services, for the syncer and the CLI.
//!
//! It speaks the public gRPC APIs but answers in the core's own types: [`PlannerClient::plan`]
//! returns the very [`Plan`] and [`Decision`] that `tenantplane_core::Planner` produces in
//! process, so `tenantplane explain-sync --planner ADDR` prints what the offline run prints.
//!
//! ```text
//!  ClientConfig (address, optional TLS / mTLS) ──connect──▶ Channel
//!    PlannerClient: plan(tenant, policy, objects, host) ─▶ Vec<PlannedObject { plan, decision }>
//!                   explain_host_object(json) ──────────▶ HostObjectSource
//!                   version() ──────────────────────────▶ Version
//!    IsolationClient: compile(tenant, profile, applied) ─▶ CompiledIsolation { compilation, prune }
//! ```

mod connect;
mod error;
mod isolation;
mod planner;

pub use connect::{ClientConfig, ClientTls, ClientTlsArgs, connect, connect_lazy};
pub use error::ClientError;
pub use isolation::{CompiledIsolation, IsolationClient};
pub use planner::{HostObjectSource, PlannedObject, PlannerClient, Version};

#[doc(no_inline)]
pub use tenantplane_core::{Decision, Plan};
