//! The IsolationCompiler service on a loopback socket, called with the generated tonic client.

mod support;

use support::{example, serve};
use tenantplane_proto::isolation::v1::isolation_compiler_client::IsolationCompilerClient;
use tenantplane_proto::isolation::v1::{CompileRequest, IsolationLevel};
use tenantplane_proto::types::v1::{ObjectRef, TenantRef};
use tonic::Code;
use tonic_types::StatusExt;

fn request(profile: &str) -> CompileRequest {
    CompileRequest {
        tenant: Some(TenantRef {
            name: "acme".into(),
            host_namespace: "tenant-acme".into(),
            ..TenantRef::default()
        }),
        profile: profile.as_bytes().to_vec(),
        previously_applied: Vec::new(),
    }
}

fn violation_field(status: &tonic::Status) -> String {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let bad = status
        .get_details_bad_request()
        .expect("a BadRequest detail");
    bad.field_violations[0].field.clone()
}

#[tokio::test]
async fn compiles_a_profile_into_objects_with_provenance_and_prunes() {
    let mut client = IsolationCompilerClient::new(serve().await);
    let stale = ObjectRef {
        api_version: "networking.k8s.io/v1".into(),
        kind: "NetworkPolicy".into(),
        namespace: "tenant-acme".into(),
        name: "tenantplane-gone".into(),
    };
    let mut req = request(&example("isolationprofile.yaml"));
    req.previously_applied = vec![stale.clone()];
    let resp = client.compile(req).await.unwrap().into_inner();

    assert!(!resp.objects.is_empty());
    let local = tenantplane_isolation::compile(
        &tenantplane_grpc::convert::from_proto::tenant(Some(&TenantRef {
            name: "acme".into(),
            host_namespace: "tenant-acme".into(),
            ..TenantRef::default()
        }))
        .unwrap(),
        &serde_norway::from_str(&example("isolationprofile.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(resp.objects.len(), local.objects.len());
    for (remote, local) in resp.objects.iter().zip(&local.objects) {
        let object: serde_json::Value = serde_json::from_slice(&remote.object).unwrap();
        assert_eq!(object, local.object);
        let r = remote.r#ref.as_ref().unwrap();
        assert_eq!(r.kind, object["kind"]);
        let p = remote.provenance.as_ref().unwrap();
        assert_eq!(p.profile, "acme-isolation");
        assert_eq!(p.level(), IsolationLevel::Restricted);
        assert_eq!(p.field_paths, local.provenance.field_paths);
        assert!(!p.explanation.is_empty());
    }
    assert_eq!(resp.prune, vec![stale]);
}

#[tokio::test]
async fn bad_profiles_and_tenants_name_their_field() {
    let mut client = IsolationCompilerClient::new(serve().await);
    let status = client
        .compile(request(
            "apiVersion: tenantplane.io/v1alpha1\nkind: IsolationProfile\nmetadata: {name: p}\nspec: {level: extreme}\n",
        ))
        .await
        .unwrap_err();
    assert_eq!(violation_field(&status), "profile.spec.level");

    let status = client.compile(request("")).await.unwrap_err();
    assert_eq!(violation_field(&status), "profile");

    let status = client
        .compile(request("spec: [unclosed"))
        .await
        .unwrap_err();
    assert_eq!(violation_field(&status), "profile");

    let mut req = request(&example("isolationprofile.yaml"));
    req.tenant = None;
    assert_eq!(
        violation_field(&client.compile(req).await.unwrap_err()),
        "tenant"
    );

    let mut req = request(&example("isolationprofile.yaml"));
    req.previously_applied = vec![ObjectRef::default()];
    assert_eq!(
        violation_field(&client.compile(req).await.unwrap_err()),
        "previously_applied[0].api_version"
    );
}
