//! What an authorization check returns, and the constants of Envoy's RBAC denial.

use std::sync::Arc;

/// HTTP status of a denied request.
pub const DENY_STATUS: u16 = 403;
/// Body of a denied request (19 bytes, as Envoy).
pub const DENY_BODY: &str = "RBAC: access denied";
/// Content type of a denied request.
pub const DENY_CONTENT_TYPE: &str = "text/plain";
/// The policy label of a denial caused by no ALLOW rule matching (Envoy's `[none]`).
pub const NONE_POLICY: &str = "none";

/// The outcome of one check.
///
/// Policy names follow Envoy's RBAC: `ns[<namespace>]-policy[<name>]-rule[<index>]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// Enforce: `false` means answer 403 (HTTP) or close without writing (TCP).
    pub allow: bool,
    /// The DENY rule that matched. `None` with `allow == false` means no ALLOW rule matched.
    pub policy: Option<Arc<str>>,
    /// Dry-run (`istio.io/dry-run: "true"`) outcomes that would have denied: the matching
    /// dry-run DENY rules' names, and [`NONE_POLICY`] when dry-run ALLOW policies exist and none
    /// of them matched. Count and log these; never enforce them.
    pub shadow_denied: Vec<Arc<str>>,
    /// An AUDIT rule matched: the request should be marked for audit logging.
    pub audit: bool,
}

impl Decision {
    /// The label for logs and metrics: the denying rule's name, `none` for an ALLOW miss, or
    /// an empty string when allowed.
    pub fn policy_label(&self) -> &str {
        match (&self.policy, self.allow) {
            (Some(p), _) => p,
            (None, false) => NONE_POLICY,
            (None, true) => "",
        }
    }

    /// Envoy's response-code details for a denial, e.g.
    /// `rbac_access_denied_matched_policy[ns[default]-policy[deny]-rule[0]]`.
    pub fn details(&self) -> Option<String> {
        (!self.allow).then(|| format!("rbac_access_denied_matched_policy[{}]", self.policy_label()))
    }
}
