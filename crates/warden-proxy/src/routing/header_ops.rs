//! Precompiled `headers.request|response.set/add/remove` of a VirtualService route.

use http::{HeaderMap, HeaderName, HeaderValue};
use warden_config::kinds::virtual_service::HeaderOperations;

#[derive(Debug, Clone, Default)]
pub struct HeaderOps {
    set: Vec<(HeaderName, HeaderValue)>,
    add: Vec<(HeaderName, HeaderValue)>,
    remove: Vec<HeaderName>,
}

impl HeaderOps {
    pub fn compile(ops: Option<&HeaderOperations>) -> Result<Self, String> {
        let Some(ops) = ops else {
            return Ok(HeaderOps::default());
        };
        let pair = |(k, v): (&String, &String)| -> Result<(HeaderName, HeaderValue), String> {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("invalid header name {k:?}"))?;
            let value =
                HeaderValue::from_str(v).map_err(|_| format!("invalid value for header {k:?}"))?;
            Ok((name, value))
        };
        Ok(HeaderOps {
            set: ops.set.iter().map(pair).collect::<Result<_, _>>()?,
            add: ops.add.iter().map(pair).collect::<Result<_, _>>()?,
            remove: ops
                .remove
                .iter()
                .map(|k| {
                    HeaderName::from_bytes(k.as_bytes())
                        .map_err(|_| format!("invalid header name {k:?}"))
                })
                .collect::<Result<_, _>>()?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }

    /// Envoy order: remove, then set (overwrite), then add (append).
    pub fn apply(&self, headers: &mut HeaderMap) {
        for name in &self.remove {
            headers.remove(name);
        }
        for (name, value) in &self.set {
            headers.insert(name.clone(), value.clone());
        }
        for (name, value) in &self.add {
            headers.append(name.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_set_add() {
        let mut ops = HeaderOperations::default();
        ops.set.insert("x-a".into(), "1".into());
        ops.add.insert("x-b".into(), "2".into());
        ops.remove.push("x-c".into());
        let ops = HeaderOps::compile(Some(&ops)).unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-a", HeaderValue::from_static("0"));
        h.insert("x-b", HeaderValue::from_static("1"));
        h.insert("x-c", HeaderValue::from_static("gone"));
        ops.apply(&mut h);
        assert_eq!(h["x-a"], "1");
        assert_eq!(h.get_all("x-b").iter().count(), 2);
        assert!(h.get("x-c").is_none());
    }

    #[test]
    fn rejects_invalid_names() {
        let mut ops = HeaderOperations::default();
        ops.set.insert("bad name".into(), "1".into());
        assert!(HeaderOps::compile(Some(&ops)).is_err());
    }
}
