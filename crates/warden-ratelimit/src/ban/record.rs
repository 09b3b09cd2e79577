//! A ban as stored and listed: its key, its state and who it is for (the request's descriptor
//! and the rule it broke). The stored value is `"<until_ms> <strikes> <subject JSON>"`, one
//! string, so the Redis script reads and writes it with one GET / SET.

use super::schedule::BanState;
use serde_json::{json, Value};

/// Who is banned: the descriptor (domain and entries) and the rule (the limit's config key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanSubject {
    pub domain: String,
    pub entries: Vec<(String, String)>,
    pub rule: String,
}

impl BanSubject {
    pub fn to_json(&self) -> String {
        let entries: Vec<Value> = self
            .entries
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
        json!({"domain": self.domain, "entries": entries, "rule": self.rule}).to_string()
    }

    pub fn from_json(text: &str) -> Option<BanSubject> {
        let v: Value = serde_json::from_str(text).ok()?;
        let entries = v
            .get("entries")?
            .as_array()?
            .iter()
            .map(|e| {
                Some((
                    e.get("key")?.as_str()?.to_owned(),
                    e.get("value")?.as_str()?.to_owned(),
                ))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(BanSubject {
            domain: v.get("domain")?.as_str()?.to_owned(),
            entries,
            rule: v.get("rule")?.as_str()?.to_owned(),
        })
    }

    /// The value of the `remote_address` entry (Envoy's `remote_address` action), if any.
    pub fn remote_address(&self) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == "remote_address")
            .map(|(_, v)| v.as_str())
    }
}

/// The stored value of a ban.
pub fn encode(state: BanState, subject_json: &str) -> String {
    format!("{} {} {subject_json}", state.until_ms, state.strikes)
}

/// [`encode`]'s inverse; `None` for anything else.
pub fn decode(text: &str) -> Option<(BanState, &str)> {
    let mut parts = text.splitn(3, ' ');
    let until_ms = parts.next()?.parse().ok()?;
    let strikes = parts.next()?.parse().ok()?;
    Some((BanState { until_ms, strikes }, parts.next().unwrap_or("")))
}

/// One ban as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanRecord {
    /// The store key (what `DELETE /bans?key=` takes).
    pub key: String,
    pub state: BanState,
    pub subject: Option<BanSubject>,
}

impl BanRecord {
    /// From a stored key and value.
    pub fn parse(key: String, value: &str) -> Option<BanRecord> {
        let (state, subject) = decode(value)?;
        Some(BanRecord {
            key,
            state,
            subject: BanSubject::from_json(subject),
        })
    }

    /// The JSON object `GET /bans` lists.
    pub fn to_json(&self, now_ms: u64) -> Value {
        let subject = self.subject.as_ref();
        json!({
            "key": self.key,
            "domain": subject.map(|s| s.domain.as_str()),
            "descriptor": subject.map(|s| s.entries.iter()
                .map(|(k, v)| json!({"key": k, "value": v}))
                .collect::<Vec<_>>()),
            "rule": subject.map(|s| s.rule.as_str()),
            "strikes": self.state.strikes,
            "until": crate::log_json::rfc3339_nano(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.state.until_ms),
            ),
            "until_unix_ms": self.state.until_ms,
            "remaining_seconds": self.state.until_ms.saturating_sub(now_ms).div_ceil(1000),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_round_trip() {
        let subject = BanSubject {
            domain: "rl".into(),
            entries: vec![
                ("remote_address".into(), "10.0.0.1".into()),
                ("path".into(), "/login with space".into()),
            ],
            rule: "rl.remote_address.path".into(),
        };
        let state = BanState {
            until_ms: 1_700_000_120_000,
            strikes: 2,
        };
        let value = encode(state, &subject.to_json());
        let record = BanRecord::parse("k".into(), &value).expect("parse");
        assert_eq!(record.state, state);
        assert_eq!(record.subject.as_ref(), Some(&subject));
        assert_eq!(subject.remote_address(), Some("10.0.0.1"));
        assert!(decode("junk").is_none());
        assert!(decode("1 x {}").is_none());
    }
}
