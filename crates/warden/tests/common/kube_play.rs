//! deploy/kubernetes under `podman kube play`, as a small cluster: every pod in a network
//! namespace of its own (10.244.N.2, its veth peer in a hub namespace that routes between
//! them and where the test's clients run), Services named in a hosts file that stands in for
//! the cluster's DNS. What a cluster gives a pod and podman 4.3 does not is stood in for by
//! [`for_podman`].

use super::atomic_writer::AtomicWriterDir;
use super::podman::{repo_root, Podman};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use warden_testkit::NetNs;

/// A pod of the cluster: its name, the names it is reached by and its address.
pub struct PodSlot {
    pub name: String,
    pub addr: String,
    netns: NetNs,
}

pub struct KubeCluster {
    // Declared first, dropped first: the containers go before the namespaces they run in.
    podman: Podman,
    pods: Vec<PodSlot>,
    hub: NetNs,
    hosts: PathBuf,
}

impl KubeCluster {
    /// One namespace per pod; `pods` are each pod's name and the extra DNS names it answers to
    /// (a StatefulSet pod's `NAME.SERVICE`). Every pod also answers to `NAME`, `NAME.default`
    /// and `NAME.default.svc.cluster.local`, as a Deployment's Service of the same name does.
    pub fn new(pods: &[(&str, &[&str])]) -> KubeCluster {
        let hub = NetNs::new("kube-hub").expect("hub namespace");
        hub.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])
            .expect("forwarding in the hub");
        let mut slots = Vec::new();
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for (i, (name, aliases)) in pods.iter().enumerate() {
            let ns = NetNs::new("kube-pod").expect("pod namespace");
            let net = 200 + i;
            warden_testkit::netns::veth_pair(
                &hub,
                &format!("10.244.{net}.1/24"),
                &ns,
                &format!("10.244.{net}.2/24"),
            )
            .expect("veth");
            ns.ip(&["route", "add", "default", "via", &format!("10.244.{net}.1")])
                .expect("route");
            let addr = format!("10.244.{net}.2");
            hosts.push_str(&format!(
                "{addr} {name} {name}.default {name}.default.svc.cluster.local"
            ));
            for alias in aliases.iter() {
                hosts.push_str(&format!(" {alias} {alias}.default.svc.cluster.local"));
            }
            hosts.push('\n');
            slots.push(PodSlot {
                name: name.to_string(),
                addr,
                netns: ns,
            });
        }
        let podman = Podman::new();
        let hosts_file = podman.dir().join("cluster-hosts");
        std::fs::write(&hosts_file, &hosts).expect("hosts file");
        KubeCluster {
            podman,
            pods: slots,
            hub,
            hosts: hosts_file,
        }
    }

    pub fn podman(&self) -> &Podman {
        &self.podman
    }

    pub fn hub(&self) -> &NetNs {
        &self.hub
    }

    /// The address of pod `name`.
    pub fn addr(&self, name: &str) -> &str {
        &self.slot(name).addr
    }

    fn slot(&self, name: &str) -> &PodSlot {
        self.pods
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no pod {name}"))
    }

    /// `podman kube play` of `workload` (a Deployment or a Pod, as the manifests have it) in
    /// pod `name`'s namespace, after the `config_maps` it mounts; stood in for first. The
    /// URLs its httpGet probes ask for at the pod's address, which podman does not probe (see
    /// [`for_podman`]): the test asks them itself.
    pub fn play(&self, name: &str, config_maps: &[&Value], mut workload: Value) -> Vec<String> {
        let template = if workload["kind"] == "Pod" {
            &mut workload
        } else {
            &mut workload["spec"]["template"]
        };
        let probes = http_probes(template, self.addr(name));
        for_podman(template, name, self.podman.dir(), &self.hosts);
        let mut play = String::new();
        for cm in config_maps {
            play.push_str(&serde_json::to_string(cm).expect("json"));
            play.push_str("\n---\n");
        }
        play.push_str(&serde_json::to_string(&workload).expect("json"));
        let file = self.podman.dir().join(format!("{name}.play.yaml"));
        std::fs::write(&file, play).expect("play file");
        let out = self
            .podman
            .command("nsenter")
            .arg(format!("--net={}", self.slot(name).netns.path().display()))
            .args([
                "--",
                "podman",
                "kube",
                "play",
                "--network",
                "host",
                "--no-hosts",
            ])
            .arg(&file)
            .output()
            .expect("podman kube play");
        assert!(
            out.status.success(),
            "kube play {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        probes
    }

    /// `curl ARGS` from the hub: its stdout ("" when curl could not run).
    pub fn curl(&self, args: &[&str]) -> String {
        self.hub
            .exec("curl", args)
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Every container's log, for failure messages.
    pub fn logs(&self) -> String {
        let names = self.podman.ok(&["ps", "-a", "--format", "{{.Names}}"]);
        names
            .lines()
            .filter(|n| !n.ends_with("-infra"))
            .map(|n| format!("--- {n}\n{}", self.podman.logs(n)))
            .collect()
    }

    /// The status of each of `n` requests for `url` from one client (one curl, keep-alive),
    /// all in one clock minute: a fixed window that turns over during a run counts the requests
    /// in two windows, so such a run is made again, on `url` with `-again` appended (a key of
    /// its own).
    pub fn statuses_in_one_minute(&self, url: &str, n: usize) -> Vec<String> {
        let minute = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() / 60)
                .unwrap_or(0)
        };
        let mut codes = Vec::new();
        for url in [url.to_string(), format!("{url}-again")] {
            let before = minute();
            let mut args: Vec<&str> = vec!["-s", "-m", "60", "-w", "%{http_code}\\n"];
            for _ in 0..n {
                args.extend(["-o", "/dev/null", url.as_str()]);
            }
            codes = self.curl(&args).lines().map(str::to_string).collect();
            if minute() == before {
                break;
            }
        }
        codes
    }
}

