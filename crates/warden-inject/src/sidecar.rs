//! What injection adds to a pod: the `warden-init` init container (`warden capture`), the
//! `warden-proxy` container, their volumes and the status annotation.

use crate::emit::{map, s, seq, Y};

pub const INIT_CONTAINER: &str = "warden-init";
pub const PROXY_CONTAINER: &str = "warden-proxy";
/// Istio's injection record; a pod template that has it is not injected again.
pub const STATUS_ANNOTATION: &str = "sidecar.istio.io/status";
pub const INJECT_ANNOTATION: &str = "sidecar.istio.io/inject";
pub const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";
pub const CONFIG_VOLUME: &str = "warden-config";
pub const PODINFO_VOLUME: &str = "istio-podinfo";
pub const CREDENTIALS_VOLUME: &str = "warden-mesh-credentials";
/// The sidecar's variable holding the app probes (as `warden proxy --app-probers`).
pub const APP_PROBERS_ENV: &str = "ISTIO_KUBE_APP_PROBERS";

/// Istio's health port: the sidecar's own readiness (`/healthz/ready`), always served.
pub const HEALTH_PORT: u16 = 15021;

/// What one pod's sidecar gets from that pod (its annotations and app containers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSidecar {
    /// The agent's status port (`status.sidecar.istio.io/port`); `None`: off.
    pub status_port: Option<u16>,
    /// `ISTIO_KUBE_APP_PROBERS`: the app probes the sidecar runs.
    pub app_probers: serde_json::Map<String, serde_json::Value>,
    /// Image, resources, readiness timing and worker count from the pod's annotations.
    pub annotations: crate::pod_annotations::FromAnnotations,
}

/// How the sidecar is set up; `warden inject`'s flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarSettings {
    /// The image holding warden (deploy/build-image.sh).
    pub image: String,
    /// The ConfigMap with the mesh's Istio YAML and registry, mounted as the proxy's config.
    pub config_map: String,
    /// The Secret with the workload's mesh certificate (tls.crt, tls.key, ca.crt); `{sa}`
    /// stands for the pod's service account. `None`: no mesh TLS.
    pub credentials_secret: Option<String>,
    pub proxy_uid: u32,
}

impl Default for SidecarSettings {
    fn default() -> Self {
        SidecarSettings {
            image: format!("localhost/warden:{}", env!("CARGO_PKG_VERSION")),
            config_map: "warden-mesh-config".into(),
            credentials_secret: Some("warden-mesh-{sa}".into()),
            proxy_uid: 1337,
        }
    }
}

fn field_env(name: &str, path: &str) -> Y {
    map(vec![
        ("name", s(name)),
        (
            "valueFrom",
            map(vec![("fieldRef", map(vec![("fieldPath", s(path))]))]),
        ),
    ])
}

fn mount(name: &str, path: &str) -> Y {
    map(vec![
        ("name", s(name)),
        ("mountPath", s(path)),
        ("readOnly", Y::Bool(true)),
    ])
}

fn resources(cpu: &str, memory: &str) -> Y {
    map(vec![
        (
            "requests",
            map(vec![("cpu", s(cpu)), ("memory", s(memory))]),
        ),
        ("limits", map(vec![("cpu", s("2")), ("memory", s("1Gi"))])),
    ])
}

impl SidecarSettings {
    /// The init container: `warden capture` as root with NET_ADMIN and NET_RAW, as istio-init.
    pub fn init_container(&self, capture_args: &[String]) -> Y {
        map(vec![
            ("name", s(INIT_CONTAINER)),
            ("image", s(&self.image)),
            ("imagePullPolicy", s("IfNotPresent")),
            ("args", seq(capture_args.iter().map(s).collect())),
            ("resources", resources("10m", "40Mi")),
            (
                "securityContext",
                map(vec![
                    ("runAsUser", Y::Int(0)),
                    ("runAsGroup", Y::Int(0)),
                    ("runAsNonRoot", Y::Bool(false)),
                    ("allowPrivilegeEscalation", Y::Bool(false)),
                    ("readOnlyRootFilesystem", Y::Bool(false)),
                    (
                        "capabilities",
                        map(vec![
                            ("add", seq(vec![s("NET_ADMIN"), s("NET_RAW")])),
                            ("drop", seq(vec![s("ALL")])),
                        ]),
                    ),
                ]),
            ),
        ])
    }

