//! The one place where what is wrong with a request becomes a gRPC status.
//!
//! Every error the core can report about its input (an unusable tenant object, a SyncPolicy that
//! does not compile, an IsolationProfile with a bad field) is the caller's mistake, so each maps
//! to `INVALID_ARGUMENT` with a `google.rpc.BadRequest` detail whose field violation names the
//! request field by its proto path, down into the JSON/YAML it carries
//! (`objects[3].metadata.name`, `sync_policy.spec.rules[0].match.conditions[1].expression`,
//! `profile.spec.level`). Nothing the caller sends can produce `INTERNAL`.

use tenantplane_core::{ObjectError, PolicyError};
use tenantplane_isolation::CompileError;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// A request field that cannot be used, by its proto path, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    /// Proto path of the field (`tenant.name`, `objects[2]`).
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

impl FieldError {
    /// A problem with `field`.
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// Why a request cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// A field of the request message itself is missing or malformed.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// A Kubernetes object carried in the request (`objects[i]`, `host_objects[i]`,
    /// `host_object`) lacks its identity or has a malformed one.
    #[error("{at}: {error}")]
    Object {
        /// Proto path of the bytes field holding the object.
        at: String,
        /// What the core found wrong with it.
        error: ObjectError,
    },
    /// The SyncPolicy in `sync_policy` is not usable.
    #[error("sync_policy: {0}")]
    Policy(#[from] PolicyError),
    /// The IsolationProfile in the request field `at` (`profile`, `isolation_profile`), or the
    /// tenant, is not compilable.
    #[error("{error}")]
    Isolation {
        /// Proto path of the bytes field holding the profile.
        at: &'static str,
        /// What the compiler found wrong.
        error: CompileError,
    },
}

impl RequestError {
    /// Proto path of the offending field, continued into the object it carries.
    pub fn field(&self) -> String {
        match self {
            RequestError::Field(e) => e.field.clone(),
            RequestError::Object { at, error } => join(at, error.field()),
            // `from_yaml` reports YAML syntax errors at `line N`, which is no field path: those
            // name the whole policy, and the description carries the line.
            RequestError::Policy(e) if e.field().contains(' ') => "sync_policy".to_string(),
            RequestError::Policy(e) => join("sync_policy", e.field()),
            // The compiler names tenant fields by the Tenant resource's paths; the request
            // carries the tenant as a TenantRef.
            RequestError::Isolation { at, error } => match error.field.as_str() {
                "tenant.metadata.name" => "tenant.name".to_string(),
                "tenant.spec.hostNamespace" => "tenant.host_namespace".to_string(),
                field => join(at, field),
            },
        }
    }

    /// What is wrong, without the field path.
    pub fn description(&self) -> String {
        match self {
            RequestError::Field(e) => e.problem.clone(),
            RequestError::Object { error, .. } => error.to_string(),
            RequestError::Policy(e) => e.to_string(),
            RequestError::Isolation { error, .. } => error.problem.clone(),
        }
    }
}

impl RequestError {
    /// A profile at the request field `at` that does not compile.
    pub fn isolation(at: &'static str) -> impl Fn(CompileError) -> RequestError {
        move |error| RequestError::Isolation { at, error }
    }
}

fn join(prefix: &str, field: &str) -> String {
    if field.is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}.{field}")
    }
}

impl From<RequestError> for Status {
    /// Every variant is bad input from the caller: INVALID_ARGUMENT, with the field in a
    /// google.rpc.BadRequest so that tooling can point at it without parsing the message.
    fn from(error: RequestError) -> Status {
        let field = error.field();
        let description = error.description();
        Status::with_error_details(
            Code::InvalidArgument,
            format!("{field}: {description}"),
            ErrorDetails::with_bad_request_violation(field, description),
        )
    }
}
