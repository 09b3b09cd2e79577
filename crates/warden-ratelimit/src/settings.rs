//! Service settings from the reference's environment variables (envoyproxy/ratelimit
//! `src/settings/settings.go`). Every variable is parsed and all errors are reported at once.

use crate::config::{Algorithm, ConfigSource};
use crate::lease::LeasePolicy;
use crate::limiter::{LimiterSettings, ResponseHeaderNames};
pub use crate::server::GrpcTlsSettings;
use crate::store::{RedisSettings, RedisTls, RedisType};
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Which counter store to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// In-process, exact, bounded (warden's default when no Redis is configured).
    Memory,
    Redis,
}

/// See [`Settings::ban_state_cache_ms`].
pub const DEFAULT_BAN_STATE_CACHE_MS: u64 = 1000;

/// Everything `warden ratelimit` needs to run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `HOST`/`PORT`: `/json`, `/healthcheck`.
    pub http_addr: SocketAddr,
    /// `GRPC_HOST`/`GRPC_PORT`.
    pub grpc_addr: SocketAddr,
    /// `DEBUG_HOST`/`DEBUG_PORT`: `/`, `/rlconfig`, `/metrics`, `/stats`.
    pub debug_addr: SocketAddr,
    /// `GRPC_MAX_CONNECTION_AGE` / `_GRACE`.
    pub grpc_max_connection_age: Duration,
    pub grpc_max_connection_age_grace: Duration,
    /// `GRPC_UDS`: gRPC on this unix socket instead of `grpc_addr`.
    pub grpc_uds: Option<PathBuf>,
    /// `GRPC_SERVER_USE_TLS` and its files.
    pub grpc_tls: Option<GrpcTlsSettings>,
    /// gRPC serving threads, each with its own runtime and Redis connections (warden:
    /// `GRPC_THREADS`, default one per core).
    pub grpc_threads: usize,
    /// `LOG_LEVEL` (reference default WARN) and `LOG_FORMAT` (text|json).
    pub log_level: String,
    pub log_format: String,
    pub config_source: ConfigSource,
    /// `MERGE_DOMAIN_CONFIG`.
    pub merge_domain_config: bool,
    /// How often the config files are checked for changes (warden: `RUNTIME_POLL_INTERVAL`).
    pub config_poll_interval: Duration,
    pub backend: Backend,
    pub redis: RedisSettings,
    /// `REDIS_PERSECOND=true`: SECOND-unit keys go to this client.
    pub redis_per_second: Option<RedisSettings>,
    /// How often Redis health is probed (and health changes are published to grpc.health).
    pub health_probe_interval: Duration,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: unhealthy (`/healthcheck` 500, grpc.health
    /// NOT_SERVING) while the active config has no domain.
    pub healthy_with_at_least_one_config_loaded: bool,
    /// `BAN_STATE_CACHE_MS` (a warden extension, default 1000; 0 = off): how long a client's
    /// ban state read from Redis answers for its next calls without a `GET`, which is also how
    /// late a ban started or lifted through another service can take effect here.
    pub ban_state_cache_ms: u64,
    pub limiter: LimiterSettings,
    /// `USE_PROMETHEUS` + `PROMETHEUS_ADDR` + `PROMETHEUS_PATH`: an extra metrics listener
    /// (metrics are always on the debug listener at `/metrics` too).
    pub prometheus: Option<(SocketAddr, String)>,
}

impl Default for Settings {
    fn default() -> Self {
        match Settings::from_env_map(&HashMap::new()) {
            Ok(s) => s,
            // The defaults are constants; this arm is unreachable but must not panic.
            Err(_) => Settings::loopback_for_tests(ConfigSource::Paths(Vec::new())),
        }
    }
}

/// All problems found in the environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SettingsErrors(pub Vec<String>);

impl fmt::Display for SettingsErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid settings: {}", self.0.join("; "))
    }
}

/// Reads typed variables, remembering every error.
struct Env<'a> {
    vars: &'a HashMap<String, String>,
    errors: Vec<String>,
}

