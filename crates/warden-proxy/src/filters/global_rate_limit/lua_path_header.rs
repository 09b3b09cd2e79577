//! The seed's Lua filter, which only adds a request header holding `method .. path` (path
//! without the query string) for a `request_headers` rate limit action. warden computes that
//! value natively; any other Lua code is unsupported.

use regex::Regex;
use std::sync::OnceLock;
use warden_config::{ConfigSet, Location};

/// A Lua patch recognised as "add header NAME = method .. path".
#[derive(Debug, Clone)]
pub struct MethodPathHeader {
    pub name: http::HeaderName,
}

/// What the Lua patches of a config amount to.
#[derive(Debug, Default)]
pub struct LuaPatches {
    pub method_path_headers: Vec<MethodPathHeader>,
    /// Lua code that is not the seed's pattern: (where, why).
    pub unsupported: Vec<(Location, String)>,
}

fn add_header_pattern() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        // request_handle:headers():add("name", method .. path)
        Regex::new(
            r#"headers\(\):add\(\s*["']([A-Za-z0-9_\-]+)["']\s*,\s*method\s*\.\.\s*path\s*\)"#,
        )
        .unwrap_or_else(|_| unreachable!("constant regex"))
    })
}

fn strips_query(code: &str) -> bool {
    code.contains(r#"string.find(path, "?""#) || code.contains("string.find(path, '?'")
}

/// Find every Lua HTTP filter patch and classify it.
pub fn scan(set: &ConfigSet) -> LuaPatches {
    let mut out = LuaPatches::default();
    for doc in &set.envoy_filters {
        for (i, patch) in doc.spec.config_patches.iter().enumerate() {
            let Some(value) = &patch.patch.value else {
                continue;
            };
            let typed = value
                .get("typed_config")
                .or_else(|| value.get("typedConfig"));
            let is_lua = typed
                .and_then(|t| t.get("@type"))
                .and_then(|t| t.as_str())
                .is_some_and(|t| t.ends_with("envoy.extensions.filters.http.lua.v3.Lua"));
            if !is_lua {
                continue;
            }
            let code = typed
                .and_then(|t| t.get("inlineCode").or_else(|| t.get("inline_code")))
                .and_then(|c| c.as_str())
                .unwrap_or("");
            let field = format!("spec.configPatches[{i}].patch.value.typed_config.inlineCode");
            let header = add_header_pattern()
                .captures(code)
                .and_then(|c| c.get(1))
                .and_then(|m| {
                    http::HeaderName::from_bytes(m.as_str().to_ascii_lowercase().as_bytes()).ok()
                });
            match header {
                Some(name) if strips_query(code) => {
                    out.method_path_headers.push(MethodPathHeader { name })
                }
                _ => out.unsupported.push((
                    set.locate(doc, &field),
                    "Lua filters are not supported; to rate limit by method and path use a \
                     RateLimitPolicy global rule with a path selector, or keep the seed's Lua \
                     that adds a `method .. path` header (recognised natively)"
                        .into(),
                )),
            }
        }
    }
    out
}

/// `GET/api/healthz` for the seed's header.
pub fn method_path_value(method: &http::Method, path: &str) -> Option<http::HeaderValue> {
    let mut v = String::with_capacity(method.as_str().len() + path.len());
    v.push_str(method.as_str());
    v.push_str(path);
    http::HeaderValue::from_str(&v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_seed_lua() {
        let code = r#"function envoy_on_request(request_handle)
  local path = request_handle:headers():get(":path")
  local method = request_handle:headers():get(":method")
  local params_start = string.find(path, "?")
  if params_start then
    path = string.sub(path, 1, params_start - 1)
  end
  request_handle:headers():add("x-envoy-original-limit-rate-path", method .. path)
end"#;
        let caps = add_header_pattern().captures(code).unwrap();
        assert_eq!(&caps[1], "x-envoy-original-limit-rate-path");
        assert!(strips_query(code));
        assert!(!strips_query(
            "request_handle:headers():add(\"x\", method .. path)"
        ));
    }
}
