//! eBPF same-node acceleration end to end, as a user runs it: two "pods" (network
//! namespaces joined by a veth, each in a child cgroup2 the test creates and removes), each
//! with an app and `warden proxy --mode sidecar` as uid 1337. Processes are put in their pod's
//! cgroup first and then enter the namespace with nsenter (`ip netns exec` would move them to
//! the cgroup2 root). The client app is this test binary re-run as a helper (`app_helper`),
//! driven line by line over stdin/stdout, so it can hold connections open across
//! `warden accel enable`/`disable`. Programs attach only to the test's cgroups, and every
//! test uses its own bpffs, removed at the end (`warden accel disable --clean`).
//!
//! Runs as root (CI is root); skips with the reason only where namespaces or cgroup2 are not
//! available.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use warden_testkit::{
    netns, spawn_listening, wait_until, Cgroup, KillOnDrop, NetNs, RunAs, TempDir,
};

const WARDEN: &str = env!("CARGO_BIN_EXE_warden");
const VIP: &str = "10.96.0.10";
const CLIENT_IP: &str = "10.231.7.1";
const SERVER_IP: &str = "10.231.7.2";
/// What the sidecars get to load and attach programs and mount warden's bpffs (a pod's
/// securityContext would add the same).
const CAPS: &str = "+bpf,+net_admin,+sys_admin";

