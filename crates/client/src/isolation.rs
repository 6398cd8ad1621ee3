//! The IsolationCompiler client.

use tenantplane_api::{IsolationProfile, Tenant};
use tenantplane_grpc::convert::{from_proto, to_proto};
use tenantplane_isolation::{Compilation, ObjectRef};
use tenantplane_proto::isolation::v1::CompileRequest;
use tenantplane_proto::isolation::v1::isolation_compiler_client;
use tonic::transport::Channel;

use crate::connect::{TracedChannel, traced};
use crate::{ClientConfig, ClientError, connect};

/// A client of the IsolationCompiler service.
#[derive(Clone, Debug)]
pub struct IsolationClient {
    inner: isolation_compiler_client::IsolationCompilerClient<TracedChannel>,
}

/// A compilation and what it prunes, as the compiler service computed them.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledIsolation {
    /// The host objects and their provenance: equal to the in-process compilation.
    pub compilation: Compilation,
    /// Previously applied objects the compilation no longer produces.
    pub prune: Vec<ObjectRef>,
}

impl IsolationClient {
    /// Connects to an isolation-compiler service.
    pub async fn connect(config: &ClientConfig) -> Result<Self, ClientError> {
        Ok(Self::new(connect(config).await?))
    }

    /// A client over an existing channel.
    pub fn new(channel: Channel) -> Self {
        IsolationClient {
            inner: isolation_compiler_client::IsolationCompilerClient::new(traced(channel))
                .max_decoding_message_size(crate::connect::max_response_bytes()),
        }
    }

    /// Compiles `profile` for `tenant`; `previously_applied` are the objects an earlier
    /// compilation applied: the remote twin of `tenantplane_isolation::compile` plus `prune`.
    pub async fn compile(
        &mut self,
        tenant: &Tenant,
        profile: &IsolationProfile,
        previously_applied: &[ObjectRef],
    ) -> Result<CompiledIsolation, ClientError> {
        let request = CompileRequest {
            tenant: Some(to_proto::tenant(tenant)),
            profile: serde_json::to_vec(profile).expect("an IsolationProfile serializes"),
            previously_applied: previously_applied
                .iter()
                .map(to_proto::object_ref)
                .collect(),
        };
        let response = self.inner.compile(request).await?.into_inner();
        let objects = response
            .objects
            .iter()
            .enumerate()
            .map(|(i, o)| from_proto::compiled_object(&format!("objects[{i}]"), o))
            .collect::<Result<_, _>>()?;
        let prune = response
            .prune
            .iter()
            .enumerate()
            .map(|(i, r)| from_proto::object_ref(&format!("prune[{i}]"), r))
            .collect::<Result<_, _>>()?;
        Ok(CompiledIsolation {
            compilation: Compilation { objects },
            prune,
        })
    }
}