    /// The sidecar: `warden proxy --mode sidecar` as uid 1337, who it is from the downward
    /// API (env and the podinfo files), its config from the mesh ConfigMap, its readiness on
    /// the health port as Istio's (`/healthz/ready`; timing from the pod's annotations), and
    /// the pod's app probes on the status port.
    pub fn proxy_container(&self, pod: &PodSidecar) -> Y {
        let uid = i64::from(self.proxy_uid);
        let mut args = vec![
            s("proxy"),
            s("--mode=sidecar"),
            s("--config=/etc/warden/config"),
            s("--pod-info=/etc/istio/pod"),
            s("--pod-ip=$(INSTANCE_IP)"),
            s(format!("--status-port={HEALTH_PORT}")),
        ];
        // Two workers unless the pod's proxy.istio.io/config says (0: one per core, the
        // proxy's default), as Istio's template passes its concurrency.
        match pod.annotations.concurrency {
            Some(0) => {}
            n => args.push(s(format!("--concurrency={}", n.unwrap_or(2)))),
        }
        if let Some(port) = pod.status_port.filter(|p| *p != HEALTH_PORT) {
            args.push(s(format!("--status-port={port}")));
        }
        let mut mounts = vec![
            mount(CONFIG_VOLUME, "/etc/warden/config"),
            mount(PODINFO_VOLUME, "/etc/istio/pod"),
        ];
        if self.credentials_secret.is_some() {
            args.push(s("--mesh-credentials=/etc/istio/mesh-credentials"));
            mounts.push(mount(CREDENTIALS_VOLUME, "/etc/istio/mesh-credentials"));
        }
        let mut env = vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("INSTANCE_IP", "status.podIP"),
            field_env("SERVICE_ACCOUNT", "spec.serviceAccountName"),
        ];
        if !pod.app_probers.is_empty() {
            env.push(map(vec![
                ("name", s(APP_PROBERS_ENV)),
                (
                    "value",
                    s(serde_json::Value::Object(pod.app_probers.clone()).to_string()),
                ),
            ]));
        }
        let readiness = pod.annotations.readiness;
        let r = &pod.annotations.resources;
        let mut container = map(vec![
            ("name", s(PROXY_CONTAINER)),
            (
                "image",
                s(pod.annotations.image.as_ref().unwrap_or(&self.image)),
            ),
            ("imagePullPolicy", s("IfNotPresent")),
            ("args", seq(args)),
            ("env", seq(env)),
            (
                "readinessProbe",
                map(vec![
                    (
                        "httpGet",
                        map(vec![
                            ("path", s("/healthz/ready")),
                            ("port", Y::Int(i64::from(HEALTH_PORT))),
                        ]),
                    ),
                    (
                        "initialDelaySeconds",
                        Y::Int(readiness.initial_delay_seconds),
                    ),
                    ("periodSeconds", Y::Int(readiness.period_seconds)),
                    ("timeoutSeconds", Y::Int(3)),
                    ("failureThreshold", Y::Int(readiness.failure_threshold)),
                ]),
            ),
            (
                "resources",
                map(vec![
                    (
                        "requests",
                        map(vec![("cpu", s(&r.cpu)), ("memory", s(&r.memory))]),
                    ),
                    (
                        "limits",
                        map(vec![
                            ("cpu", s(&r.cpu_limit)),
                            ("memory", s(&r.memory_limit)),
                        ]),
                    ),
                ]),
            ),
            (
                "securityContext",
                map(vec![
                    ("runAsUser", Y::Int(uid)),
                    ("runAsGroup", Y::Int(uid)),
                    ("runAsNonRoot", Y::Bool(true)),
                    ("allowPrivilegeEscalation", Y::Bool(false)),
                    ("readOnlyRootFilesystem", Y::Bool(true)),
                    ("capabilities", map(vec![("drop", seq(vec![s("ALL")]))])),
                ]),
            ),
            ("volumeMounts", seq(mounts)),
        ]);
        if pod.annotations.hold_application {
            // The kubelet starts the app containers (after this first one) only once this
            // hook has returned: when the sidecar is ready, as Istio's `pilot-agent wait`.
            if let Y::Map(entries) = &mut container {
                entries.push((
                    "lifecycle".into(),
                    map(vec![(
                        "postStart",
                        map(vec![(
                            "exec",
                            map(vec![(
                                "command",
                                seq(vec![s("/usr/local/bin/warden"), s("wait")]),
                            )]),
                        )]),
                    )]),
                ));
            }
        }
        container
    }

    /// The volumes the two containers mount; `service_account` names the credentials Secret.
    pub fn volumes(&self, service_account: &str) -> Vec<Y> {
        let mut out = vec![
            map(vec![
                ("name", s(CONFIG_VOLUME)),
                ("configMap", map(vec![("name", s(&self.config_map))])),
            ]),
            map(vec![
                ("name", s(PODINFO_VOLUME)),
                (
                    "downwardAPI",
                    map(vec![(
                        "items",
                        seq(["labels", "annotations", "namespace", "name"]
                            .iter()
                            .map(|f| {
                                map(vec![
                                    ("path", s(*f)),
                                    (
                                        "fieldRef",
                                        map(vec![("fieldPath", s(format!("metadata.{f}")))]),
                                    ),
                                ])
                            })
                            .collect()),
                    )]),
                ),
            ]),
        ];
        if let Some(secret) = &self.credentials_secret {
            out.push(map(vec![
                ("name", s(CREDENTIALS_VOLUME)),
                (
                    "secret",
                    map(vec![(
                        "secretName",
                        s(secret.replace("{sa}", service_account)),
                    )]),
                ),
            ]));
        }
        out
    }

    /// The `sidecar.istio.io/status` value: what was added, as Istio records it.
    pub fn status(&self) -> String {
        let mut volumes = vec![CONFIG_VOLUME, PODINFO_VOLUME];
        if self.credentials_secret.is_some() {
            volumes.push(CREDENTIALS_VOLUME);
        }
        serde_json::json!({
            "initContainers": [INIT_CONTAINER],
            "containers": [PROXY_CONTAINER],
            "volumes": volumes,
            "injectedBy": "warden",
        })
        .to_string()
    }
}