fn registry() -> String {
    format!(
        r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {{name: echo, namespace: default}}
  spec:
    clusterIP: {VIP}
    selector: {{app: api}}
    ports:
    - {{name: http, port: 80, targetPort: 8080}}
    - {{name: tcp-echo, port: 8078, targetPort: 8078}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: echo-1
    namespace: default
    labels: {{kubernetes.io/service-name: echo}}
  addressType: IPv4
  endpoints:
  - addresses: [{SERVER_IP}]
    conditions: {{ready: true}}
    targetRef: {{kind: Pod, name: api-1, namespace: default}}
  ports:
  - {{name: http, port: 8080}}
  - {{name: tcp-echo, port: 8078}}
- apiVersion: v1
  kind: Pod
  metadata: {{name: api-1, namespace: default, labels: {{app: api}}}}
  spec: {{containers: [{{name: echo}}]}}
  status: {{podIP: {SERVER_IP}}}
- apiVersion: v1
  kind: Pod
  metadata: {{name: client-1, namespace: default, labels: {{app: client}}}}
  spec: {{containers: [{{name: client}}]}}
  status: {{podIP: {CLIENT_IP}}}
"#
    )
}

/// How a sidecar is started.
#[derive(Clone, Copy, PartialEq)]
enum Privilege {
    /// uid 1337 with CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN (setpriv ambient capabilities).
    Capable,
    /// uid 1337 and nothing else (nsenter --setuid).
    Plain,
    /// As `Capable`, in a mount namespace where cgroup2 is unmounted.
    CapableWithoutCgroup2,
}

/// One pod: namespace, cgroup, its processes (dropped first) and sidecar log.
struct Pod {
    procs: Vec<KillOnDrop>,
    ns: NetNs,
    cg: Cgroup,
    ip: &'static str,
    log: PathBuf,
    /// `warden` as uid 1337 can execute it (the checkout may sit in a 0700 directory).
    proxy: RunAs,
}

impl Pod {
    /// The pod around `ns` (named `prefix`): a cgroup of its own, its sidecar's log in `dir`.
    fn new(ns: NetNs, prefix: &str, ip: &'static str, dir: &Path) -> Pod {
        let cg = Cgroup::new(prefix).unwrap();
        Pod {
            procs: Vec::new(),
            ns,
            cg,
            ip,
            log: dir.join(format!("sidecar-{prefix}.log")),
            proxy: RunAs::new(1337, 1337, WARDEN).expect("warden executable by uid 1337"),
        }
    }

    /// `program args...` in this pod: into the cgroup first, then the namespace.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut inner = self.ns.command(program);
        inner.args(args);
        self.cg.wrap(&mut inner)
    }

    fn spawn(&mut self, mut c: Command, stderr: Option<&Path>) {
        c.stdin(Stdio::null()).stdout(Stdio::null());
        if let Some(path) = stderr {
            c.stderr(std::fs::File::create(path).unwrap());
        }
        self.procs.push(KillOnDrop(c.spawn().expect("spawn")));
    }

    /// The sidecar, with `extra` flags, waiting for its admin `/ready`.
    fn start_sidecar(&mut self, config: &Path, labels: &str, privilege: Privilege, extra: &[&str]) {
        let mut args: Vec<String> = [
            "proxy",
            "--mode",
            "sidecar",
            "-c",
            &config.display().to_string(),
            "--admin",
            "127.0.0.1:15000",
            "--concurrency",
            "1",
            "--pod-ip",
            self.ip,
            "--label",
            labels,
            "--no-watch",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let setpriv = self.proxy.setpriv_args(Some(CAPS));
        let mut c = match privilege {
            Privilege::Capable => {
                let mut inner = self.ns.command("setpriv");
                inner.args(setpriv).args(&args);
                self.cg.wrap(&mut inner)
            }
            Privilege::Plain => {
                let mut inner = self.ns.command_as(&self.proxy);
                inner.args(&args);
                self.cg.wrap(&mut inner)
            }
            Privilege::CapableWithoutCgroup2 => {
                // A private mount namespace: unmounting cgroup2 there leaves the host's alone.
                let root = Cgroup::root().unwrap();
                let script = format!("umount -l {} && exec \"$@\"", root.display());
                let mut inner = self.ns.command("unshare");
                inner
                    .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                    .arg(script)
                    .arg("sh")
                    .arg("setpriv")
                    .args(setpriv)
                    .args(&args);
                self.cg.wrap(&mut inner)
            }
        };
        c.env("RUST_LOG", "info");
        let log = self.log.clone();
        self.spawn(c, Some(&log));
        let ready = self.ns.run_in(|| {
            wait_until(Duration::from_secs(20), || {
                admin_get("/ready").is_ok_and(|b| b.contains("LIVE"))
            })
        });
        assert!(
            ready.unwrap(),
            "sidecar in {} did not become ready: {}",
            self.ns.name(),
            self.sidecar_log()
        );
    }

    fn sidecar_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn stats(&self) -> String {
        self.ns
            .run_in(|| admin_get("/stats/prometheus"))
            .unwrap()
            .expect("stats")
    }

    /// The namespace's TcpOutSegs, read on a thread inside it.
    fn out_segs(&self) -> u64 {
        self.ns.run_in(out_segs_here).unwrap()
    }

    /// `warden capture` in this pod's namespace.
    fn capture(&self) {
        let out = self
            .ns
            .exec(WARDEN, &["capture", "--proxy-uid", "1337"])
            .expect("warden capture");
        assert!(out.status.success());
    }
}

/// GET on the sidecar's admin endpoint; the body.
fn admin_get(path: &str) -> std::io::Result<String> {
    http_get("127.0.0.1:15000", path)
}

/// GET `path` from `addr`; the body.
fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    Ok(raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

/// TcpOutSegs of the calling thread's network namespace.
fn out_segs_here() -> u64 {
    // thread-self: /proc/net follows the process's namespace, not this thread's.
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap();
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
    let i = names
        .split_whitespace()
        .position(|n| n == "OutSegs")
        .unwrap();
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// A counter from `/stats/prometheus` text.
fn metric(stats: &str, name: &str) -> u64 {
    let line = stats
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .unwrap_or_else(|| panic!("no {name} in:\n{stats}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// `warden accel status` for one pod's cgroup (other tests' attachments are elsewhere).
fn pod_status(pod: &Pod, bpffs: &Bpffs) -> String {
    let cg = pod.cg.path().display().to_string();
    let (ok, status) = accel(&["status", "--cgroup", &cg, "--bpffs", &bpffs.arg()]);
    assert!(ok, "{status}");
    status
}

/// A counter from `warden accel status` text (`  name   value`).
fn status_counter(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// warden's bpffs for one test: cleaned (pins removed, unmounted) on drop.
struct Bpffs {
    path: PathBuf,
}

impl Bpffs {
    /// A directory for the sidecars (uid 1337) to mount warden's bpffs on.
    fn new(dir: &TempDir) -> Bpffs {
        let path = dir.path().join("bpffs");
        std::fs::create_dir(&path).unwrap();
        std::os::unix::fs::chown(&path, Some(1337), Some(1337)).unwrap();
        Bpffs { path }
    }

    fn arg(&self) -> String {
        self.path.display().to_string()
    }

    fn mounted(&self) -> bool {
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(&self.arg()))
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = accel(&["disable", "--clean", "--bpffs", &self.arg()]);
        if self.mounted() {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

/// `warden accel ARGS` as root; (success, stdout + stderr).
fn accel(args: &[&str]) -> (bool, String) {
    let out = Command::new(WARDEN)
        .arg("accel")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("warden accel");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Why these tests cannot run here (not root, no namespaces, no cgroup2), or `None`.
fn unavailable() -> Option<String> {
    if let Some(why) = netns::unavailable() {
        return Some(why);
    }
    Cgroup::root()
        .is_none()
        .then(|| "no cgroup2 hierarchy is mounted".to_string())
}

/// Client and server pods on one veth, the server's app (`warden echo`, HTTP 8080 and TCP
/// 8078) started.
fn topology(dir: &TempDir) -> (Pod, Pod) {
    // The VIP is nowhere: the client's default route lets connect() leave, capture takes it
    // first.
    let (client, server) = netns::pod_pair("acli", CLIENT_IP, "asrv", SERVER_IP).unwrap();
    let client = Pod::new(client, "acli", CLIENT_IP, dir.path());
    let mut server = Pod::new(server, "asrv", SERVER_IP, dir.path());
    start_echo(&mut server, 8080, 8078);
    (client, server)
}

/// `warden echo` in `pod` on these ports (HTTP, TCP), waited for.
fn start_echo(pod: &mut Pod, http: u16, tcp: u16) {
    let (h, t) = (format!("0.0.0.0:{http}"), format!("0.0.0.0:{tcp}"));
    let echo = pod.command(WARDEN, &["echo", "--http", &h, "--tcp", &t]);
    let echo = spawn_listening(&pod.ns, echo, &[http, tcp]);
    pod.procs.push(echo);
}

/// The client app: this test binary re-run as `app_helper` in the client pod.
struct App {
    _proc: KillOnDrop,
    stdin: ChildStdin,
    replies: mpsc::Receiver<String>,
}

impl App {
    fn start(pod: &Pod) -> App {
        let exe = std::env::current_exe().unwrap();
        let mut c = pod.command(
            &exe.display().to_string(),
            &[
                "--exact",
                "app_helper",
                "--nocapture",
                "--test-threads",
                "1",
            ],
        );
        c.env("WARDEN_ACCEL_APP", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = c.spawn().expect("spawn the app");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may print "test app_helper ... " on the same line first.
                if let Some(at) = line.find("@@ ") {
                    if tx.send(line[at + 3..].to_string()).is_err() {
                        return;
                    }
                }
            }
        });
        App {
            _proc: KillOnDrop(child),
            stdin,
            replies,
        }
    }

    /// One command; its reply, which must start with `ok`.
    fn cmd(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let reply = self
            .replies
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no reply to `{line}` within 60 s"));
        assert!(reply.starts_with("ok"), "`{line}`: {reply}");
        reply
    }
}

// --- the app helper ------------------------------------------------------------------------

/// The byte at `offset` of every stream the app sends (and expects back from the echo).
/// Both pods of [`topology`] with sidecars accelerated by eBPF capture, every leg (the default).
fn accelerated_pods(dir: &TempDir, bpffs: &Bpffs) -> (Pod, Pod) {
    let (mut client, mut server) = topology(dir);
    let config = dir.write("mesh.yaml", &registry()).unwrap();
    let flags = ["--accel", "--capture", "ebpf", "--bpffs", &bpffs.arg()];
    server.start_sidecar(&config, "app=api", Privilege::Capable, &flags);
    client.start_sidecar(&config, "app=client", Privilege::Capable, &flags);
    (client, server)
}

fn pattern(offset: u64) -> u8 {
    (offset % 251) as u8
}

/// One connection of the app: sends the pattern, a reader thread checks every echoed byte.
struct Conn {
    stream: TcpStream,
    sent: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
    mismatch: Arc<Mutex<Option<String>>>,
    eof: Arc<AtomicBool>,
    /// Early EAGAINs of blocking reads (see the reader thread).
    spurious: Arc<AtomicU64>,
    writer: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Conn {
    fn open(addr: &str) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let (received, mismatch, eof) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(Mutex::new(None)),
            Arc::new(AtomicBool::new(false)),
        );
        let mut reader = stream.try_clone()?;
        let (r, m, e) = (received.clone(), mismatch.clone(), eof.clone());
        let spurious = Arc::new(AtomicU64::new(0));
        let sp = spurious.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            let mut waiting_since = Instant::now();
            loop {
                let read = reader.read(&mut buf);
                // A blocking read of a socket in a sockmap can return EAGAIN before its
                // timeout (tcp_bpf_recvmsg gives up after one wakeup without data, e.g. the
                // writer thread's write-space wakeup): read again, as a non-blocking app would.
                if let Err(err) = &read {
                    if err.kind() == std::io::ErrorKind::WouldBlock
                        && waiting_since.elapsed() < Duration::from_secs(30)
                    {
                        sp.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                }
                waiting_since = Instant::now();
                match read {
                    Ok(0) => break,
                    Ok(n) => {
                        let at = r.load(Ordering::SeqCst);
                        if let Some(i) = (0..n).find(|&i| buf[i] != pattern(at + i as u64)) {
                            *m.lock().unwrap() = Some(format!("byte {} differs", at + i as u64));
                        }
                        r.fetch_add(n as u64, Ordering::SeqCst);
                    }
                    Err(err) => {
                        *m.lock().unwrap() = Some(format!("read: {err}"));
                        break;
                    }
                }
            }
            e.store(true, Ordering::SeqCst);
        });
        Ok(Conn {
            stream,
            sent: Arc::new(AtomicU64::new(0)),
            received,
            mismatch,
            eof,
            spurious,
            writer: None,
        })
    }

    /// Send `n` more bytes of the pattern on a thread, in chunks of `chunk` with `pause`
    /// between them.
    fn send(&mut self, n: u64, chunk: usize, pause: Duration) -> std::io::Result<()> {
        self.join_writer()?;
        let mut w = self.stream.try_clone()?;
        let sent = self.sent.clone();
        self.writer = Some(std::thread::spawn(move || {
            let end = sent.load(Ordering::SeqCst) + n;
            while sent.load(Ordering::SeqCst) < end {
                let at = sent.load(Ordering::SeqCst);
                let len = chunk.min((end - at) as usize);
                let data: Vec<u8> = (0..len as u64).map(|i| pattern(at + i)).collect();
                w.write_all(&data)?;
                sent.fetch_add(len as u64, Ordering::SeqCst);
                if !pause.is_zero() {
                    std::thread::sleep(pause);
                }
            }
            Ok(())
        }));
        Ok(())
    }

    fn join_writer(&mut self) -> std::io::Result<()> {
        match self.writer.take() {
            Some(w) => w
                .join()
                .map_err(|_| std::io::Error::other("writer panicked"))?,
            None => Ok(()),
        }
    }

    /// Wait until everything sent came back (or EOF with `expect_eof`); a description of
    /// what went wrong otherwise.
    fn settle(&mut self, expect_eof: bool) -> Result<u64, String> {
        self.join_writer().map_err(|e| format!("write: {e}"))?;
        let sent = self.sent.load(Ordering::SeqCst);
        let done = wait_until(Duration::from_secs(30), || {
            self.received.load(Ordering::SeqCst) >= sent
                && (!expect_eof || self.eof.load(Ordering::SeqCst))
        });
        if let Some(m) = self.mismatch.lock().unwrap().clone() {
            return Err(m);
        }
        let got = self.received.load(Ordering::SeqCst);
        if !done || got != sent {
            return Err(format!(
                "sent {sent}, got back {got} (eof: {})",
                self.eof.load(Ordering::SeqCst)
            ));
        }
        Ok(got)
    }
}

fn helper_command(
    conns: &mut std::collections::HashMap<String, Conn>,
    line: &str,
) -> Result<String, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let conn = |conns: &mut std::collections::HashMap<String, Conn>, name: &str| {
        conns
            .remove(name)
            .ok_or_else(|| format!("no connection {name}"))
    };
    match words.as_slice() {
        ["open", name, addr] => {
            let c = Conn::open(addr).map_err(|e| format!("connect {addr}: {e}"))?;
            let peer = c
                .stream
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            let local = c
                .stream
                .local_addr()
                .map(|a| a.ip().to_string())
                .unwrap_or_default();
            conns.insert(name.to_string(), c);
            Ok(format!("open {name} local {local} peer {peer}"))
        }
        // Ask for the kTLS ULP (refused where the kernel has no tls module; the programs see
        // the request either way).
        ["ulp", name] => {
            let c = conn(conns, name)?;
            use std::os::fd::AsRawFd;
            // SAFETY: a valid socket fd and a 3-byte option value that outlives the call.
            let rc = unsafe {
                libc::setsockopt(
                    c.stream.as_raw_fd(),
                    libc::SOL_TCP,
                    libc::TCP_ULP,
                    c"tls".as_ptr().cast(),
                    3,
                )
            };
            let why = if rc == 0 {
                "set".to_string()
            } else {
                std::io::Error::last_os_error().to_string()
            };
            conns.insert(name.to_string(), c);
            Ok(format!("ulp {name}: {why}"))
        }
        // Send N bytes at once and wait for all of them back.
        ["echo", name, n] => {
            let mut c = conn(conns, name)?;
            let n: u64 = n.parse().map_err(|_| "bad count".to_string())?;
            c.send(n, 256 * 1024, Duration::ZERO)
                .map_err(|e| e.to_string())?;
            let settled = c.settle(false);
            conns.insert(name.to_string(), c);
            settled.map(|got| format!("echo {name} {got}"))
        }
        // Start sending N bytes slowly (64 KiB per 5 ms), for things to happen meanwhile.
        ["stream", name, n] => {
            let mut c = conn(conns, name)?;
            let n: u64 = n.parse().map_err(|_| "bad count".to_string())?;
            let started = c.send(n, 64 * 1024, Duration::from_millis(5));
            conns.insert(name.to_string(), c);
            started.map_err(|e| e.to_string())?;
            Ok(format!("stream {name} started"))
        }
        // Half-close: everything sent so far must come back, then EOF.
        ["finish", name] => {
            let mut c = conn(conns, name)?;
            c.join_writer().map_err(|e| format!("write: {e}"))?;
            c.stream
                .shutdown(Shutdown::Write)
                .map_err(|e| e.to_string())?;
            let settled = c.settle(true);
            eprintln!(
                "app: {name}: {} blocking reads returned EAGAIN early",
                c.spurious.load(Ordering::SeqCst)
            );
            settled.map(|got| format!("finish {name} {got}"))
        }
        // ROUNDS connections, each: send N bytes, shutdown(SHUT_WR), then a *blocking* read
        // (no timeout) to EOF, as a plain blocking client does; every EAGAIN counted, not retried
        // past 1,000.
        ["halfclose", addr, n, rounds] => {
            let n: usize = n.parse().map_err(|_| "bad count".to_string())?;
            let rounds: usize = rounds.parse().map_err(|_| "bad rounds".to_string())?;
            let (mut eagain, mut got) = (0u64, 0usize);
            for _ in 0..rounds {
                let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
                s.write_all(&vec![7u8; n]).map_err(|e| e.to_string())?;
                s.shutdown(Shutdown::Write).map_err(|e| e.to_string())?;
                let mut buf = vec![0u8; 65536];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(k) => got += k,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && eagain < 1000 => {
                            eagain += 1
                        }
                        Err(e) => return Err(format!("read: {e}")),
                    }
                }
            }
            Ok(format!("halfclose eagain {eagain} bytes {got}"))
        }
        // K connections at once, each sending N bytes in CHUNK-byte writes without pause
        // (the echoes checked byte by byte), then half-closing: sends that start skipping
        // the sidecars in the middle of a flow must not overtake bytes still on them.
        ["many", addr, k, n, chunk] => {
            let parse = |w: &str| w.parse::<u64>().map_err(|_| format!("bad number {w}"));
            let (k, n, chunk) = (parse(k)?, parse(n)?, parse(chunk)? as usize);
            let mut all = Vec::new();
            for _ in 0..k {
                let mut c = Conn::open(addr).map_err(|e| format!("connect {addr}: {e}"))?;
                c.send(n, chunk, Duration::ZERO)
                    .map_err(|e| e.to_string())?;
                all.push(c);
            }
            let mut total = 0;
            for (i, mut c) in all.into_iter().enumerate() {
                c.join_writer()
                    .map_err(|e| format!("conn {i}: write: {e}"))?;
                c.stream
                    .shutdown(Shutdown::Write)
                    .map_err(|e| e.to_string())?;
                total += c.settle(true).map_err(|e| format!("conn {i}: {e}"))?;
            }
            Ok(format!("many {total}"))
        }
        // HTTP/1.1 GET; the body's length.
        ["get", addr, path] => {
            let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(Duration::from_secs(20)))
                .map_err(|e| e.to_string())?;
            write!(
                s,
                "GET {path} HTTP/1.1\r\nhost: echo\r\nconnection: close\r\n\r\n"
            )
            .map_err(|e| e.to_string())?;
            let mut raw = Vec::new();
            s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
            let end = raw
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .ok_or("no head")?;
            let head = String::from_utf8_lossy(&raw[..end]).to_string();
            Ok(format!(
                "get {} {}",
                head.split(' ').nth(1).unwrap_or("?"),
                raw.len() - end - 4
            ))
        }
        _ => Err(format!("unknown command {line:?}")),
    }
}

/// Not a test of its own: the client app when run with WARDEN_ACCEL_APP set (see [`App`]).
#[test]
fn app_helper() {
    if std::env::var_os("WARDEN_ACCEL_APP").is_none() {
        return;
    }
    let mut conns = std::collections::HashMap::new();
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let reply = match helper_command(&mut conns, &line) {
            Ok(r) => format!("ok {r}"),
            Err(e) => format!("err {e}"),
        };
        println!("@@ {reply}");
        let _ = std::io::stdout().flush();
    }
}

// --- the tests -----------------------------------------------------------------------------

/// eBPF capture (no iptables anywhere) and acceleration held by both sidecars: 1 MB each way
/// with half-close arrives byte for byte through app -> sidecar -> sidecar -> app, and the
/// namespaces sent only the handshakes' and closes' segments; no message missed its peer; a
/// kTLS socket and its peer are left to TCP; detaching the programs under the proxies in the
/// middle of a transfer loses nothing and the proxies keep serving.
#[test]
fn accelerated_mesh_moves_bytes_exactly_without_tcp_segments() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = TempDir::new("accel").unwrap();
    // Before the pods: dropped (cleaned) after their processes are gone.
    let bpffs = Bpffs::new(&dir);
    let (client, server) = accelerated_pods(&dir, &bpffs);
    for pod in [&client, &server] {
        assert!(
            pod.sidecar_log().contains("eBPF acceleration on: cgroup"),
            "{}",
            pod.sidecar_log()
        );
    }
    let mut app = App::start(&client);

    let segs = (client.out_segs(), server.out_segs());
    let open = app.cmd(&format!("open a {VIP}:8078"));
    // The app's connect() went to the sidecar's outbound listener (the capture counter
    // below), yet getpeername() names where the app connected and getsockname() the pod's
    // address, as under iptables REDIRECT.
    assert!(
        open.ends_with(&format!("local {CLIENT_IP} peer {VIP}:8078")),
        "{open}"
    );
    app.cmd("stream a 1000000");
    assert_eq!(app.cmd("finish a"), "ok finish a 1000000");
    let sent = (client.out_segs() - segs.0, server.out_segs() - segs.1);
    eprintln!(
        "TcpOutSegs for 1 MB each way, accelerated: client +{} server +{}",
        sent.0, sent.1
    );
    let stats = client.stats();
    // 1 MB each way: the first bytes through sk_msg on each of the three legs, the rest
    // straight from app to app once both sidecars spliced their relays (tcp_splice).
    let spliced = metric(&stats, "warden_accel_spliced_bytes_total");
    assert!(
        metric(&stats, "warden_accel_redirected_bytes_total") + 3 * spliced >= 6_000_000,
        "{stats}"
    );
    assert!(spliced >= 1_000_000, "{stats}");
    assert_eq!(
        metric(&stats, "warden_accel_redirect_misses_total"),
        0,
        "{stats}"
    );
    assert_eq!(
        metric(&stats, "warden_accel_sockets_inserted_total"),
        6,
        "{stats}"
    );
    assert_eq!(
        metric(&stats, "warden_accel_capture_outbound_rewrites_total"),
        1
    );
    assert_eq!(metric(&stats, "warden_accel_peer_name_answers_total"), 1);
    assert_eq!(
        metric(&stats, "warden_accel_capture_inbound_rewrites_total"),
        1
    );
    assert_eq!(metric(&stats, "warden_accel_original_dst_answers_total"), 2);
    // Handshakes and closes of three connections, about 20 segments (2 MB over TCP through
    // three legs would be thousands, ACKs included).
    assert!(
        sent.0 + sent.1 <= 60,
        "TcpOutSegs client +{} server +{}",
        sent.0,
        sent.1
    );

    // HTTP through both sidecars, accelerated the same way.
    assert_eq!(
        app.cmd(&format!("get {VIP}:80 /echo?size=1000000")),
        "ok get 200 1000000"
    );

    // IPv4 through a dual-stack (IPv6) socket: connect6 captures it the same way.
    let open = app.cmd(&format!("open v6 [::ffff:{VIP}]:8078"));
    assert!(
        open.ends_with(&format!(
            "local ::ffff:{CLIENT_IP} peer [::ffff:{VIP}]:8078"
        )),
        "{open}"
    );
    app.cmd("stream v6 300000");
    assert_eq!(app.cmd("finish v6"), "ok finish v6 300000");
    let stats = client.stats();
    assert_eq!(
        metric(&stats, "warden_accel_capture_outbound_rewrites_total"),
        3
    );
    assert_eq!(
        metric(&stats, "warden_accel_redirect_misses_total"),
        0,
        "{stats}"
    );

    // A socket that asks for a ULP (kTLS) is left to TCP, both ways, and still intact.
    let before = client.stats();
    app.cmd(&format!("open u {VIP}:8078"));
    app.cmd("ulp u");
    app.cmd("stream u 300000");
    assert_eq!(app.cmd("finish u"), "ok finish u 300000");
    let after = client.stats();
    assert_eq!(
        metric(&after, "warden_accel_ulp_sockets_total"),
        1,
        "{after}"
    );
    assert!(
        metric(&after, "warden_accel_ulp_messages_passed_total")
            > metric(&before, "warden_accel_ulp_messages_passed_total"),
        "{after}"
    );
    assert_eq!(
        metric(&after, "warden_accel_redirect_misses_total"),
        0,
        "{after}"
    );

    // `status` sees both proxies' attachments and what eBPF capture short-circuits.
    for pod in [&client, &server] {
        let status = pod_status(pod, &bpffs);
        let line = format!("cgroup {} (id", pod.cg.path().display());
        assert!(
            status.contains(&line)
                && status.contains("held by a running process")
                && status.contains("capture ebpf, legs all: every leg mirrors")
                && status
                    .contains("proxy uid 1337, outbound listener 15001, inbound listener 15006")
                && status.contains("captures outbound: every call\n")
                && status.contains(&format!("apps' captured calls go to {}:15001", pod.ip))
                && status.contains(&format!("meshed pod {}", pod.ip)),
            "{status}"
        );
    }

    // Detach everything under the running proxies while a transfer is under way: the open
    // connection keeps its short-circuit and loses nothing; the proxies keep answering.
    app.cmd(&format!("open d {VIP}:8078"));
    app.cmd("stream d 4000000");
    std::thread::sleep(Duration::from_millis(100));
    for pod in [&client, &server] {
        let (ok, out) = accel(&[
            "disable",
            "--cgroup",
            &pod.cg.path().display().to_string(),
            "--bpffs",
            &bpffs.arg(),
        ]);
        assert!(ok && out.contains("detached wd_connect4"), "{out}");
    }
    assert_eq!(app.cmd("finish d"), "ok finish d 4000000");
    for pod in [&client, &server] {
        let status = pod_status(pod, &bpffs);
        assert!(status.contains("attached: nowhere"), "{status}");
    }
    assert!(client.stats().contains("warden_accel_attached"));
    assert_eq!(
        metric(&server.stats(), "warden_accel_redirect_misses_total"),
        0
    );
}

