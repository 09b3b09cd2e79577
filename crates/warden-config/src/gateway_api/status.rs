//! Status conditions the way a Gateway API controller sets them (`Accepted`, `ResolvedRefs`,
//! `Programmed`, `Conflicted`, with the spec's reasons), kept so `warden check` can print why
//! a route is or is not attached.

use serde::Serialize;
use std::fmt::Write;
use std::path::PathBuf;

/// One condition: type, status, reason and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Condition {
    pub fn yes(kind: &'static str, reason: &'static str) -> Self {
        Condition {
            kind,
            status: true,
            reason,
            message: String::new(),
        }
    }

    pub fn no(kind: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Condition {
            kind,
            status: false,
            reason,
            message: message.into(),
        }
    }
}

/// A section of an object's status: a Gateway's listener, a route's parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SectionStatus {
    /// `listener http`, `parent infra-ns/shared-gateway (section https)`.
    pub name: String,
    pub conditions: Vec<Condition>,
}

/// The status of one GatewayClass, Gateway or route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectStatus {
    /// `HTTPRoute`, `Gateway`...
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub file: PathBuf,
    pub document: usize,
    /// The object's own conditions (Gateway, GatewayClass).
    pub conditions: Vec<Condition>,
    pub sections: Vec<SectionStatus>,
}

impl ObjectStatus {
    /// Whether every condition reads as healthy (`Conflicted` is healthy when false).
    pub fn healthy(&self) -> bool {
        self.conditions
            .iter()
            .chain(self.sections.iter().flat_map(|s| &s.conditions))
            .all(|c| c.status != (c.kind == "Conflicted"))
    }

    /// Lines for `warden check`.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "  {} {}/{} ({} document {}){}",
            self.kind,
            self.namespace,
            self.name,
            self.file.display(),
            self.document,
            describe_conditions(&self.conditions, ": ")
        );
        out.push('\n');
        for s in &self.sections {
            let _ = writeln!(
                out,
                "    {}{}",
                s.name,
                describe_conditions(&s.conditions, ": ")
            );
        }
        out
    }
}

fn describe_conditions(conditions: &[Condition], lead: &str) -> String {
    if conditions.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = conditions
        .iter()
        .map(|c| {
            let status = if c.status { "True" } else { "False" };
            match c.message.is_empty() {
                true => format!("{}={status} ({})", c.kind, c.reason),
                false => format!("{}={status} ({}: {})", c.kind, c.reason, c.message),
            }
        })
        .collect();
    format!("{lead}{}", parts.join(", "))
}

/// Why a route is not attached to a parent (the `Accepted` condition's reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No Gateway of that name, or no listener of that sectionName/port.
    NoMatchingParent(String),
    /// Listeners exist, but none admits the route's kind or namespace.
    NotAllowedByListeners(String),
    /// Admitted, but no hostname of the route intersects a listener's.
    NoMatchingListenerHostname(String),
    /// A field warden (like Istio) does not implement: an ExtensionRef filter...
    UnsupportedValue(String),
}

impl Refusal {
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NoMatchingParent(_) => "NoMatchingParent",
            Refusal::NotAllowedByListeners(_) => "NotAllowedByListeners",
            Refusal::NoMatchingListenerHostname(_) => "NoMatchingListenerHostname",
            Refusal::UnsupportedValue(_) => "UnsupportedValue",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Refusal::NoMatchingParent(m)
            | Refusal::NotAllowedByListeners(m)
            | Refusal::NoMatchingListenerHostname(m)
            | Refusal::UnsupportedValue(m) => m,
        }
    }
}

/// A backend or mirror reference that does not resolve (the `ResolvedRefs` reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefProblem {
    /// Another namespace, and no ReferenceGrant there allows it.
    RefNotPermitted(String),
    /// A kind warden cannot route to.
    InvalidKind(String),
    /// A Service (or host) nothing in the config defines.
    BackendNotFound(String),
}

impl RefProblem {
    pub fn reason(&self) -> &'static str {
        match self {
            RefProblem::RefNotPermitted(_) => "RefNotPermitted",
            RefProblem::InvalidKind(_) => "InvalidKind",
            RefProblem::BackendNotFound(_) => "BackendNotFound",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            RefProblem::RefNotPermitted(m)
            | RefProblem::InvalidKind(m)
            | RefProblem::BackendNotFound(m) => m,
        }
    }
}

/// A route parent's conditions: `Accepted` from the attachment, `ResolvedRefs` from the
/// route's references (the first problem names the reason, as controllers report one).
pub fn route_parent(attached: Result<(), &Refusal>, refs: &[RefProblem]) -> Vec<Condition> {
    let accepted = match attached {
        Ok(()) => Condition::yes("Accepted", "Accepted"),
        Err(r) => Condition::no("Accepted", r.reason(), r.message()),
    };
    let resolved = match refs.first() {
        None => Condition::yes("ResolvedRefs", "ResolvedRefs"),
        Some(p) => {
            let all: Vec<&str> = refs.iter().map(RefProblem::message).collect();
            Condition::no("ResolvedRefs", p.reason(), all.join("; "))
        }
    };
    vec![accepted, resolved]
}