impl<'a> Env<'a> {
    fn raw(&self, name: &str) -> Option<&'a str> {
        self.vars.get(name).map(String::as_str)
    }

    fn string(&self, name: &str, default: &str) -> String {
        self.raw(name).unwrap_or(default).to_owned()
    }

    fn bool(&mut self, name: &str, default: bool) -> bool {
        match self.raw(name) {
            None | Some("") => default,
            Some(v) => match parse_go_bool(v) {
                Some(b) => b,
                None => {
                    self.errors.push(format!("{name}: invalid boolean '{v}'"));
                    default
                }
            },
        }
    }

    fn num<T: std::str::FromStr>(&mut self, name: &str, default: T) -> T {
        match self.raw(name) {
            None | Some("") => default,
            Some(v) => match v.trim().parse() {
                Ok(n) => n,
                Err(_) => {
                    self.errors.push(format!("{name}: invalid number '{v}'"));
                    default
                }
            },
        }
    }

    fn duration(&mut self, name: &str, default: Duration) -> Duration {
        match self.raw(name) {
            None | Some("") => default,
            Some(v) => match parse_go_duration(v) {
                Some(d) => d,
                None => {
                    self.errors.push(format!(
                        "{name}: invalid duration '{v}' (e.g. 10s, 500ms, 1m30s)"
                    ));
                    default
                }
            },
        }
    }

    fn addr(&mut self, host_var: &str, port_var: &str, default_port: u16) -> SocketAddr {
        let host = self.string(host_var, "0.0.0.0");
        let port = self.num(port_var, default_port);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match host.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, port),
            Err(_) if host == "localhost" => SocketAddr::from(([127, 0, 0, 1], port)),
            Err(_) => {
                self.errors
                    .push(format!("{host_var}: '{host}' is not an IP address"));
                SocketAddr::from(([0, 0, 0, 0], port))
            }
        }
    }

    fn redis(&mut self, prefix: &str, defaults: &RedisSettings) -> RedisSettings {
        let redis_type = match self
            .string(&format!("{prefix}_TYPE"), "single")
            .to_ascii_lowercase()
            .as_str()
        {
            "single" | "" => RedisType::Single,
            "cluster" => RedisType::Cluster,
            "sentinel" => RedisType::Sentinel,
            other => {
                self.errors.push(format!(
                    "{prefix}_TYPE: unknown type '{other}' (single, sentinel or cluster)"
                ));
                RedisType::Single
            }
        };
        let socket_type = self.string(&format!("{prefix}_SOCKET_TYPE"), &defaults.socket_type);
        if !matches!(socket_type.to_ascii_lowercase().as_str(), "tcp" | "unix") {
            self.errors.push(format!(
                "{prefix}_SOCKET_TYPE: '{socket_type}' (want tcp or unix)"
            ));
        }
        // The certificate files are shared by both clients, as in the reference.
        let tls = self.bool(&format!("{prefix}_TLS"), false).then(|| {
            let path = |name: &str| self.raw(name).filter(|p| !p.is_empty()).map(PathBuf::from);
            RedisTls {
                ca_cert: path("REDIS_TLS_CACERT"),
                client_cert: path("REDIS_TLS_CLIENT_CERT"),
                client_key: path("REDIS_TLS_CLIENT_KEY"),
                skip_hostname_verification: false,
            }
        });
        let tls = tls.map(|t| RedisTls {
            skip_hostname_verification: self.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false),
            ..t
        });
        let nonempty = |name: String| self.raw(&name).filter(|a| !a.is_empty()).map(str::to_owned);
        RedisSettings {
            socket_type,
            url: self.string(&format!("{prefix}_URL"), &defaults.url),
            redis_type,
            auth: nonempty(format!("{prefix}_AUTH")),
            sentinel_auth: nonempty(format!("{prefix}_SENTINEL_AUTH")),
            tls,
            pool_size: self.num(&format!("{prefix}_POOL_SIZE"), defaults.pool_size),
            timeout: self.duration(&format!("{prefix}_TIMEOUT"), defaults.timeout),
        }
    }
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(text: &str) -> Option<bool> {
    match text.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `time.ParseDuration` for the forms people write: `10s`, `500ms`, `1m30s`, `1.5h`, `0`.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    warden_config::parse_duration(text).ok()
}

impl Settings {
    /// From the process environment.
    pub fn from_env() -> Result<Settings, SettingsErrors> {
        Settings::from_env_map(&std::env::vars().collect())
    }