/// `warden accel enable`/`disable` (pinned, across processes) around connections already
/// open, with `warden capture`'s iptables rules as the pods' base capture: a connection
/// opened before `enable` keeps working (over TCP); one opened after is short-circuited;
/// `disable` in the middle of a transfer loses nothing; new connections then use iptables
/// again. `--capture iptables` short-circuits only the mirrored leg and `status` says so;
/// `--clean` leaves nothing mounted.
/// `--accel-legs sidecars`: only sidecar -> sidecar is short-circuited and the apps' sockets
/// stay plain TCP, so a blocking client that half-closes never gets an early EAGAIN (with
/// `all`, tcp_bpf_recvmsg returns one when the socket's own state change wakes the read).
#[test]
fn legs_sidecars_leave_blocking_apps_on_tcp() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = TempDir::new("accel-legs").unwrap();
    let bpffs = Bpffs::new(&dir);
    let (mut client, mut server) = topology(&dir);
    let config = dir.write("mesh.yaml", &registry()).unwrap();
    // WARDEN_TEST_ACCEL_LEGS=all shows what the test guards against: it fails (about 18
    // early EAGAINs per 100 rounds on kernel 6.18).
    let legs = std::env::var("WARDEN_TEST_ACCEL_LEGS").unwrap_or_else(|_| "sidecars".into());
    let flags = [
        "--accel",
        "--capture",
        "ebpf",
        "--accel-legs",
        &legs,
        "--bpffs",
        &bpffs.arg(),
    ];
    server.start_sidecar(&config, "app=api", Privilege::Capable, &flags);
    client.start_sidecar(&config, "app=client", Privilege::Capable, &flags);
    let mut app = App::start(&client);
    let rounds = 100;
    assert_eq!(
        app.cmd(&format!("halfclose {VIP}:8078 65536 {rounds}")),
        format!("ok halfclose eagain 0 bytes {}", rounds * 65536)
    );
    let stats = client.stats();
    assert!(stats.contains("legs=\"sidecars\""), "{stats}");
    if legs == "sidecars" {
        let status = pod_status(&client, &bpffs);
        assert!(
            status.contains("capture ebpf, legs sidecars: sidecar->sidecar"),
            "{status}"
        );
    }
    // Node-wide counters: two sockets per connection (the sidecars' ends of their leg).
    assert_eq!(
        metric(&stats, "warden_accel_sockets_inserted_total"),
        2 * rounds as u64,
        "{stats}"
    );
    assert!(metric(&stats, "warden_accel_messages_redirected_total") >= rounds as u64);
    assert_eq!(
        metric(&stats, "warden_accel_redirect_misses_total"),
        0,
        "{stats}"
    );
}