/// `http://ADDR:PORT/PATH` of every httpGet readiness and liveness probe of `pod`'s
/// containers (a named port resolved through the container's ports).
fn http_probes(pod: &Value, addr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        for probe in ["readinessProbe", "livenessProbe"] {
            let get = &c[probe]["httpGet"];
            let port = match &get["port"] {
                Value::Number(n) => n.as_u64(),
                Value::String(name) => c["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|p| p["name"] == name.as_str())
                    .and_then(|p| p["containerPort"].as_u64()),
                _ => None,
            };
            if let (Some(port), Some(path)) = (port, get["path"].as_str()) {
                out.push(format!("http://{addr}:{port}{path}"));
            }
        }
    }
    out
}

/// The documents of `files` under deploy/kubernetes, as committed.
pub fn manifests(files: &[&str]) -> Vec<Value> {
    let dir = repo_root().join("deploy/kubernetes");
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(dir.join(file)).expect("manifest");
        for d in warden_config::yaml_source::parse_documents(&text).expect("manifest parses") {
            docs.push(d.value);
        }
    }
    docs
}

/// The document of `kind` named `name`.
pub fn find(docs: &[Value], kind: &str, name: &str) -> Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{kind} {name}"))
}

/// The pods a StatefulSet's controller makes: `NAME-0` … `NAME-(replicas-1)`, each with the
/// template's labels and spec, its hostname the pod's name and its subdomain the governing
/// Service (so `NAME-i.SERVICE` names it). podman 4.3 does not play StatefulSets.
pub fn stateful_pods(set: &Value) -> Vec<Value> {
    let name = set["metadata"]["name"].as_str().expect("a name");
    let replicas = set["spec"]["replicas"].as_u64().unwrap_or(1);
    let template = &set["spec"]["template"];
    (0..replicas)
        .map(|i| {
            let pod = format!("{name}-{i}");
            let mut spec = template["spec"].clone();
            spec["hostname"] = json!(pod);
            spec["subdomain"] = set["spec"]["serviceName"].clone();
            let mut metadata = template["metadata"].clone();
            metadata["name"] = json!(pod);
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
        })
        .collect()
}