    /// From a map of variables (tests pass their own).
    pub fn from_env_map(vars: &HashMap<String, String>) -> Result<Settings, SettingsErrors> {
        let mut env = Env {
            vars,
            errors: Vec::new(),
        };
        let http_addr = env.addr("HOST", "PORT", 8080);
        let grpc_addr = env.addr("GRPC_HOST", "GRPC_PORT", 8081);
        let debug_addr = env.addr("DEBUG_HOST", "DEBUG_PORT", 6070);
        let grpc_max_connection_age =
            env.duration("GRPC_MAX_CONNECTION_AGE", Duration::from_secs(24 * 3600));
        let grpc_max_connection_age_grace =
            env.duration("GRPC_MAX_CONNECTION_AGE_GRACE", Duration::from_secs(3600));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let grpc_threads = env.num("GRPC_THREADS", cores);
        if grpc_threads == 0 {
            env.errors.push("GRPC_THREADS: must be at least 1".into());
        }
        let grpc_uds = env
            .raw("GRPC_UDS")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let grpc_tls = if env.bool("GRPC_SERVER_USE_TLS", false) {
            let path = |name: &str| env.raw(name).filter(|p| !p.is_empty()).map(PathBuf::from);
            let (cert, key) = (path("GRPC_SERVER_TLS_CERT"), path("GRPC_SERVER_TLS_KEY"));
            let client_ca = path("GRPC_CLIENT_TLS_CACERT");
            let client_san = env
                .raw("GRPC_CLIENT_TLS_SAN")
                .filter(|s| !s.is_empty())
                .map(str::to_owned);
            match (cert, key) {
                (Some(cert), Some(key)) => Some(GrpcTlsSettings {
                    cert,
                    key,
                    client_ca,
                    client_san,
                }),
                _ => {
                    env.errors.push(
                        "GRPC_SERVER_USE_TLS: needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"
                            .into(),
                    );
                    None
                }
            }
        } else {
            None
        };
        let log_level = env.string("LOG_LEVEL", "WARN");
        let log_format = env.string("LOG_FORMAT", "text").to_ascii_lowercase();
        if !matches!(log_format.as_str(), "text" | "json") {
            env.errors
                .push(format!("LOG_FORMAT: '{log_format}' (want text or json)"));
        }

        let config_type = env.string("CONFIG_TYPE", "FILE");
        if !config_type.eq_ignore_ascii_case("FILE") {
            env.errors.push(format!(
                "CONFIG_TYPE: '{config_type}' is not supported (only FILE)"
            ));
        }
        let config_source = ConfigSource::Runtime {
            root: PathBuf::from(env.string("RUNTIME_ROOT", "/srv/runtime_data/current")),
            subdirectory: env.string("RUNTIME_SUBDIRECTORY", ""),
            app_directory: env.string("RUNTIME_APPDIRECTORY", "config"),
            watch_root: env.bool("RUNTIME_WATCH_ROOT", true),
            ignore_dotfiles: env.bool("RUNTIME_IGNOREDOTFILES", false),
        };
        let merge_domain_config = env.bool("MERGE_DOMAIN_CONFIG", false);
        let healthy_with_at_least_one_config_loaded =
            env.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false);
        let config_poll_interval = env.duration("RUNTIME_POLL_INTERVAL", Duration::from_secs(1));