/// Plain TCP relays of both sidecars splice (tcp_splice): apps' sends then skip them. A send
/// may only skip once the far sidecar has delivered every earlier byte, so many connections
/// writing without pause (odd write sizes, the switch landing mid-flow) still get every byte
/// back in order, and most bytes are spliced.
#[test]
fn spliced_relays_keep_every_byte_in_order() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = TempDir::new("accel-splice").unwrap();
    let bpffs = Bpffs::new(&dir);
    let (client, _server) = accelerated_pods(&dir, &bpffs);
    let mut app = App::start(&client);
    for (k, n, chunk) in [
        (16u64, 1_000_000u64, 1000u64),
        (32, 200_000, 97),
        (8, 2_000_000, 65536),
    ] {
        assert_eq!(
            app.cmd(&format!("many {VIP}:8078 {k} {n} {chunk}")),
            format!("ok many {}", k * n)
        );
    }
    let stats = client.stats();
    let spliced = metric(&stats, "warden_accel_spliced_bytes_total");
    let total = 16 * 1_000_000 + 32 * 200_000 + 8 * 2_000_000;
    eprintln!(
        "spliced {spliced} of {} app bytes; {} messages after a miss",
        2 * total,
        metric(&stats, "warden_accel_messages_after_miss_total")
    );
    assert!(spliced > 0, "{stats}");
}

