//! Machine-readable codes of findings, so tools can act on a kind of finding without parsing
//! its text: `warden check --strict` fails on coded warnings, the snapshot builder finds the
//! routes whose destination is missing.
//!
//! Where Istio's analyzers (`istioctl analyze`) have a message for a finding, warden uses its
//! code, name and wording (istio/istio `pkg/config/analysis/msg/messages.yaml`); the rest are
//! warden's own, numbered `WDN…`.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// IST0101: a host, subset, port or gateway that no loaded document defines.
    ReferencedResourceNotFound,
    /// IST0112: a route to a service with several ports that names none.
    VirtualServiceDestinationPortSelectorRequired,
    /// IST0132: a VirtualService bound to a Gateway that serves none of its hosts.
    VirtualServiceHostNotFoundInGateway,
    /// A document replaced by a later file's document of the same kind/namespace/name.
    DocumentReplaced,
    /// Twice the same kind/namespace/name in one file.
    DuplicateInFile,
    /// A kind that cannot change what a request gets (Deployment, ConfigMap...), not read.
    KindIgnored,
    /// A kind that changes what requests get and that warden does not implement.
    KindNotSupported,
    /// A kind warden refuses, skipped because the load's skip list names it.
    KindSkipped,
    /// A kind name nobody defines (often a case or spelling mistake).
    UnknownKind,
    /// A field that is not in the schema at its place (often a spelling mistake).
    UnknownField,
    /// An Istio field warden does not implement.
    FieldNotSupported,
    /// A symbolic link in a config folder whose target does not exist.
    DanglingSymlink,
    /// YAML whose aliases would expand far beyond the size of its file.
    YamlExpansionLimit,
    /// An EnvoyFilter patch that matches nothing on this proxy: Istio ignores it (not applied).
    /// Found by the proxy, which knows its routes; the code is here so all codes are in one list.
    EnvoyFilterPatchUnmatched,
}

impl Code {
    /// Every code, for documentation and tests.
    pub const ALL: &'static [Code] = &[
        Code::ReferencedResourceNotFound,
        Code::VirtualServiceDestinationPortSelectorRequired,
        Code::VirtualServiceHostNotFoundInGateway,
        Code::DocumentReplaced,
        Code::DuplicateInFile,
        Code::KindIgnored,
        Code::KindNotSupported,
        Code::KindSkipped,
        Code::UnknownKind,
        Code::UnknownField,
        Code::FieldNotSupported,
        Code::DanglingSymlink,
        Code::YamlExpansionLimit,
        Code::EnvoyFilterPatchUnmatched,
    ];

    /// `IST0101`, `WDN0001`...
    pub fn id(self) -> &'static str {
        match self {
            Code::ReferencedResourceNotFound => "IST0101",
            Code::VirtualServiceDestinationPortSelectorRequired => "IST0112",
            Code::VirtualServiceHostNotFoundInGateway => "IST0132",
            Code::DocumentReplaced => "WDN0001",
            Code::DuplicateInFile => "WDN0002",
            Code::KindIgnored => "WDN0003",
            Code::KindNotSupported => "WDN0004",
            Code::KindSkipped => "WDN0005",
            Code::UnknownKind => "WDN0006",
            Code::UnknownField => "WDN0007",
            Code::FieldNotSupported => "WDN0008",
            Code::DanglingSymlink => "WDN0009",
            Code::YamlExpansionLimit => "WDN0010",
            Code::EnvoyFilterPatchUnmatched => "WDN0011",
        }
    }

    /// The finding's name, as Istio names its analyzer messages.
    pub fn name(self) -> &'static str {
        match self {
            Code::ReferencedResourceNotFound => "ReferencedResourceNotFound",
            Code::VirtualServiceDestinationPortSelectorRequired => {
                "VirtualServiceDestinationPortSelectorRequired"
            }
            Code::VirtualServiceHostNotFoundInGateway => "VirtualServiceHostNotFoundInGateway",
            Code::DocumentReplaced => "DocumentReplaced",
            Code::DuplicateInFile => "DuplicateInFile",
            Code::KindIgnored => "KindIgnored",
            Code::KindNotSupported => "KindNotSupported",
            Code::KindSkipped => "KindSkipped",
            Code::UnknownKind => "UnknownKind",
            Code::UnknownField => "UnknownField",
            Code::FieldNotSupported => "FieldNotSupported",
            Code::DanglingSymlink => "DanglingSymlink",
            Code::YamlExpansionLimit => "YamlExpansionLimit",
            Code::EnvoyFilterPatchUnmatched => "EnvoyFilterPatchUnmatched",
        }
    }

    /// The code for `id` (`IST0101`), for `--strict`-style filters given on a command line.
    pub fn from_id(id: &str) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| c.id() == id)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl serde::Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for code in Code::ALL {
            assert!(seen.insert(code.id()), "{} twice", code.id());
            assert_eq!(Code::from_id(code.id()), Some(*code));
        }
        assert_eq!(Code::ReferencedResourceNotFound.to_string(), "IST0101");
        assert_eq!(Code::from_id("IST9999"), None);
    }
}