        let redis = env.redis("REDIS", &RedisSettings::default());
        let redis_per_second = if env.bool("REDIS_PERSECOND", false) {
            Some(env.redis("REDIS_PERSECOND", &redis))
        } else {
            None
        };
        let redis_configured = ["REDIS_URL", "REDIS_SOCKET_TYPE", "REDIS_TYPE"]
            .iter()
            .any(|v| env.raw(v).is_some_and(|x| !x.is_empty()));
        let backend = match env
            .raw("BACKEND_TYPE")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("") => {
                if redis_configured {
                    Backend::Redis
                } else {
                    Backend::Memory
                }
            }
            Some("redis") => Backend::Redis,
            Some("memory") => Backend::Memory,
            Some(other) => {
                env.errors.push(format!(
                    "BACKEND_TYPE: '{other}' is not supported (redis or memory)"
                ));
                Backend::Memory
            }
        };

        let default_algorithm = match env.raw("RATE_LIMIT_ALGORITHM") {
            None | Some("") => Algorithm::FixedWindow,
            Some(v) => Algorithm::parse(v).unwrap_or_else(|| {
                env.errors.push(format!(
                    "RATE_LIMIT_ALGORITHM: '{v}' (want fixed_window or sliding_window)"
                ));
                Algorithm::FixedWindow
            }),
        };
        let response_headers =
            env.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false)
                .then(|| ResponseHeaderNames {
                    limit: env.string("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
                    remaining: env.string("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
                    reset: env.string("LIMIT_RESET_HEADER", "RateLimit-Reset"),
                });
        let near_limit_ratio: f32 = env.num("NEAR_LIMIT_RATIO", 0.8);
        if !(0.0..=1.0).contains(&near_limit_ratio) {
            env.errors.push(format!(
                "NEAR_LIMIT_RATIO: {near_limit_ratio} is not in [0, 1]"
            ));
        }
        let ban_state_cache_ms = env.num("BAN_STATE_CACHE_MS", DEFAULT_BAN_STATE_CACHE_MS);
        let limiter = LimiterSettings {
            cache_key_prefix: env.string("CACHE_KEY_PREFIX", ""),
            expiration_jitter_max_seconds: env.num("EXPIRATION_JITTER_MAX_SECONDS", 300),
            near_limit_ratio,
            local_cache_size_in_bytes: env.num("LOCAL_CACHE_SIZE_IN_BYTES", 0),
            shadow_mode: env.bool("SHADOW_MODE", false),
            quota_mode: env.bool("QUOTA_MODE", false),
            stop_increment_when_overlimit: env
                .bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false),
            default_algorithm,
            response_headers,
            memory_max_keys: env.num("MEMORY_MAX_KEYS", 1_000_000),
            lease: LeasePolicy {
                fraction: env.num("QUOTA_LEASE_FRACTION", LeasePolicy::SERVER_DEFAULT.fraction),
                max: env.num("QUOTA_LEASE_MAX", LeasePolicy::SERVER_DEFAULT.max),
            },
            response_dynamic_metadata: env.bool("RESPONSE_DYNAMIC_METADATA", false),
        };
        if !(0.0..=1.0).contains(&limiter.lease.fraction) {
            env.errors.push(format!(
                "QUOTA_LEASE_FRACTION: {} is not in [0, 1]",
                limiter.lease.fraction
            ));
        }

        let prometheus = if env.bool("USE_PROMETHEUS", false) {
            let addr_text = env.string("PROMETHEUS_ADDR", ":9090");
            let addr = parse_listen_addr(&addr_text).unwrap_or_else(|| {
                env.errors
                    .push(format!("PROMETHEUS_ADDR: invalid address '{addr_text}'"));
                SocketAddr::from(([0, 0, 0, 0], 9090))
            });
            Some((addr, env.string("PROMETHEUS_PATH", "/metrics")))
        } else {
            None
        };
        // Accepted for drop-in compatibility; statsd sinks are not implemented (metrics are
        // served for Prometheus instead).
        let _ = env.bool("USE_STATSD", true);
        let _ = env.bool("USE_DOG_STATSD", false);

        if env.errors.is_empty() {
            Ok(Settings {
                http_addr,
                grpc_addr,
                debug_addr,
                grpc_max_connection_age,
                grpc_max_connection_age_grace,
                grpc_uds,
                grpc_tls,
                grpc_threads,
                log_level,
                log_format,
                config_source,
                merge_domain_config,
                config_poll_interval,
                backend,
                redis,
                redis_per_second,
                health_probe_interval: Duration::from_millis(500),
                healthy_with_at_least_one_config_loaded,
                ban_state_cache_ms,
                limiter,
                prometheus,
            })
        } else {
            Err(SettingsErrors(env.errors))
        }
    }

    /// Loopback listeners on port 0 and the memory backend: what tests and in-process users
    /// start from.
    pub fn loopback_for_tests(config_source: ConfigSource) -> Settings {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        Settings {
            http_addr: any,
            grpc_addr: any,
            debug_addr: any,
            grpc_max_connection_age: Duration::from_secs(24 * 3600),
            grpc_max_connection_age_grace: Duration::from_secs(3600),
            grpc_uds: None,
            grpc_tls: None,
            // More than one, so that tests cross threads even on a one-core machine.
            grpc_threads: 2,
            log_level: "WARN".into(),
            log_format: "text".into(),
            config_source,
            merge_domain_config: false,
            config_poll_interval: Duration::from_millis(50),
            backend: Backend::Memory,
            redis: RedisSettings::default(),
            redis_per_second: None,
            health_probe_interval: Duration::from_millis(100),
            healthy_with_at_least_one_config_loaded: false,
            ban_state_cache_ms: DEFAULT_BAN_STATE_CACHE_MS,
            limiter: LimiterSettings::default(),
            prometheus: None,
        }
    }
}

