//! The `warden` binary: CLI parsing and wiring only. Every subcommand's logic lives in a library
//! crate so it can be tested without spawning processes.

// The one exception, allowed where it is: jemalloc reads its options from an exported symbol
// (`MALLOC_CONF`), which the compiler cannot check.
#![deny(unsafe_code)]

mod demo;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

// jemalloc, not glibc's malloc: a proxied request boxes futures of 1.7-3.5 KB, past glibc's
// per-thread cache (1 KB), and `warden ratelimit` allocates per call in h2 and prost. With
// jemalloc's thread caches, user CPU per request fell ~10% in the proxy and ~12% per decision in
// the service; idle RSS grows ~1 MB (mimalloc was tried: +10 MB).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options (its `malloc_conf` string; `_RJEM_MALLOC_CONF` in the environment still
/// overrides them). With 64 requests in flight per worker, the boxes of their futures (1-2.5
/// KB) outnumbered the thread cache's default slots for those sizes (20), and its incremental
/// GC handed the rest back to the arena every 64 KB allocated: about one allocation in four
/// took jemalloc's slow path, ~750 user instructions per proxied request (4%). 64 slots per
/// size and a GC step every 16 MB allocated keep them in the thread's cache.
#[used]
#[allow(unsafe_code)]
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: &u8 = &b"tcache_nslots_small_min:64,tcache_gc_incr_bytes:16777216\0"[0];

#[derive(Parser)]
#[command(
    name = "warden",
    version,
    about = "Service-mesh data plane: gateway and sidecar proxy with native rate limiting and IP authorization"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start; boxing the large argument structs would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run a gateway (or, with --mode sidecar, a pod's sidecar) from Istio and warden YAML.
    Proxy(warden_proxy::cli::ProxyArgs),
    /// Validate config files and print what would run; exit 1 on errors.
    Check(warden_proxy::cli::CheckArgs),
    /// Run the source articles' scenarios end to end on loopback with an embedded config.
    Demo(demo::DemoArgs),
    /// Envoy RLS v3 rate limit service (drop-in for envoyproxy/ratelimit).
    Ratelimit(warden_ratelimit::cli::RatelimitArgs),
    /// Write the envoyproxy/ratelimit config derived from RateLimitPolicy documents.
    RatelimitConfig(warden_proxy::cli::RatelimitConfigArgs),
    /// HTTP/1.1, HTTP/2 (h2c) and TCP load generator.
    Load(warden_load::cli::LoadArgs),
    /// HTTP (h1 + h2c) and TCP echo server.
    Echo(warden_load::cli::EchoArgs),
    /// Install (or --clean) the sidecar's transparent-capture iptables rules in the current network namespace
    Capture(warden_capture::CaptureArgs),
    /// The local mesh CA: `init` a CA, `issue` SPIFFE workload certificates from it
    Ca(warden_tls::ca_cli::CaArgs),
    /// Same-node eBPF acceleration for sidecars: enable, disable or show it for a pod's cgroup
    Accel(warden_accel::cli::AccelArgs),
    /// Run the source articles' experiments side by side; write results.json and report.html
    Lab(warden_lab::cli::LabArgs),
    /// Add the sidecar and its capture init container to Kubernetes workloads (istioctl kube-inject)
    Inject(warden_inject::cli::InjectArgs),
    /// Wait until the sidecar is ready (pilot-agent wait): a postStart hook
    Wait(warden_proxy::cli::WaitArgs),
}

/// Logging to stderr. `RUST_LOG` wins; otherwise envoyproxy/ratelimit's `LOG_LEVEL` and
/// `LOG_FORMAT=json` are honoured so its Deployment env works unchanged.
fn init_logging(default_level: &str) {
    let level = std::env::var("LOG_LEVEL")
        .map(|l| warden_ratelimit::log_json::level_directive(&l))
        .unwrap_or_else(|_| default_level.into());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
        ))
        .with_writer(std::io::stderr);
    if std::env::var("LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        // The reference's keys (@timestamp, @message, level), so log pipelines keep working.
        builder
            .event_format(warden_ratelimit::log_json::ReferenceJson::default())
            .init();
    } else {
        builder.init();
    }
}