/// Conntrack may remap a connection's source port on the way into the server pod: a stale
/// entry of the iptables capture (the reply tuple of an earlier, REDIRECTed connection from the
/// same port) clashes with the new one. The server's sidecar then sees another port than the
/// client's sidecar connected from, yet SO_ORIGINAL_DST still names where the app was headed
/// (found by the connection's initial sequence number, not its tuple), and the bytes arrive
/// exactly; the remapped hop simply stays on TCP.
#[test]
fn remapped_source_ports_keep_their_original_destination() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    for tool in ["iptables", "conntrack"] {
        if !netns::on_path(tool) {
            panic!("{tool} is not installed (apt-get install {tool}; test.sh does)");
        }
    }
    let dir = TempDir::new("accel-remap").unwrap();
    let bpffs = Bpffs::new(&dir);
    let (mut client, mut server) = topology(&dir);
    // iptables capture in the server pod, for callers from other nodes: conntrack's NAT is on.
    server.capture();
    // The client sidecar's ports are few and known; each has a stale REDIRECT entry.
    let (first, last) = (40000u16, 40015u16);
    let range = format!("net.ipv4.ip_local_port_range={first} {last}");
    let out = client.ns.exec("sysctl", &["-w", &range]).unwrap();
    assert!(out.status.success(), "{out:?}");
    for port in first..=last {
        let p = port.to_string();
        let out = server
            .ns
            .exec(
                "conntrack",
                &[
                    "-I",
                    "-p",
                    "tcp",
                    "-s",
                    CLIENT_IP,
                    "-d",
                    SERVER_IP,
                    "--sport",
                    &p,
                    "--dport",
                    "8078",
                    "--reply-src",
                    SERVER_IP,
                    "--reply-dst",
                    CLIENT_IP,
                    "--reply-port-src",
                    "15006",
                    "--reply-port-dst",
                    &p,
                    "--state",
                    "TIME_WAIT",
                    "--timeout",
                    "120",
                    "-u",
                    "SEEN_REPLY,ASSURED",
                ],
            )
            .unwrap();
        assert!(out.status.success(), "conntrack -I: {out:?}");
    }
    let config = dir.write("mesh.yaml", &registry()).unwrap();
    let flags = ["--accel", "--capture", "ebpf", "--bpffs", &bpffs.arg()];
    server.start_sidecar(&config, "app=api", Privilege::Capable, &flags);
    client.start_sidecar(&config, "app=client", Privilege::Capable, &flags);
    let mut app = App::start(&client);
    app.cmd(&format!("open r {VIP}:8078"));
    app.cmd("stream r 300000");
    assert_eq!(app.cmd("finish r"), "ok finish r 300000");
    assert_eq!(
        app.cmd(&format!("get {VIP}:80 /echo?size=100000")),
        "ok get 200 100000"
    );
    // Not vacuous: the server pod saw those connections from other ports.
    let out = server
        .ns
        .exec(
            "conntrack",
            &["-L", "-p", "tcp", "--orig-port-dst", "15006"],
        )
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let remapped = table
        .lines()
        .filter(|l| {
            let ports: Vec<&str> = l
                .split_whitespace()
                .filter_map(|w| w.strip_prefix("sport=").or(w.strip_prefix("dport=")))
                .collect();
            // orig sport, orig dport, reply sport, reply dport
            ports.len() == 4 && ports[0] != ports[3]
        })
        .count();
    assert!(remapped >= 2, "no remapped connection in\n{table}");
    // A remapped connection's tuples do not mirror: each side's first send misses and the
    // connection stays on TCP; nothing else misses.
    assert_eq!(
        metric(&server.stats(), "warden_accel_redirect_misses_total"),
        2 * remapped as u64,
        "{table}"
    );
    assert_eq!(
        metric(&server.stats(), "warden_accel_original_dst_answers_total"),
        4,
        "{}",
        server.stats()
    );
}

