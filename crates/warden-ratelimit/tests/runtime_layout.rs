//! The reference's runtime directory layout (`RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`,
//! `RUNTIME_APPDIRECTORY`, `RUNTIME_WATCH_ROOT`), served from the environment as the reference
//! reads it.

use std::collections::HashMap;
use std::time::Duration;
use warden_ratelimit::{Server, Settings};
use warden_testkit::TempDir;

fn domain(name: &str) -> String {
    format!(
        "domain: {name}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: 1}}\n"
    )
}

/// `ROOT/srv/`: `config/a.yaml` and `config/nested/n.yaml` (app dir "config"), `other/b.yaml`
/// (app dir "other"), and `config.yaml` next to them: its key, `config.yaml`, starts with
/// `config.` although it is outside the app directory.
fn layout() -> TempDir {
    let root = TempDir::new("runtime").unwrap();
    root.write("srv/config/a.yaml", &domain("a")).unwrap();
    root.write("srv/config/nested/n.yaml", &domain("nest"))
        .unwrap();
    root.write("srv/other/b.yaml", &domain("b")).unwrap();
    root.write("srv/config.yaml", &domain("top")).unwrap();
    root
}

fn env(root: &TempDir, extra: &[(&str, &str)]) -> Settings {
    let mut vars: HashMap<String, String> = [
        ("RUNTIME_ROOT", root.path().display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "srv".into()),
        ("HOST", "127.0.0.1".into()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("DEBUG_HOST", "127.0.0.1".into()),
        ("PORT", "0".into()),
        ("GRPC_PORT", "0".into()),
        ("DEBUG_PORT", "0".into()),
        ("RUNTIME_POLL_INTERVAL", "50ms".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in extra {
        vars.insert(k.to_string(), v.to_string());
    }
    Settings::from_env_map(&vars).unwrap()
}

/// The domains `/rlconfig` lists.
async fn domains(server: &warden_ratelimit::RunningServer) -> Vec<String> {
    let text = reqwest::get(format!("http://{}/rlconfig", server.debug_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut out: Vec<String> = text
        .lines()
        .filter_map(|l| l.split('.').next().map(str::to_owned))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn watch_root_true_loads_the_app_keys_of_the_whole_subdirectory() {
    let root = layout();
    let server = Server::start(env(&root, &[])).await.unwrap();
    assert_eq!(server.initial_config_error(), None);
    // `config.yaml` at the top is `config.`-prefixed too: the reference loads it.
    assert_eq!(domains(&server).await, ["a", "nest", "top"]);
    server.shutdown().await;
}

#[tokio::test]
async fn watch_root_false_loads_only_the_app_directory() {
    let root = layout();
    let server = Server::start(env(&root, &[("RUNTIME_WATCH_ROOT", "false")]))
        .await
        .unwrap();
    assert_eq!(server.initial_config_error(), None);
    assert_eq!(domains(&server).await, ["a", "nest"]);
    // Files elsewhere under the subdirectory are not watched either.
    root.write("srv/other/c.yaml", &domain("c")).unwrap();
    root.write("srv/config/d.yaml", &domain("d")).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while domains(&server).await != ["a", "d", "nest"] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reload of config/d.yaml"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    server.shutdown().await;
}

#[tokio::test]
async fn the_app_directory_is_configurable_and_names_files_in_messages() {
    let root = layout();
    root.write(
        "srv/other/bad.yaml",
        "domain: bad\ndescriptors:\n  - key: \"\"\n",
    )
    .unwrap();
    let server = Server::start(env(
        &root,
        &[
            ("RUNTIME_WATCH_ROOT", "false"),
            ("RUNTIME_APPDIRECTORY", "other"),
        ],
    ))
    .await
    .unwrap();
    // Keys are relative to the app directory: `bad.yaml`, not `other.bad.yaml`.
    assert_eq!(
        server.initial_config_error(),
        Some("bad.yaml: descriptor has empty key")
    );
    server.shutdown().await;

    let server = Server::start(env(&root, &[("RUNTIME_APPDIRECTORY", "other")]))
        .await
        .unwrap();
    assert_eq!(
        server.initial_config_error(),
        Some("other.bad.yaml: descriptor has empty key")
    );
    server.shutdown().await;
}
