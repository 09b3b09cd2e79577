//! Route destinations that nothing in the load defines: Istio accepts them, `istioctl analyze`
//! warns (IST0101, IST0112), and Envoy answers 503 for that route only (its cluster does not
//! exist: response flag `NC`). The loader lists them so the proxy does the same without
//! re-resolving every reference.

use crate::code::Code;
use crate::document::Doc;
use crate::field_path::{FieldPath, Segment};
use crate::kinds::virtual_service::VirtualService;
use std::path::PathBuf;

/// Which list of a VirtualService a route is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum RouteSection {
    Http,
    Tcp,
    Tls,
}

/// Which destination of a route dangles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum DestinationSlot {
    /// `route[i].destination`
    Route(usize),
    /// `mirror`
    Mirror,
    /// `mirrors[i].destination`
    Mirrors(usize),
}

/// Why a destination dangles.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum DanglingReason {
    /// No ServiceEntry or Kubernetes Service defines the host.
    Host,
    /// The host's DestinationRule (if any) has no such subset.
    Subset(String),
    /// The service has no such port.
    Port(u16),
    /// The service has several ports and the destination names none.
    PortRequired(Vec<u16>),
}

/// One dangling destination of a VirtualService.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DanglingRef {
    /// The VirtualService's document.
    pub file: PathBuf,
    pub document: usize,
    pub namespace: String,
    pub name: String,
    /// The destination's path, e.g. `spec.http[0].route[1].destination`.
    pub field: String,
    pub section: RouteSection,
    /// Index of the route in its section.
    pub route: usize,
    pub slot: DestinationSlot,
    pub host: String,
    pub reason: DanglingReason,
}

impl DanglingRef {
    pub(crate) fn new(
        doc: &Doc<VirtualService>,
        destination: &FieldPath,
        host: &str,
        reason: DanglingReason,
    ) -> Self {
        let (section, route, slot) = route_of(destination);
        Self {
            file: doc.file.clone(),
            document: doc.index,
            namespace: doc.metadata.namespace_or_default().to_owned(),
            name: doc.metadata.name.clone(),
            field: destination.to_string(),
            section,
            route,
            slot,
            host: host.to_owned(),
            reason,
        }
    }

    /// Istio's analyzer code and message for this finding.
    pub fn finding(&self) -> (Code, String) {
        let host = &self.host;
        let reftype = match (&self.reason, self.slot) {
            (DanglingReason::Host, DestinationSlot::Route(_)) => "host",
            (DanglingReason::Host, _) => "mirror host",
            _ => "",
        };
        match &self.reason {
            DanglingReason::Host => (
                Code::ReferencedResourceNotFound,
                format!("Referenced {reftype} not found: {host:?}"),
            ),
            DanglingReason::Subset(subset) => (
                Code::ReferencedResourceNotFound,
                format!(
                    "Referenced host+subset in destinationrule not found: {:?}",
                    format!("{host}+{subset}")
                ),
            ),
            DanglingReason::Port(port) => (
                Code::ReferencedResourceNotFound,
                format!(
                    "Referenced host:port not found: {:?}",
                    format!("{host}:{port}")
                ),
            ),
            DanglingReason::PortRequired(ports) => {
                let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
                (
                    Code::VirtualServiceDestinationPortSelectorRequired,
                    format!(
                        "This VirtualService routes to a service {host:?} that exposes multiple \
                         ports [{}]. Specifying a port in the destination is required to \
                         disambiguate.",
                        ports.join(" ")
                    ),
                )
            }
        }
    }
}

/// Section, route index and slot of a destination path such as
/// `spec.http[2].route[1].destination` or `spec.http[0].mirror`.
fn route_of(path: &FieldPath) -> (RouteSection, usize, DestinationSlot) {
    let segs = path.segments();
    let key = |i: usize| match segs.get(i) {
        Some(Segment::Key(k)) => k.as_str(),
        _ => "",
    };
    let index = |i: usize| match segs.get(i) {
        Some(Segment::Index(n)) => *n,
        _ => 0,
    };
    let section = match key(1) {
        "tcp" => RouteSection::Tcp,
        "tls" => RouteSection::Tls,
        _ => RouteSection::Http,
    };
    let slot = match key(3) {
        "mirror" => DestinationSlot::Mirror,
        "mirrors" => DestinationSlot::Mirrors(index(4)),
        _ => DestinationSlot::Route(index(4)),
    };
    (section, index(2), slot)
}

impl crate::ConfigSet {
    /// The dangling destination at `field` (e.g. `spec.http[0].route[1].destination`) of `vs`,
    /// if it is one: the route answers 503 (Envoy's `NC`) instead of reaching an upstream.
    pub fn dangling_destination(
        &self,
        vs: &Doc<VirtualService>,
        field: &str,
    ) -> Option<&DanglingRef> {
        self.dangling
            .iter()
            .find(|d| d.file == vs.file && d.document == vs.index && d.field == field)
    }

    /// Every dangling destination of `vs`, in document order.
    pub fn dangling_of<'a>(
        &'a self,
        vs: &'a Doc<VirtualService>,
    ) -> impl Iterator<Item = &'a DanglingRef> + 'a {
        self.dangling
            .iter()
            .filter(move |d| d.file == vs.file && d.document == vs.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_paths_name_their_route() {
        let cases = [
            (
                "spec.http[2].route[1].destination",
                (RouteSection::Http, 2, DestinationSlot::Route(1)),
            ),
            (
                "spec.tcp[0].route[0].destination",
                (RouteSection::Tcp, 0, DestinationSlot::Route(0)),
            ),
            (
                "spec.tls[3].route[2].destination",
                (RouteSection::Tls, 3, DestinationSlot::Route(2)),
            ),
            (
                "spec.http[1].mirror",
                (RouteSection::Http, 1, DestinationSlot::Mirror),
            ),
            (
                "spec.http[1].mirrors[4].destination",
                (RouteSection::Http, 1, DestinationSlot::Mirrors(4)),
            ),
        ];
        for (path, want) in cases {
            assert_eq!(route_of(&FieldPath::parse(path)), want, "{path}");
        }
    }

    #[test]
    fn findings_use_istios_messages() {
        let doc = |reason, path: &str| DanglingRef {
            file: "f.yaml".into(),
            document: 1,
            namespace: "default".into(),
            name: "vs".into(),
            field: path.into(),
            section: RouteSection::Http,
            route: 0,
            slot: route_of(&FieldPath::parse(path)).2,
            host: "reviews".into(),
            reason,
        };
        let route = "spec.http[0].route[0].destination";
        let cases = [
            (
                doc(DanglingReason::Host, route),
                "IST0101",
                "Referenced host not found: \"reviews\"",
            ),
            (
                doc(DanglingReason::Host, "spec.http[0].mirror"),
                "IST0101",
                "Referenced mirror host not found: \"reviews\"",
            ),
            (
                doc(DanglingReason::Subset("v1".into()), route),
                "IST0101",
                "Referenced host+subset in destinationrule not found: \"reviews+v1\"",
            ),
            (
                doc(DanglingReason::Port(9090), route),
                "IST0101",
                "Referenced host:port not found: \"reviews:9090\"",
            ),
            (
                doc(DanglingReason::PortRequired(vec![9080, 9090]), route),
                "IST0112",
                "This VirtualService routes to a service \"reviews\" that exposes multiple \
                 ports [9080 9090]. Specifying a port in the destination is required to \
                 disambiguate.",
            ),
        ];
        for (d, code, message) in cases {
            let (c, m) = d.finding();
            assert_eq!((c.id(), m.as_str()), (code, message));
        }
    }
}
