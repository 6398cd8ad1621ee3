//! What can go wrong talking to a service.

use tenantplane_grpc::FieldError;
use tonic_types::StatusExt;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The client configuration is unusable (address, TLS files).
    #[error("{0}")]
    Config(String),
    /// The service could not be reached.
    #[error("cannot connect to {address}: {source}")]
    Connect {
        /// The address tried.
        address: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// The service answered with an error status; for INVALID_ARGUMENT see
    /// [`ClientError::field_violations`].
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// The response does not make sense (a service of another version?).
    #[error("malformed response: {0}")]
    Malformed(#[from] FieldError),
}

impl ClientError {
    /// The request fields the service refused, with why (google.rpc.BadRequest details of an
    /// INVALID_ARGUMENT status); empty for other errors.
    pub fn field_violations(&self) -> Vec<FieldError> {
        match self {
            ClientError::Status(status) => status
                .get_details_bad_request()
                .map(|bad| {
                    bad.field_violations
                        .into_iter()
                        .map(|v| FieldError::new(v.field, v.description))
                        .collect()
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}