/// eBPF capture takes `warden capture`'s selections (Istio's traffic.sidecar.istio.io/*
/// annotations): the client pod's calls to an excluded port, or outside the included CIDRs,
/// leave it untouched; a call of a same-node sidecar to a port the server pod excludes from
/// inbound capture reaches the app itself, not the server's sidecar.
#[test]
fn capture_selections_are_kept_by_ebpf_capture() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = TempDir::new("accel-scope").unwrap();
    let bpffs = Bpffs::new(&dir);
    let (mut client, mut server) = topology(&dir);
    start_echo(&mut server, 9080, 9078);
    let config = dir.write("mesh.yaml", &registry()).unwrap();
    let flags = ["--accel", "--capture", "ebpf", "--bpffs", &bpffs.arg()];
    let server_flags = [&flags[..], &["--exclude-inbound-ports", "9080"]].concat();
    server.start_sidecar(&config, "app=api", Privilege::Capable, &server_flags);
    let included = format!("10.96.0.0/16,{SERVER_IP}/32");
    let client_flags = [
        &flags[..],
        &[
            "--exclude-outbound-ports",
            "9078",
            "--include-outbound-cidrs",
            &included,
        ],
    ]
    .concat();
    client.start_sidecar(&config, "app=client", Privilege::Capable, &client_flags);
    let mut app = App::start(&client);
    let captured = |pod: &Pod| {
        let stats = pod.stats();
        (
            metric(&stats, "warden_accel_capture_outbound_rewrites_total"),
            metric(&stats, "warden_accel_capture_inbound_rewrites_total"),
        )
    };
    let exchange = |app: &mut App, name: &str, addr: &str| {
        app.cmd(&format!("open {name} {addr}"));
        app.cmd(&format!("stream {name} 100000"));
        assert_eq!(
            app.cmd(&format!("finish {name}")),
            format!("ok finish {name} 100000")
        );
    };

    // The VIP and the server pod's address are included: captured, to the server's sidecar.
    let before = captured(&client);
    exchange(&mut app, "vip", &format!("{VIP}:8078"));
    exchange(&mut app, "pod", &format!("{SERVER_IP}:8078"));
    assert_eq!(captured(&client), (before.0 + 2, before.1 + 2));
    // An excluded port: straight to the server pod.
    exchange(&mut app, "excluded", &format!("{SERVER_IP}:9078"));
    assert_eq!(captured(&client), (before.0 + 2, before.1 + 2));

    // A port the server pod excludes from inbound capture: the client's sidecar takes the
    // call (port 9080 is not excluded outbound) and connects to the app directly, which then
    // sees the client pod's address, not the inbound passthrough's 127.0.0.6.
    assert_eq!(
        app.cmd(&format!("get {SERVER_IP}:9080 /echo?size=10")),
        "ok get 200 10"
    );
    assert_eq!(captured(&client), (before.0 + 3, before.1 + 2));
    let counts = server
        .ns
        .run_in(|| http_get("127.0.0.1:9080", "/count"))
        .unwrap()
        .unwrap();
    assert!(counts.contains(&format!("\"{CLIENT_IP}\":1")), "{counts}");
    assert!(!counts.contains("127.0.0.6"), "{counts}");

    // `status` names each pod's selections.
    let status = pod_status(&client, &bpffs);
    assert!(
        status.contains(&format!(
            "captures outbound: calls to 10.96.0.0/16 {SERVER_IP}/32; not to ports 9078\n"
        )),
        "{status}"
    );
    let status = pod_status(&server, &bpffs);
    let inbound = status
        .lines()
        .find(|l| l.contains("same-node sidecars reach its inbound listener for every port but"));
    assert!(
        inbound.is_some_and(|l| l.split(' ').any(|w| w == "9080")),
        "{status}"
    );

    // Selections without eBPF capture would be ignored: refused.
    let out = Command::new(WARDEN)
        .args(["proxy", "--mode", "sidecar", "-c"])
        .arg(&config)
        .args(["--exclude-outbound-ports", "9078"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("are for --accel --capture ebpf"),
        "{err}"
    );
}

