//! The IsolationCompiler service: the isolation compiler behind
//! `tenantplane.isolation.v1.IsolationCompiler`.

use tenantplane_isolation::CompileOptions;
use tenantplane_proto::isolation::v1::isolation_compiler_server::{self, IsolationCompilerServer};
use tenantplane_proto::isolation::v1::{CompileRequest, CompileResponse};
use tonic::{Request, Response, Status};

use crate::convert::{from_proto, to_proto};
use crate::error::{FieldError, RequestError};

/// The IsolationCompiler service, with the installation's compile options.
#[derive(Clone, Debug, Default)]
pub struct IsolationService {
    options: CompileOptions,
}

impl IsolationService {
    /// A compiler service using `options` (e.g. the user the syncer acts as).
    pub fn new(options: CompileOptions) -> Self {
        IsolationService { options }
    }

    /// The tonic server of this service, ready to add to a router.
    pub fn into_server(self) -> IsolationCompilerServer<Self> {
        IsolationCompilerServer::new(self)
    }

    fn compile(&self, request: &CompileRequest) -> Result<CompileResponse, RequestError> {
        let tenant = from_proto::tenant(request.tenant.as_ref())?;
        if request.profile.is_empty() {
            return Err(FieldError::new("profile", "is required").into());
        }
        let profile = from_proto::isolation_profile("profile", &request.profile)?;
        let previously_applied = request
            .previously_applied
            .iter()
            .enumerate()
            .map(|(i, r)| from_proto::object_ref(&format!("previously_applied[{i}]"), r))
            .collect::<Result<Vec<_>, _>>()?;
        let compilation = tenantplane_isolation::compile_with(&tenant, &profile, &self.options)
            .map_err(RequestError::isolation("profile"))?;
        Ok(CompileResponse {
            objects: compilation
                .objects
                .iter()
                .map(to_proto::compiled_object)
                .collect(),
            prune: compilation
                .prune(&previously_applied)
                .iter()
                .map(to_proto::object_ref)
                .collect(),
        })
    }
}

#[tonic::async_trait]
impl isolation_compiler_server::IsolationCompiler for IsolationService {
    async fn compile(
        &self,
        request: Request<CompileRequest>,
    ) -> Result<Response<CompileResponse>, Status> {
        Ok(Response::new(IsolationService::compile(
            self,
            request.get_ref(),
        )?))
    }
}