/// What is wrong with one listener, if anything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListenerFindings {
    /// `UnsupportedProtocol`, `PortUnavailable`: the listener is not served.
    pub not_accepted: Option<(&'static str, String)>,
    /// `HostnameConflict`, `ProtocolConflict`: not served either.
    pub conflicted: Option<(&'static str, String)>,
    /// `InvalidCertificateRef`, `RefNotPermitted`, `InvalidRouteKinds`.
    pub unresolved: Option<(&'static str, String)>,
    /// Routes attached to it.
    pub attached_routes: usize,
}

impl ListenerFindings {
    /// Whether the listener is served (programmed) at all.
    pub fn programmed(&self) -> bool {
        self.not_accepted.is_none()
            && self.conflicted.is_none()
            && !matches!(self.unresolved, Some((r, _)) if r != "InvalidRouteKinds")
    }

    /// The listener's conditions.
    pub fn conditions(&self) -> Vec<Condition> {
        let accepted = match &self.not_accepted {
            None => Condition::yes("Accepted", "Accepted"),
            Some((reason, m)) => Condition::no("Accepted", reason, m.clone()),
        };
        let resolved = match &self.unresolved {
            None => Condition::yes("ResolvedRefs", "ResolvedRefs"),
            Some((reason, m)) => Condition::no("ResolvedRefs", reason, m.clone()),
        };
        let conflicted = match &self.conflicted {
            None => Condition::no("Conflicted", "NoConflicts", ""),
            Some((reason, m)) => Condition {
                kind: "Conflicted",
                status: true,
                reason,
                message: m.clone(),
            },
        };
        let programmed = match self.programmed() {
            true => Condition::yes("Programmed", "Programmed"),
            false => Condition::no("Programmed", "Invalid", "the listener is not served"),
        };
        vec![accepted, resolved, conflicted, programmed]
    }
}

/// A Gateway's own conditions from its listeners': accepted when any listener is, programmed
/// when every accepted listener is.
pub fn gateway(listeners: &[ListenerFindings]) -> Vec<Condition> {
    let served = listeners.iter().filter(|l| l.programmed()).count();
    let accepted = if listeners.is_empty() || served > 0 {
        Condition::yes("Accepted", "Accepted")
    } else {
        Condition::no("Accepted", "ListenersNotValid", "no listener is valid")
    };
    let programmed = if served == listeners.len() {
        Condition::yes("Programmed", "Programmed")
    } else {
        Condition::no(
            "Programmed",
            "Invalid",
            format!("{} of {} listeners are served", served, listeners.len()),
        )
    };
    vec![accepted, programmed]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brief(cs: &[Condition]) -> Vec<String> {
        cs.iter()
            .map(|c| format!("{}={}/{}", c.kind, c.status, c.reason))
            .collect()
    }

    #[test]
    fn route_parent_conditions_name_the_first_problem() {
        type Case = (Result<(), Refusal>, Vec<RefProblem>, [&'static str; 2]);
        let cases: [Case; 6] = [
            (
                Ok(()),
                vec![],
                ["Accepted=true/Accepted", "ResolvedRefs=true/ResolvedRefs"],
            ),
            (
                Err(Refusal::NotAllowedByListeners("ns".into())),
                vec![],
                [
                    "Accepted=false/NotAllowedByListeners",
                    "ResolvedRefs=true/ResolvedRefs",
                ],
            ),
            (
                Err(Refusal::NoMatchingListenerHostname("h".into())),
                vec![],
                [
                    "Accepted=false/NoMatchingListenerHostname",
                    "ResolvedRefs=true/ResolvedRefs",
                ],
            ),
            (
                Err(Refusal::NoMatchingParent("p".into())),
                vec![],
                [
                    "Accepted=false/NoMatchingParent",
                    "ResolvedRefs=true/ResolvedRefs",
                ],
            ),
            (
                Ok(()),
                vec![
                    RefProblem::RefNotPermitted("a".into()),
                    RefProblem::BackendNotFound("b".into()),
                ],
                [
                    "Accepted=true/Accepted",
                    "ResolvedRefs=false/RefNotPermitted",
                ],
            ),
            (
                Ok(()),
                vec![RefProblem::InvalidKind("k".into())],
                ["Accepted=true/Accepted", "ResolvedRefs=false/InvalidKind"],
            ),
        ];
        for (attached, refs, want) in cases {
            let got = route_parent(attached.as_ref().map(|_| ()), &refs);
            assert_eq!(brief(&got), want);
        }
    }

    #[test]
    fn listener_and_gateway_conditions() {
        let ok = ListenerFindings::default();
        assert_eq!(
            brief(&ok.conditions()),
            [
                "Accepted=true/Accepted",
                "ResolvedRefs=true/ResolvedRefs",
                "Conflicted=false/NoConflicts",
                "Programmed=true/Programmed"
            ]
        );
        let udp = ListenerFindings {
            not_accepted: Some(("UnsupportedProtocol", "UDP".into())),
            ..ListenerFindings::default()
        };
        let cert = ListenerFindings {
            unresolved: Some(("RefNotPermitted", "secret".into())),
            ..ListenerFindings::default()
        };
        let kinds = ListenerFindings {
            unresolved: Some(("InvalidRouteKinds", "UDPRoute".into())),
            ..ListenerFindings::default()
        };
        let conflict = ListenerFindings {
            conflicted: Some(("ProtocolConflict", "80".into())),
            ..ListenerFindings::default()
        };
        assert!(!udp.programmed() && !cert.programmed() && !conflict.programmed());
        assert!(
            kinds.programmed(),
            "a listener with some invalid kinds still serves the rest"
        );
        assert_eq!(
            brief(&gateway(&[ok.clone(), udp.clone()])),
            ["Accepted=true/Accepted", "Programmed=false/Invalid"]
        );
        assert_eq!(
            brief(&gateway(&[udp, conflict])),
            [
                "Accepted=false/ListenersNotValid",
                "Programmed=false/Invalid"
            ]
        );
        assert_eq!(
            brief(&gateway(&[ok])),
            ["Accepted=true/Accepted", "Programmed=true/Programmed"]
        );
    }
}
