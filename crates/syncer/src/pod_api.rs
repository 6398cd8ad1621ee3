//! What a Tenant's pods get of its control plane, read from the kubeconfig the syncer reaches it
//! with: the server they default to and the CA that verifies it ([`PodContext`]). The rules of
//! the endpoint (its validation, a loopback address, plain HTTP) are the core's
//! ([`TenantWorld`]).

use anyhow::Context as _;
use data_encoding::BASE64;
use tenantplane_api::Tenant;
use tenantplane_core::pod_world::{Kubeconfig, TenantWorld};

use crate::tenant::PodContext;

/// The pods' context of `tenant`, whose kubeconfig (YAML) is `kubeconfig`.
pub fn pod_context(tenant: &Tenant, kubeconfig: &str) -> anyhow::Result<PodContext> {
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig).context("parsing the kubeconfig")?;
    let context_name = tenant
        .spec
        .control_plane
        .context
        .clone()
        .or_else(|| kc.current_context.clone())
        .context("the kubeconfig names no context")?;
    let context = kc
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .with_context(|| format!("the kubeconfig has no context {context_name}"))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .with_context(|| format!("the kubeconfig has no cluster {}", context.cluster))?;
    let server = cluster
        .server
        .as_deref()
        .with_context(|| format!("the kubeconfig's cluster {} has no server", context.cluster))?;
    let ca_bundle = match &cluster.certificate_authority_data {
        Some(data) => {
            let pem = BASE64
                .decode(data.trim().as_bytes())
                .context("the kubeconfig's certificate-authority-data is not base64")?;
            String::from_utf8(pem)
                .context("the kubeconfig's certificate-authority-data is not PEM")?
        }
        None => String::new(),
    };
    let world = TenantWorld::of(
        tenant,
        Some(Kubeconfig {
            server,
            has_ca: !ca_bundle.is_empty(),
        }),
    );
    Ok(PodContext { world, ca_bundle })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantplane_core::pod_world::ApiAccess;

    fn kubeconfig(server: &str, ca: Option<&str>) -> String {
        let ca = ca.map_or(String::new(), |ca| {
            format!(
                "    certificate-authority-data: {}\n",
                BASE64.encode(ca.as_bytes())
            )
        });
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n    \
             server: {server}\n{ca}contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n\
             users:\n- name: u\n  user: {{}}\n"
        )
    }

    #[test]
    fn the_pods_default_to_the_kubeconfigs_server_and_its_ca() {
        let tenant = Tenant::new("acme", Default::default());
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let ctx = pod_context(&tenant, &kubeconfig("https://10.0.0.5:6443", Some(pem))).unwrap();
        assert_eq!(ctx.ca_bundle, pem);
        assert_eq!(ctx.world.api.condition().1, "EndpointUsable");
        let ApiAccess::Granted { endpoint, .. } = &ctx.world.api else {
            panic!("{:?}", ctx.world.api)
        };
        assert_eq!(endpoint.as_ref().unwrap().to_string(), "10.0.0.5:6443");

        let ctx = pod_context(&tenant, &kubeconfig("http://127.0.0.1:7432", None)).unwrap();
        let (granted, reason, message) = ctx.world.api.condition();
        assert!(!granted);
        assert_eq!(reason, "LoopbackEndpoint");
        assert!(message.contains("plain HTTP"), "{message}");
        assert!(message.contains("certificate-authority-data"), "{message}");
    }

    #[test]
    fn a_kubeconfig_without_the_context_is_an_error_naming_it() {
        let mut tenant = Tenant::new("acme", Default::default());
        tenant.spec.control_plane.context = Some("other".into());
        let e = pod_context(&tenant, &kubeconfig("https://h:443", None)).unwrap_err();
        assert!(e.to_string().contains("no context other"), "{e}");
    }
}