/// What a cluster gives a pod and podman 4.3's `kube play` does not, stood in for in a pod
/// template (`metadata` + `spec`):
/// - cluster DNS: the hosts file naming every Service by its pod's address, at /etc/hosts;
/// - `fieldRef: metadata.namespace` in env (not resolved by podman 4.3): the value `default`;
/// - the `HOSTNAME` variable the kubelet sets to the pod's hostname (podman sets the
///   container's);
/// - downward-API volumes: a folder written as the kubelet writes them (`labels`, ...);
/// - projected (optional Secret) volumes: an empty folder, as when the Secret is absent;
/// - emptyDir volumes: an empty folder every uid may write;
/// - probes: podman runs an httpGet probe as curl inside the container, which a FROM-scratch
///   image has not; the tests wait for the pods' answers instead;
/// - `ports`: podman 4.3 publishes containerPorts, which it refuses on the pod's own network
///   (every port of the pod is reachable there anyway).
pub fn for_podman(pod: &mut Value, name: &str, dir: &Path, hosts: &Path) {
    let labels = pod["metadata"]["labels"].clone();
    let annotations = pod["metadata"]["annotations"].clone();
    let hostname = pod["spec"]["hostname"].as_str().map(str::to_string);
    let spec = &mut pod["spec"];
    let mut volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
    for v in volumes.iter_mut() {
        let vname = v["name"].as_str().unwrap_or_default().to_string();
        let folder = dir.join(format!("{name}-{vname}"));
        if v.get("downwardAPI").is_some() {
            let quoted = |m: &Value| {
                m.as_object()
                    .map(|o| {
                        o.iter()
                            .map(|(k, v)| format!("{k}={:?}\n", v.as_str().unwrap_or_default()))
                            .collect::<String>()
                    })
                    .unwrap_or_default()
            };
            let info = AtomicWriterDir::new(
                &folder,
                &[
                    ("labels", &quoted(&labels)),
                    ("annotations", &quoted(&annotations)),
                    ("namespace", "default"),
                    ("name", &format!("{name}-pod")),
                ],
            );
            *v = json!({"name": vname, "hostPath": {"path": info.path(), "type": "Directory"}});
        } else if v.get("projected").is_some() || v.get("emptyDir").is_some() {
            std::fs::create_dir_all(&folder).expect("empty volume");
            let writable = if v.get("emptyDir").is_some() {
                0o777
            } else {
                0o755
            };
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(writable))
                .expect("volume mode");
            *v = json!({"name": vname, "hostPath": {"path": folder, "type": "Directory"}});
        }
    }
    volumes.push(json!({"name": "cluster-dns", "hostPath": {"path": hosts, "type": "File"}}));
    spec["volumes"] = json!(volumes);
    for c in spec["containers"].as_array_mut().into_iter().flatten() {
        let obj = c.as_object_mut().expect("a container");
        obj.remove("readinessProbe");
        obj.remove("livenessProbe");
        obj.remove("ports");
        let mut mounts = obj
            .get("volumeMounts")
            .and_then(|m| m.as_array().cloned())
            .unwrap_or_default();
        mounts.push(json!({"name": "cluster-dns", "mountPath": "/etc/hosts", "readOnly": true}));
        obj.insert("volumeMounts".into(), json!(mounts));
        let mut env = obj
            .get("env")
            .and_then(|e| e.as_array().cloned())
            .unwrap_or_default();
        for e in env.iter_mut() {
            if e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace" {
                let n = e["name"].clone();
                *e = json!({"name": n, "value": "default"});
            }
        }
        if let Some(h) = &hostname {
            env.push(json!({"name": "HOSTNAME", "value": h}));
        }
        if !env.is_empty() {
            obj.insert("env".into(), json!(env));
        }
    }
}

/// Sets (or adds) the variable `name` of `container`'s env to `value`.
pub fn set_env(container: &mut Value, name: &str, value: &str) {
    let env = container["env"].as_array_mut().expect("env");
    env.retain(|e| e["name"] != name);
    env.push(json!({"name": name, "value": value}));
}
