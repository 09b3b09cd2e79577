//! Reading multi-document YAML from files and directories into a [`ConfigSet`].

use crate::document::{Doc, Metadata};
use crate::error::{ConfigErrors, Location, Problem};
use crate::ConfigSet;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A successful load: the typed documents and the warnings (unsupported fields) found on the way.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub set: ConfigSet,
    pub warnings: Vec<Problem>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: serde_json::Value,
}

/// Load every path (files, or directories whose `*.yaml`/`*.yml` files are read in name order).
pub fn load_paths(paths: &[PathBuf]) -> Result<Loaded, ConfigErrors> {
    let mut loader = Loader::default();
    for path in paths {
        loader.add_path(path);
    }
    loader.finish()
}

/// Load YAML text as if read from `name` (used for embedded configs and tests).
pub fn load_str(name: &str, text: &str) -> Result<Loaded, ConfigErrors> {
    let mut loader = Loader::default();
    loader.add_text(Path::new(name), text);
    loader.finish()
}

#[derive(Default)]
struct Loader {
    loaded: Loaded,
    errors: Vec<Problem>,
}

impl Loader {
    fn add_path(&mut self, path: &Path) {
        if path.is_dir() {
            let entries = match std::fs::read_dir(path) {
                Ok(e) => e,
                Err(e) => return self.file_error(path, format!("cannot read directory: {e}")),
            };
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let hidden = p
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with('.'));
                    let yaml = matches!(
                        p.extension().and_then(|e| e.to_str()),
                        Some("yaml") | Some("yml")
                    );
                    yaml && !hidden && p.is_file()
                })
                .collect();
            files.sort();
            for f in files {
                self.add_path(&f);
            }
            return;
        }
        match std::fs::read_to_string(path) {
            Ok(text) => self.add_text(path, &text),
            Err(e) => self.file_error(path, format!("cannot read file: {e}")),
        }
    }

    fn file_error(&mut self, path: &Path, message: String) {
        self.errors.push(Problem {
            location: Location {
                file: path.to_path_buf(),
                document: 0,
                object: String::new(),
                field: String::new(),
            },
            message,
        });
    }

    fn add_text(&mut self, file: &Path, text: &str) {
        let options = serde_saphyr::options! { budget: None };
        let docs: Vec<serde_json::Value> =
            match serde_saphyr::from_multiple_with_options(text, options) {
                Ok(d) => d,
                Err(e) => return self.file_error(file, format!("invalid YAML: {e}")),
            };
        for (i, value) in docs.into_iter().enumerate() {
            self.add_document(file, i + 1, value);
        }
    }

    fn add_document(&mut self, file: &Path, index: usize, value: serde_json::Value) {
        let mut loc = Location {
            file: file.to_path_buf(),
            document: index,
            object: String::new(),
            field: String::new(),
        };
        let env: Envelope = match serde_path_to_error::deserialize(value) {
            Ok(env) => env,
            Err(e) => {
                loc.field = e.path().to_string();
                let message = e.into_inner().to_string();
                self.errors.push(Problem {
                    location: loc,
                    message,
                });
                return;
            }
        };
        loc.object = format!("{}/{}", env.kind, env.metadata.name);
        let group = env.api_version.split('/').next().unwrap_or("");
        let set = &mut self.loaded.set;
        macro_rules! typed {
            ($field:ident, $groups:expr) => {{
                if !$groups.contains(&group) {
                    self.errors.push(Problem {
                        location: Location {
                            field: "apiVersion".into(),
                            ..loc
                        },
                        message: format!(
                            "apiVersion {:?} is not one of the groups {:?} for kind {}",
                            env.api_version, $groups, env.kind
                        ),
                    });
                    return;
                }
                if let Some(spec) =
                    decode(env.spec, &loc, &mut self.errors, &mut self.loaded.warnings)
                {
                    set.$field.push(Doc {
                        file: file.to_path_buf(),
                        index,
                        api_version: env.api_version,
                        kind: env.kind,
                        metadata: env.metadata,
                        spec,
                    });
                }
            }};
        }
        const ISTIO_NET: &[&str] = &["networking.istio.io"];
        match env.kind.as_str() {
            "Gateway" => typed!(gateways, ISTIO_NET),
            "VirtualService" => typed!(virtual_services, ISTIO_NET),
            "ServiceEntry" => typed!(service_entries, ISTIO_NET),
            "DestinationRule" => typed!(destination_rules, ISTIO_NET),
            "EnvoyFilter" => typed!(envoy_filters, ISTIO_NET),
            "AuthorizationPolicy" => typed!(authorization_policies, &["security.istio.io"]),
            "RateLimitPolicy" => typed!(rate_limit_policies, &["warden.dev"]),
            "" => self.errors.push(Problem {
                location: Location {
                    field: "kind".into(),
                    ..loc
                },
                message: "missing kind".into(),
            }),
            other => self.errors.push(Problem {
                location: Location {
                    field: "kind".into(),
                    ..loc
                },
                message: format!(
                    "unknown kind {other:?} (supported: Gateway, VirtualService, ServiceEntry, \
                     DestinationRule, AuthorizationPolicy, EnvoyFilter, RateLimitPolicy)"
                ),
            }),
        }
    }

    fn finish(self) -> Result<Loaded, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(self.loaded)
        } else {
            Err(ConfigErrors(self.errors))
        }
    }
}

/// Deserialize a spec, recording a warning per ignored (unsupported) field and an error with the
/// field path on a type mismatch.
fn decode<T: DeserializeOwned>(
    spec: serde_json::Value,
    loc: &Location,
    errors: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) -> Option<T> {
    let spec = if spec.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        spec
    };
    let mut ignored = Vec::new();
    let mut record = |path: serde_ignored::Path<'_>| ignored.push(path.to_string());
    let de = serde_ignored::Deserializer::new(spec, &mut record);
    let result: Result<T, _> = serde_path_to_error::deserialize(de);
    for path in ignored {
        warnings.push(Problem {
            location: Location {
                field: format!("spec.{path}"),
                ..loc.clone()
            },
            message: "field not supported by warden; ignored".into(),
        });
    }
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            let path = e.path().to_string();
            errors.push(Problem {
                location: Location {
                    field: if path == "." {
                        "spec".into()
                    } else {
                        format!("spec.{path}")
                    },
                    ..loc.clone()
                },
                message: e.into_inner().to_string(),
            });
            None
        }
    }
}