/// `host:port` or Go's `:port`.
pub fn parse_listen_addr(text: &str) -> Option<SocketAddr> {
    if let Some(port) = text.strip_prefix(':') {
        return Some(SocketAddr::from(([0, 0, 0, 0], port.parse().ok()?)));
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_seed_deployment_env_block_works_as_written() {
        let s = Settings::from_env_map(&vars(&[
            ("LOG_LEVEL", "debug"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis:6379"),
            ("USE_STATSD", "false"),
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
            ("HOST", "::"),
            ("GRPC_HOST", "::"),
        ]))
        .expect("seed env");
        assert_eq!(s.http_addr, "[::]:8080".parse().unwrap());
        assert_eq!(s.grpc_addr, "[::]:8081".parse().unwrap());
        assert_eq!(s.debug_addr, "0.0.0.0:6070".parse().unwrap());
        assert_eq!(s.backend, Backend::Redis);
        assert_eq!(s.redis.url, "redis:6379");
        assert_eq!(s.redis.socket_type, "tcp");
        assert_eq!(
            s.config_source,
            ConfigSource::Runtime {
                root: "/data".into(),
                subdirectory: "ratelimit".into(),
                app_directory: "config".into(),
                watch_root: false,
                ignore_dotfiles: true,
            }
        );
    }

    #[test]
    fn defaults_are_the_reference_defaults() {
        let s = Settings::from_env_map(&HashMap::new()).expect("defaults");
        assert_eq!(s.backend, Backend::Memory);
        assert_eq!(s.redis.pool_size, 10);
        assert_eq!(s.redis.timeout, Duration::from_secs(10));
        assert_eq!(s.limiter.expiration_jitter_max_seconds, 300);
        assert_eq!(s.limiter.near_limit_ratio, 0.8);
        assert!(s.limiter.response_headers.is_none());
    }

    #[test]
    fn every_error_is_reported_at_once() {
        let err = Settings::from_env_map(&vars(&[
            ("PORT", "eighty"),
            ("REDIS_TIMEOUT", "soon"),
            ("SHADOW_MODE", "maybe"),
            ("REDIS_TYPE", "ring"),
        ]))
        .unwrap_err();
        assert_eq!(err.0.len(), 4, "{err}");
        let text = err.to_string();
        for var in ["PORT", "REDIS_TIMEOUT", "SHADOW_MODE", "REDIS_TYPE"] {
            assert!(text.contains(var), "{text}");
        }
    }

    #[test]
    fn quota_leases_are_tuned_or_turned_off_by_env() {
        let s = Settings::from_env_map(&HashMap::new()).expect("defaults");
        assert_eq!(s.limiter.lease, LeasePolicy::SERVER_DEFAULT);
        let s = Settings::from_env_map(&vars(&[
            ("QUOTA_LEASE_FRACTION", "0"),
            ("QUOTA_LEASE_MAX", "50"),
        ]))
        .expect("leases off");
        assert_eq!(s.limiter.lease.size_for(u32::MAX), 0);
        assert_eq!(s.limiter.lease.max, 50);
        let err = Settings::from_env_map(&vars(&[
            ("QUOTA_LEASE_FRACTION", "1.5"),
            ("QUOTA_LEASE_MAX", "-1"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("QUOTA_LEASE_FRACTION: 1.5 is not in [0, 1]"),
            "{err}"
        );
        assert!(err.contains("QUOTA_LEASE_MAX"), "{err}");
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1x"), None);
    }
}