#[test]
fn enable_and_disable_around_open_connections() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = TempDir::new("accel").unwrap();
    // Before the pods: dropped (cleaned) after their processes are gone.
    let bpffs = Bpffs::new(&dir);
    let (mut client, mut server) = topology(&dir);
    if !netns::on_path("iptables") {
        panic!("iptables is not installed (apt-get install iptables; test.sh does)");
    }
    let config = dir.write("mesh.yaml", &registry()).unwrap();
    client.capture();
    server.capture();
    server.start_sidecar(&config, "app=api", Privilege::Plain, &[]);
    client.start_sidecar(&config, "app=client", Privilege::Plain, &[]);
    let mut app = App::start(&client);

    // Before enable: through iptables and TCP, segment by segment.
    app.cmd(&format!("open c1 {VIP}:8078"));
    let segs = client.out_segs() + server.out_segs();
    app.cmd("echo c1 300000");
    let unaccelerated = client.out_segs() + server.out_segs() - segs;
    eprintln!("TcpOutSegs for 300 kB each way over iptables + TCP: +{unaccelerated}");
    assert!(
        unaccelerated > 100,
        "TcpOutSegs +{unaccelerated} for 300 kB each way"
    );

    let enable = |pod: &Pod, capture: &str| {
        let (ok, out) = accel(&[
            "enable",
            "--cgroup",
            &pod.cg.path().display().to_string(),
            "--capture",
            capture,
            "--pod-ip",
            pod.ip,
            "--bpffs",
            &bpffs.arg(),
        ]);
        assert!(ok && out.contains("enabled on"), "{out}");
        // Run outside the pod's namespace, where its address is not local: loopback.
        assert!(
            capture == "iptables" || out.contains("apps' captured calls go to 127.0.0.1:15001"),
            "{out}"
        );
    };
    enable(&client, "ebpf");
    enable(&server, "ebpf");

    // The connection from before keeps working.
    app.cmd("echo c1 300000");
    // A new one is captured by connect4 and short-circuited on every leg.
    let segs = client.out_segs() + server.out_segs();
    let open = app.cmd(&format!("open c2 {VIP}:8078"));
    assert!(open.ends_with(&format!("peer {VIP}:8078")), "{open}");
    app.cmd("echo c2 1000000");
    let accelerated = client.out_segs() + server.out_segs() - segs;
    eprintln!("TcpOutSegs for opening + 1 MB each way, accelerated: +{accelerated}");
    assert!(
        accelerated <= 40,
        "TcpOutSegs +{accelerated} for 1 MB each way, accelerated"
    );
    for pod in [&client, &server] {
        let status = pod_status(pod, &bpffs);
        assert!(status.contains("pinned by warden accel enable"), "{status}");
    }
    let (_, status) = accel(&["status", "--bpffs", &bpffs.arg()]);
    assert_eq!(status_counter(&status, "redirect_misses"), 0, "{status}");

    // Disable both pods in the middle of a transfer: not a byte lost.
    app.cmd("stream c2 4000000");
    std::thread::sleep(Duration::from_millis(100));
    let (ok, out) = accel(&["disable", "--bpffs", &bpffs.arg()]);
    assert!(
        ok && out.matches("detached wd_connect4").count() == 2,
        "{out}"
    );
    assert_eq!(app.cmd("finish c2"), "ok finish c2 5000000");
    // New connections use the iptables capture again; the first one is still fine.
    let open = app.cmd(&format!("open c3 {VIP}:8078"));
    assert!(open.ends_with(&format!("peer {VIP}:8078")), "{open}");
    app.cmd("echo c3 200000");
    assert_eq!(app.cmd("finish c3"), "ok finish c3 200000");
    assert_eq!(app.cmd("finish c1"), "ok finish c1 600000");

    // Acceleration over iptables capture: only sidecar -> app (from 127.0.0.6) mirrors.
    enable(&client, "iptables");
    enable(&server, "iptables");
    for pod in [&client, &server] {
        let status = pod_status(pod, &bpffs);
        assert!(
            status.contains("capture iptables, legs all: only legs whose 4-tuples mirror")
                && !status.contains("captures outbound"),
            "{status}"
        );
    }
    let (_, status) = accel(&["status", "--bpffs", &bpffs.arg()]);
    let before = status;
    app.cmd(&format!("open c4 {VIP}:8078"));
    app.cmd("echo c4 500000");
    assert_eq!(app.cmd("finish c4"), "ok finish c4 500000");
    let (_, after) = accel(&["status", "--bpffs", &bpffs.arg()]);
    let delta = |name| status_counter(&after, name) - status_counter(&before, name);
    // The sidecar -> app leg: 500 kB each way redirected.
    assert!(delta("redirected_bytes") >= 1_000_000, "{after}");
    // The sidecars' sockets of the two DNAT'd legs found no peer and used TCP.
    assert!(delta("redirect_misses") > 0, "{after}");

    let (ok, out) = accel(&["disable", "--bpffs", &bpffs.arg()]);
    assert!(ok, "{out}");
    drop(app);
    let (ok, out) = accel(&["disable", "--clean", "--bpffs", &bpffs.arg()]);
    assert!(ok && out.contains("unmounted"), "{out}");
    assert!(!bpffs.mounted());
}