/// Colour codes only for a person at a terminal: in a file, a pipe or a container's log they
/// are noise (`NO_COLOR`, https://no-color.org, turns them off there too).
fn colours(stderr_is_terminal: bool, no_color: bool) -> bool {
    stderr_is_terminal && !no_color
}

/// The environment every subcommand's logging reads, shown under each one's `--help`.
const LOGGING_HELP: &str = "\
Logging (to stderr, every subcommand):
  LOG_FORMAT=json  one JSON object per line (envoyproxy/ratelimit's keys: @timestamp, @message, level)
  LOG_LEVEL=LEVEL  debug, info, warn, error (envoyproxy/ratelimit's variable)
  RUST_LOG=FILTER  tracing filter directives; wins over LOG_LEVEL
  NO_COLOR=1       no colour codes (they are only written to a terminal anyway)";

/// `command` and each of its subcommands, at every depth, with [`LOGGING_HELP`] under `--help`.
fn with_logging_help(command: clap::Command) -> clap::Command {
    command
        .after_help(LOGGING_HELP)
        .mut_subcommands(with_logging_help)
}

/// The subcommand a program name stands for: envoyproxy/ratelimit's image runs `/bin/ratelimit`,
/// and warden's image links that name to warden (deploy/build-image.sh), so the reference's
/// Deployments keep their `command`.
fn implied_subcommand(program: &std::ffi::OsStr) -> Option<&'static str> {
    let name = std::path::Path::new(program).file_name()?;
    (name == "ratelimit").then_some("ratelimit")
}

/// The command line, with the subcommand the program's name implies put in front of the rest.
fn command_line() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(sub) = args.first().and_then(|p| implied_subcommand(p)) {
        args.insert(1, sub.into());
    }
    args
}

fn main() -> ExitCode {
    let command = with_logging_help(Cli::command());
    let cli = match Cli::from_arg_matches(&command.get_matches_from(command_line())) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // The demo and the lab print their own reports; info logs would only interleave with them.
    init_logging(
        if matches!(cli.command, Command::Demo(_) | Command::Lab(_)) {
            "warn"
        } else {
            "info"
        },
    );
    let result = match cli.command {
        Command::Proxy(args) => warden_proxy::cli::run_proxy(args),
        Command::Check(args) => warden_proxy::cli::run_check(args),
        Command::Demo(args) => demo::run(args),
        Command::Ratelimit(args) => warden_ratelimit::cli::run(args),
        Command::RatelimitConfig(args) => warden_proxy::cli::run_ratelimit_config(args),
        Command::Load(args) => warden_load::cli::run_load(args),
        Command::Echo(args) => warden_load::cli::run_echo(args),
        Command::Capture(args) => warden_capture::run(args),
        Command::Accel(args) => warden_accel::cli::run(args),
        Command::Lab(args) => warden_lab::cli::run(args),
        Command::Ca(args) => warden_tls::ca_cli::run(args),
        Command::Inject(args) => warden_inject::cli::run(args),
        Command::Wait(args) => warden_proxy::cli::run_wait(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{colours, implied_subcommand};
    use std::ffi::OsStr;

    #[test]
    fn the_program_name_implies_a_subcommand_only_for_ratelimit() {
        for (program, sub) in [
            ("/bin/ratelimit", Some("ratelimit")),
            ("ratelimit", Some("ratelimit")),
            ("/usr/local/bin/warden", None),
            ("warden", None),
            ("/bin/ratelimit-client", None),
            ("/ratelimit/warden", None),
            ("", None),
        ] {
            assert_eq!(implied_subcommand(OsStr::new(program)), sub, "{program}");
        }
    }

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        for (terminal, no_color, want) in [
            (true, false, true),
            (true, true, false),
            (false, false, false),
            (false, true, false),
        ] {
            assert_eq!(colours(terminal, no_color), want, "{terminal} {no_color}");
        }
    }
}
