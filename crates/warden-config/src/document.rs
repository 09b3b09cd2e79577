//! The Kubernetes envelope shared by every document: apiVersion, kind, metadata.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Set by the API server (RFC 3339); orders Gateway API routes of equal precedence.
    #[serde(default)]
    pub creation_timestamp: Option<String>,
}

impl Metadata {
    /// The namespace, `default` when unset (as kubectl would apply it).
    pub fn namespace_or_default(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }
}

/// One loaded document: where it came from, its envelope and its typed spec.
#[derive(Debug, Clone, Serialize)]
pub struct Doc<T> {
    /// File the document was read from (`<embedded>` for built-in configs).
    pub file: PathBuf,
    /// 1-based index of the document within its file.
    pub index: usize,
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: T,
}

impl<T> Doc<T> {
    /// `kind/name` as used in error messages and metrics.
    pub fn id(&self) -> String {
        format!("{}/{}", self.kind, self.metadata.name)
    }
}