/// Without the privileges (the sidecar as plain uid 1337) or without cgroup2 (a mount
/// namespace where it is unmounted), `--accel` says exactly what is missing and the sidecars
/// serve unaccelerated over the iptables capture.
#[test]
fn without_privileges_or_cgroup2_the_sidecars_run_unaccelerated() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = TempDir::new("accel").unwrap();
    // Before the pods: dropped (cleaned) after their processes are gone.
    let bpffs = Bpffs::new(&dir);
    let (mut client, mut server) = topology(&dir);
    if !netns::on_path("iptables") {
        panic!("iptables is not installed (apt-get install iptables; test.sh does)");
    }
    let config = dir.write("mesh.yaml", &registry()).unwrap();
    client.capture();
    server.capture();
    let flags = ["--accel", "--capture", "ebpf", "--bpffs", &bpffs.arg()];
    server.start_sidecar(&config, "app=api", Privilege::CapableWithoutCgroup2, &flags);
    client.start_sidecar(&config, "app=client", Privilege::Plain, &flags);
    let log = client.sidecar_log();
    assert!(
        log.contains("eBPF acceleration off, running unaccelerated; missing: CAP_BPF (or CAP_SYS_ADMIN) to load BPF programs and maps (uid 1337 has neither); CAP_NET_ADMIN"),
        "{log}"
    );
    let log = server.sidecar_log();
    assert!(
        log.contains("eBPF acceleration off, running unaccelerated; missing: no cgroup2 hierarchy is mounted"),
        "{log}"
    );

    let mut app = App::start(&client);
    let open = app.cmd(&format!("open a {VIP}:8078"));
    assert!(open.ends_with(&format!("peer {VIP}:8078")), "{open}");
    app.cmd("stream a 1000000");
    assert_eq!(app.cmd("finish a"), "ok finish a 1000000");
    for pod in [&client, &server] {
        let status = pod_status(pod, &bpffs);
        assert!(status.contains("attached: nowhere"), "{status}");
    }
    assert!(!client.stats().contains("warden_accel_attached"));
}
