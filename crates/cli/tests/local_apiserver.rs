//! The `tenantplane-local-apiserver` binary (the local API server of crates/local-apiserver as a
//! process of its own, which `tenantplane up` runs), and `tenantplane` not linking it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_writes_a_kubeconfig_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenantplane-local-apiserver"))
        .args(["--port", "0", "--context", "demo", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the binary");
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let config = Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig).unwrap(),
        &KubeConfigOptions {
            context: Some("demo".into()),
            ..KubeConfigOptions::default()
        },
    )
    .await
    .unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> =
        Api::all(Client::try_from(config).unwrap());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(names.contains(&"default".to_string()), "{names:?}");

    let terminated = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(terminated.success());
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "the server exits cleanly on SIGTERM: {status}"
    );
}

/// `tenantplane` does not link the local API server: only the `tenantplane-local-apiserver`
/// binary names its crate (cargo links a dependency of the package into a binary that uses it).
#[test]
fn only_the_local_apiserver_binary_uses_the_local_apiserver_crate() {
    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let users: Vec<String> = files
        .iter()
        .filter(|file| {
            std::fs::read_to_string(file)
                .unwrap()
                .contains("tenantplane_local_apiserver")
        })
        .map(|file| file.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    assert_eq!(users, ["bin/tenantplane-local-apiserver.rs"]);
}
