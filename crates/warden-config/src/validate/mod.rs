//! Semantic validation after decoding: values, and references between documents.
//!
//! The contract towards the proxy: when a load returns `Ok`, every value it reads is valid, so
//! routes compile without re-validating. References are Istio's way: one that nothing defines
//! is a coded warning (`IST0101`...), not an error, and a route destination that dangles is
//! listed in [`crate::ConfigSet::dangling`] for the proxy to answer 503 for. One module per kind;
//! AuthorizationPolicy, RateLimitPolicy and EnvoyFilter are checked by the crates that compile
//! them (only their metadata is checked here).

mod destination_rule;
mod gateway;
mod metadata;
mod request_authentication;
mod service_entry;
mod virtual_service;

use crate::dangling::{DanglingReason, DanglingRef};
use crate::document::Doc;
use crate::error::{Code, Location, Problem};
use crate::field_path::FieldPath;
use crate::yaml_source::SourceLines;
use crate::ConfigSet;
use std::collections::BTreeSet;

/// Collects errors and warnings, locating each one in its document.
pub(crate) struct Report<'a> {
    lines: &'a SourceLines,
    errors: Vec<Problem>,
    warnings: Vec<Problem>,
    dangling: Vec<DanglingRef>,
}

impl<'a> Report<'a> {
    pub(crate) fn new(lines: &'a SourceLines) -> Self {
        Self {
            lines,
            errors: Vec::new(),
            warnings: Vec::new(),
            dangling: Vec::new(),
        }
    }

    pub(crate) fn into_parts(self) -> (Vec<Problem>, Vec<Problem>, Vec<DanglingRef>) {
        (self.errors, self.warnings, self.dangling)
    }

    fn locate<T>(&self, doc: &Doc<T>, path: &FieldPath) -> Location {
        let line = self.lines.line_of(&doc.file, doc.index, path);
        Location {
            file: doc.file.clone(),
            line,
            document: doc.index,
            object: doc.id(),
            field: path.to_string(),
        }
    }

    pub(crate) fn error<T>(&mut self, doc: &Doc<T>, path: &FieldPath, message: impl Into<String>) {
        let location = self.locate(doc, path);
        self.errors.push(Problem::new(location, message));
    }

    pub(crate) fn warn<T>(&mut self, doc: &Doc<T>, path: &FieldPath, message: impl Into<String>) {
        let location = self.locate(doc, path);
        self.warnings.push(Problem::new(location, message));
    }

    /// A warning with an analyzer code (Istio's where it has one).
    pub(crate) fn warn_coded<T>(
        &mut self,
        doc: &Doc<T>,
        path: &FieldPath,
        code: Code,
        message: impl Into<String>,
    ) {
        let location = self.locate(doc, path);
        self.warnings.push(Problem::coded(code, location, message));
    }

    /// A destination nothing defines: a coded warning, and the route noted for the proxy.
    /// `destination` is the destination's path, `at` the field the warning points at.
    pub(crate) fn dangling(
        &mut self,
        doc: &Doc<crate::VirtualService>,
        destination: &FieldPath,
        at: &FieldPath,
        host: &str,
        reason: DanglingReason,
        hint: Option<String>,
    ) {
        let dangling = DanglingRef::new(doc, destination, host, reason);
        let (code, mut message) = dangling.finding();
        if let Some(hint) = hint {
            message = format!("{message} ({hint})");
        }
        self.warn_coded(doc, at, code, message);
        self.dangling.push(dangling);
    }
}

/// Run every check over a decoded set. `failed_kinds` are kinds of which some document did not
/// decode; references to those kinds are not checked (the decode error already explains).
pub(crate) fn validate(set: &ConfigSet, failed_kinds: &BTreeSet<String>, report: &mut Report) {
    metadata::check(set, report);
    for doc in &set.gateways {
        gateway::check(doc, report);
    }
    gateway::check_port_conflicts(&set.gateways, report);
    // Those made from Kubernetes Services (kind `Service`) are the registry's, not the user's.
    for doc in set
        .service_entries
        .iter()
        .filter(|d| d.kind == "ServiceEntry")
    {
        service_entry::check(doc, report);
    }
    service_entry::check_duplicate_hosts(&set.service_entries, report);
    let refs = References {
        set,
        check_gateways: !failed_kinds.contains("Gateway"),
        check_service_entries: !failed_kinds.contains("ServiceEntry"),
        check_destination_rules: !failed_kinds.contains("DestinationRule"),
    };
    for doc in &set.virtual_services {
        virtual_service::check(doc, &refs, report);
    }
    for doc in &set.destination_rules {
        destination_rule::check(doc, &refs, report);
    }
    destination_rule::check_duplicate_hosts(&set.destination_rules, report);
    for doc in &set.peer_authentications {
        check_peer_authentication(doc, report);
    }
    for doc in &set.request_authentications {
        request_authentication::check(doc, report);
    }
}

/// Modes are UNSET, DISABLE, PERMISSIVE or STRICT; port keys are port numbers.
fn check_peer_authentication(
    doc: &Doc<crate::kinds::peer_authentication::PeerAuthentication>,
    report: &mut Report,
) {
    let modes = "UNSET, DISABLE, PERMISSIVE, STRICT";
    if let Some(m) = &doc.spec.mtls {
        if m.peer_mode().is_none() {
            report.error(
                doc,
                &spec().key("mtls").key("mode"),
                format!(
                    "unknown mode {:?} ({modes})",
                    m.mode.as_deref().unwrap_or_default()
                ),
            );
        }
    }
    for (port, m) in &doc.spec.port_level_mtls {
        let at = spec().key("portLevelMtls").key(port.clone());
        if !port.parse::<u16>().is_ok_and(|p| p != 0) {
            report.error(doc, &at, format!("{port:?} is not a port number"));
        }
        if m.peer_mode().is_none() {
            report.error(
                doc,
                &at.key("mode"),
                format!(
                    "unknown mode {:?} ({modes})",
                    m.mode.as_deref().unwrap_or_default()
                ),
            );
        }
    }
}

/// What cross-document checks may rely on.
pub(crate) struct References<'a> {
    pub set: &'a ConfigSet,
    pub check_gateways: bool,
    pub check_service_entries: bool,
    pub check_destination_rules: bool,
}

fn spec() -> FieldPath {
    FieldPath::keys(&["spec"])
}

/// `name: value` header names are HTTP tokens (RFC 9110), compared case-insensitively.
fn check_header_name(name: &str) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(format!("{name:?} is not a valid HTTP header name"));
    }
    Ok(())
}

/// A duration that must parse and be greater than zero (`name` is the field, for the message).
fn check_positive_duration<T>(
    doc: &Doc<T>,
    path: &FieldPath,
    name: &str,
    value: &str,
    report: &mut Report,
) {
    if check_duration(doc, path, value, report).is_some_and(|d| d.is_zero()) {
        report.error(doc, path, format!("{name} must be greater than 0"));
    }
}

/// Durations as Istio writes them (`5s`, `250ms`, `1m30s`).
fn check_duration<T>(
    doc: &Doc<T>,
    path: &FieldPath,
    value: &str,
    report: &mut Report,
) -> Option<std::time::Duration> {
    match crate::duration::parse_duration(value) {
        Ok(d) => Some(d),
        Err(e) => {
            report.error(doc, path, e);
            None
        }
    }
}
