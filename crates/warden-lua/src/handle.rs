//! The stream handle a script's `envoy_on_request` / `envoy_on_response` receives, and the
//! objects it hands out (`headers()`, `body()`, `streamInfo()`, `metadata()`,
//! `connection()`), with Envoy's method names. The handle is a table whose methods call Rust
//! functions with the stream's userdata; `httpCall` and `respond` yield the script's coroutine
//! (see `PRELUDE`), as Envoy's do.

use crate::headers::HeaderList;
use crate::stream::{HttpCall, LocalResponse, Stream};
use mlua::{
    AnyUserData, Function, Lua, MetaMethod, MultiValue, Table, UserData, UserDataMethods, Value,
};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The stream while a phase runs (and while it waits for a call).
pub(crate) struct Live {
    pub stream: Stream,
    /// The phase ended: objects kept by the script answer with Envoy's error.
    pub dead: bool,
    pub respond: Option<LocalResponse>,
    pub call: Option<HttpCall>,
    /// `body()` asked for a body not read yet ([`Stream::body_pending`]).
    pub wants_body: bool,
    /// `bodyChunks()` streams the body: the iterator waits for the next chunk.
    pub wants_chunk: bool,
    /// The body is streaming through `bodyChunks()` (`body()` can no longer buffer it).
    pub streaming: bool,
    /// The streamed body ended: the iterator answers nil (the last chunk stays readable).
    pub chunks_ended: bool,
    pub phase: crate::Phase,
    pub script: Arc<str>,
}

pub(crate) type Shared = Rc<RefCell<Live>>;

fn check(live: &Shared) -> mlua::Result<()> {
    if live.borrow().dead {
        Err(mlua::Error::runtime("object used outside of proper scope"))
    } else {
        Ok(())
    }
}

struct StreamUd(Shared);
impl UserData for StreamUd {}

fn shared(ud: &AnyUserData) -> mlua::Result<Shared> {
    let s = ud.borrow::<StreamUd>()?;
    check(&s.0)?;
    Ok(s.0.clone())
}

/// Which header list of the stream a headers object edits.
#[derive(Clone, Copy)]
enum Which {
    Headers,
    Trailers,
}

struct HeadersUd(Shared, Which);

impl HeadersUd {
    fn with<R>(&self, f: impl FnOnce(&HeaderList) -> R) -> mlua::Result<R> {
        check(&self.0)?;
        let live = self.0.borrow();
        match self.1 {
            Which::Headers => Ok(f(&live.stream.headers)),
            Which::Trailers => Ok(f(live.stream.trailers.as_ref().unwrap_or(&EMPTY))),
        }
    }

    fn edit(&self, f: impl FnOnce(&mut HeaderList)) -> mlua::Result<()> {
        check(&self.0)?;
        let mut live = self.0.borrow_mut();
        match self.1 {
            // Streaming through `bodyChunks()` sent the headers on (Envoy's error).
            Which::Headers if live.streaming => {
                return Err(mlua::Error::runtime("header map can no longer be modified"))
            }
            Which::Headers => {
                f(&mut live.stream.headers);
                live.stream.headers_changed = true;
            }
            Which::Trailers => f(live.stream.trailers.get_or_insert_with(HeaderList::new)),
        }
        Ok(())
    }
}

static EMPTY: HeaderList = HeaderList::empty();

fn bytes_of(v: &Value) -> mlua::Result<Vec<u8>> {
    match v {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Integer(i) => Ok(i.to_string().into_bytes()),
        Value::Number(n) => Ok(n.to_string().into_bytes()),
        other => Err(mlua::Error::runtime(format!(
            "bad argument: string expected, got {}",
            other.type_name()
        ))),
    }
}

impl UserData for HeadersUd {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("get", |lua, this, name: mlua::LuaString| {
            let name = name.to_str()?.to_string();
            match this.with(|h| h.get(&name))? {
                Some(v) => Ok(Value::String(lua.create_string(v)?)),
                None => Ok(Value::Nil),
            }
        });
        m.add_method(
            "getAtIndex",
            |lua, this, (name, index): (mlua::LuaString, i64)| {
                let name = name.to_str()?.to_string();
                let Ok(index) = usize::try_from(index) else {
                    return Ok(Value::Nil);
                };
                match this.with(|h| h.get_at_index(&name, index).map(<[u8]>::to_vec))? {
                    Some(v) => Ok(Value::String(lua.create_string(v)?)),
                    None => Ok(Value::Nil),
                }
            },
        );
        m.add_method("getNumValues", |_, this, name: mlua::LuaString| {
            let name = name.to_str()?.to_string();
            this.with(|h| h.num_values(&name))
        });
        m.add_method("add", |_, this, (name, value): (mlua::LuaString, Value)| {
            let name = name.to_str()?.to_string();
            let value = bytes_of(&value)?;
            this.edit(|h| h.add(&name, value))
        });
        m.add_method(
            "replace",
            |_, this, (name, value): (mlua::LuaString, Value)| {
                let name = name.to_str()?.to_string();
                let value = bytes_of(&value)?;
                this.edit(|h| h.replace(&name, value))
            },
        );
        m.add_method("remove", |_, this, name: mlua::LuaString| {
            let name = name.to_str()?.to_string();
            this.edit(|h| h.remove(&name))
        });
        m.add_method("setHttp1ReasonPhrase", |_, this, reason: String| {
            check(&this.0)?;
            this.0.borrow_mut().stream.reason_phrase = Some(reason);
            Ok(())
        });
        // `for k, v in pairs(headers)`: every entry, pseudo-headers first, as stored.
        m.add_meta_method(MetaMethod::Pairs, |lua, this, ()| {
            let live = this.0.clone();
            let which = this.1;
            let mut at = 0usize;
            let next = lua.create_function_mut(move |lua, ()| {
                check(&live)?;
                let l = live.borrow();
                let list = match which {
                    Which::Headers => &l.stream.headers,
                    Which::Trailers => l.stream.trailers.as_ref().unwrap_or(&EMPTY),
                };
                let Some((n, v)) = list.entry(at) else {
                    return Ok(MultiValue::new());
                };
                at += 1;
                Ok(MultiValue::from_iter([
                    Value::String(lua.create_string(n)?),
                    Value::String(lua.create_string(v)?),
                ]))
            })?;
            Ok((next, Value::Nil, Value::Nil))
        });
    }
}

struct BufferUd(Shared);

impl UserData for BufferUd {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("length", |_, this, ()| {
            check(&this.0)?;
            Ok(this.0.borrow().stream.body.as_ref().map_or(0, Vec::len))
        });
        m.add_method("getBytes", |lua, this, (index, length): (i64, i64)| {
            check(&this.0)?;
            let live = this.0.borrow();
            let body = live.stream.body.as_deref().unwrap_or_default();
            let start = usize::try_from(index).unwrap_or(usize::MAX);
            let len = usize::try_from(length).unwrap_or(0);
            if start > body.len() || len > body.len() - start {
                return Err(mlua::Error::runtime(
                    "index/length must be >= 0 and (index + length) must be <= buffer size",
                ));
            }
            lua.create_string(&body[start..start + len])
        });
        // Envoy answers the new length (and sets `content-length` to it, which the proxy
        // does when it applies the body).
        m.add_method("setBytes", |_, this, bytes: mlua::LuaString| {
            check(&this.0)?;
            let mut live = this.0.borrow_mut();
            let bytes = bytes.as_bytes().to_vec();
            let len = bytes.len();
            live.stream.body = Some(bytes);
            live.stream.body_changed = true;
            Ok(len)
        });
    }
}

/// `metadata()`: the route's metadata for this filter (read only).
struct RouteMetadataUd(Shared);

impl UserData for RouteMetadataUd {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("get", |lua, this, key: String| {
            check(&this.0)?;
            let live = this.0.borrow();
            match live.stream.route_metadata.get(&key) {
                Some(v) => json_to_lua(lua, v, 0),
                None => Ok(Value::Nil),
            }
        });
        m.add_meta_method(MetaMethod::Pairs, |lua, this, ()| {
            check(&this.0)?;
            let live = this.0.borrow();
            let table = json_object_to_lua(lua, &live.stream.route_metadata)?;
            let next: Function = lua.globals().get("next")?;
            Ok((next, table, Value::Nil))
        });
    }
}

/// `streamInfo():dynamicMetadata()`.
struct DynamicMetadataUd(Shared);

impl UserData for DynamicMetadataUd {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("get", |lua, this, ns: String| {
            check(&this.0)?;
            let live = this.0.borrow();
            match live.stream.dynamic_metadata.get(&ns) {
                Some(fields) => Ok(Value::Table(json_object_to_lua(lua, fields)?)),
                None => Ok(Value::Nil),
            }
        });
        m.add_method(
            "set",
            |_, this, (ns, key, value): (String, String, Value)| {
                check(&this.0)?;
                let value = lua_to_json(&value, 0)?;
                let mut live = this.0.borrow_mut();
                live.stream
                    .dynamic_metadata
                    .entry(ns)
                    .or_default()
                    .insert(key, value);
                live.stream.dynamic_metadata_changed = true;
                Ok(())
            },
        );
        m.add_meta_method(MetaMethod::Pairs, |lua, this, ()| {
            check(&this.0)?;
            let live = this.0.borrow();
            let table = lua.create_table()?;
            for (ns, fields) in &live.stream.dynamic_metadata {
                table.set(ns.as_str(), json_object_to_lua(lua, fields)?)?;
            }
            let next: Function = lua.globals().get("next")?;
            Ok((next, table, Value::Nil))
        });
    }
}

struct StreamInfoUd(Shared);

impl UserData for StreamInfoUd {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        fn info<R>(
            this: &StreamInfoUd,
            f: impl FnOnce(&crate::StreamInfo) -> R,
        ) -> mlua::Result<R> {
            check(&this.0)?;
            Ok(f(&this.0.borrow().stream.info))
        }
        m.add_method("protocol", |_, this, ()| info(this, |i| i.protocol));
        m.add_method("downstreamLocalAddress", |_, this, ()| {
            info(this, |i| i.downstream_local_address.to_string())
        });
        // No original-destination rewrite of the local address here: the same one.
        m.add_method("downstreamDirectLocalAddress", |_, this, ()| {
            info(this, |i| i.downstream_local_address.to_string())
        });
        // warden has no virtual clusters: Envoy's answer when none matched.
        m.add_method("virtualClusterName", |_, this, ()| info(this, |_| ""));
        m.add_method("downstreamDirectRemoteAddress", |_, this, ()| {
            info(this, |i| i.downstream_direct_remote_address.to_string())
        });
        m.add_method("downstreamRemoteAddress", |_, this, ()| {
            info(this, |i| i.downstream_remote_address.to_string())
        });
        m.add_method("requestedServerName", |_, this, ()| {
            info(this, |i| i.requested_server_name.clone())
        });
        m.add_method("routeName", |_, this, ()| {
            info(this, |i| i.route_name.clone())
        });
        m.add_method("dynamicMetadata", |_, this, ()| {
            check(&this.0)?;
            Ok(DynamicMetadataUd(this.0.clone()))
        });
        m.add_method("downstreamSslConnection", |_, this, ()| {
            check(&this.0)?;
            let has = this.0.borrow().stream.info.ssl.is_some();
            Ok(has.then(|| SslUd(this.0.clone())))
        });
    }
}

struct ConnectionUd(Shared);

impl UserData for ConnectionUd {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("ssl", |_, this, ()| {
            check(&this.0)?;
            let has = this.0.borrow().stream.info.ssl.is_some();
            Ok(has.then(|| SslUd(this.0.clone())))
        });
    }
}

struct SslUd(Shared);

impl UserData for SslUd {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        fn ssl<R>(this: &SslUd, f: impl FnOnce(&crate::SslInfo) -> R) -> mlua::Result<R> {
            check(&this.0)?;
            let live = this.0.borrow();
            live.stream
                .info
                .ssl
                .as_ref()
                .map(f)
                .ok_or_else(|| mlua::Error::runtime("not a TLS connection"))
        }
        m.add_method("peerCertificatePresented", |_, this, ()| {
            ssl(this, |s| s.peer_certificate_presented)
        });
        m.add_method("peerCertificateValidated", |_, this, ()| {
            ssl(this, |s| s.peer_certificate_validated)
        });
        m.add_method("uriSanPeerCertificate", |_, this, ()| {
            ssl(this, |s| s.uri_san_peer_certificate.clone())
        });
        m.add_method("dnsSansPeerCertificate", |_, this, ()| {
            ssl(this, |s| s.dns_sans_peer_certificate.clone())
        });
        m.add_method("subjectPeerCertificate", |_, this, ()| {
            ssl(this, |s| s.subject_peer_certificate.clone())
        });
        m.add_method("tlsVersion", |_, this, ()| {
            ssl(this, |s| s.tls_version.clone())
        });
    }
}

/// Tables nest at most this deep in metadata (a cycle must not recurse forever).
const MAX_DEPTH: usize = 16;

pub(crate) fn json_to_lua(lua: &Lua, v: &serde_json::Value, depth: usize) -> mlua::Result<Value> {
    use serde_json::Value as J;
    Ok(match v {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Number(n.as_f64().unwrap_or(0.0)),
        },
        J::String(s) => Value::String(lua.create_string(s)?),
        J::Array(items) if depth < MAX_DEPTH => {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, json_to_lua(lua, item, depth + 1)?)?;
            }
            Value::Table(t)
        }
        J::Object(map) if depth < MAX_DEPTH => Value::Table(json_object_to_lua(lua, map)?),
        _ => Value::Nil,
    })
}

fn json_object_to_lua(
    lua: &Lua,
    map: &serde_json::Map<String, serde_json::Value>,
) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for (k, v) in map {
        t.raw_set(k.as_str(), json_to_lua(lua, v, 1)?)?;
    }
    Ok(t)
}

/// A Lua value as metadata: tables with keys 1..n are lists, other tables objects.
pub(crate) fn lua_to_json(v: &Value, depth: usize) -> mlua::Result<serde_json::Value> {
    use serde_json::Value as J;
    if depth > MAX_DEPTH {
        return Err(mlua::Error::runtime("metadata nests too deep"));
    }
    Ok(match v {
        Value::Nil => J::Null,
        Value::Boolean(b) => J::Bool(*b),
        Value::Integer(i) => J::from(*i),
        Value::Number(n) => serde_json::Number::from_f64(*n).map_or(J::Null, J::Number),
        Value::String(s) => J::String(s.to_string_lossy()),
        Value::Table(t) => {
            let n = t.raw_len();
            let mut pairs = Vec::new();
            for pair in t.pairs::<Value, Value>() {
                pairs.push(pair?);
            }
            if n > 0 && pairs.len() == n {
                let mut items = Vec::with_capacity(n);
                for i in 1..=n {
                    items.push(lua_to_json(&t.raw_get::<Value>(i)?, depth + 1)?);
                }
                J::Array(items)
            } else {
                let mut map = serde_json::Map::new();
                for (k, v) in pairs {
                    let key = match k {
                        Value::String(s) => s.to_string_lossy(),
                        Value::Integer(i) => i.to_string(),
                        other => {
                            return Err(mlua::Error::runtime(format!(
                                "metadata keys must be strings, got {}",
                                other.type_name()
                            )))
                        }
                    };
                    map.insert(key, lua_to_json(&v, depth + 1)?);
                }
                J::Object(map)
            }
        }
        other => {
            return Err(mlua::Error::runtime(format!(
                "metadata cannot hold a {}",
                other.type_name()
            )))
        }
    })
}

/// A header table (`{[":status"] = "200", ["x"] = "a"}`, a value may be a list of strings)
/// as a list.
fn header_table(t: &Table) -> mlua::Result<HeaderList> {
    let mut h = HeaderList::new();
    for pair in t.pairs::<mlua::LuaString, Value>() {
        let (k, v) = pair?;
        let k = k.to_str()?.to_string();
        match &v {
            Value::Table(values) => {
                for item in values.sequence_values::<Value>() {
                    h.add(&k, bytes_of(&item?)?);
                }
            }
            other => h.add(&k, bytes_of(other)?),
        }
    }
    Ok(h)
}

/// The Lua table of a header list: the last value of a name (Envoy's default), or with
/// `duplicates` every value, several as a list (`return_duplicate_headers`).
pub(crate) fn headers_to_table(lua: &Lua, h: &HeaderList, duplicates: bool) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for (n, v) in h.iter() {
        let v = lua.create_string(v)?;
        if !duplicates {
            t.raw_set(n, v)?;
            continue;
        }
        match t.raw_get::<Value>(n)? {
            Value::Nil => t.raw_set(n, v)?,
            Value::Table(list) => list.raw_set(list.raw_len() + 1, v)?,
            Value::String(first) => t.raw_set(n, lua.create_sequence_from([first, v])?)?,
            _ => {}
        }
    }
    Ok(t)
}

fn log(level: tracing::Level, script: &str, msg: &str) {
    match level {
        tracing::Level::TRACE => tracing::trace!(script, "script log: {msg}"),
        tracing::Level::DEBUG => tracing::debug!(script, "script log: {msg}"),
        tracing::Level::INFO => tracing::info!(script, "script log: {msg}"),
        tracing::Level::WARN => tracing::warn!(script, "script log: {msg}"),
        tracing::Level::ERROR => tracing::error!(script, "script log: {msg}"),
    }
}

/// Builds the handle's method table and the handle maker; runs once per Lua state.
const PRELUDE: &str = r#"
local rust, yield, setmetatable = ...
local M = {}
for name, f in pairs(rust) do
  M[name] = function(self, ...) return f(self[1], ...) end
end
local call, respond = rust.httpCall, rust.respond
local need_body, body, chunks = rust.needBody, rust.body, rust.bodyChunks
local stream_chunks, next_chunk, chunk = rust.streamChunks, rust.nextChunk, rust.chunk
M.needBody, M.streamChunks, M.nextChunk, M.chunk = nil, nil, nil, nil
-- The body is read (the coroutine suspended) only when a script asks for it.
M.body = function(self, ...)
  if need_body(self[1]) then yield() end
  return body(self[1], ...)
end
-- A body not read yet streams: each step of the iterator waits for the next chunk.
M.bodyChunks = function(self)
  local ud = self[1]
  if not stream_chunks(ud) then return chunks(ud) end
  return function()
    next_chunk(ud)
    yield()
    return chunk(ud)
  end
end
M.httpCall = function(self, ...)
  if call(self[1], ...) then return yield() end
end
M.respond = function(self, ...)
  respond(self[1], ...)
  yield()
  error("respond() ended the stream", 0)
end
local mt = { __index = M, __metatable = false }
return function(ud) return setmetatable({ud}, mt) end
"#;

/// The function that makes a stream handle, with every method of Envoy's API behind it.
pub(crate) fn install(lua: &Lua, clock: fn() -> SystemTime) -> mlua::Result<Function> {
    let rust = lua.create_table()?;
    rust.set(
        "headers",
        lua.create_function(|_, ud: AnyUserData| Ok(HeadersUd(shared(&ud)?, Which::Headers)))?,
    )?;
    rust.set(
        "trailers",
        lua.create_function(|_, ud: AnyUserData| {
            let live = shared(&ud)?;
            let has = live.borrow().stream.trailers.is_some();
            Ok(has.then_some(HeadersUd(live, Which::Trailers)))
        })?,
    )?;
    rust.set(
        "body",
        lua.create_function(|_, (ud, always_wrap): (AnyUserData, Option<bool>)| {
            let live = shared(&ud)?;
            let has = live.borrow().stream.body.is_some();
            if !has && always_wrap == Some(true) {
                live.borrow_mut().stream.body = Some(Vec::new());
            }
            Ok((has || always_wrap == Some(true)).then_some(BufferUd(live)))
        })?,
    )?;
    rust.set(
        "needBody",
        lua.create_function(|_, ud: AnyUserData| {
            let live = shared(&ud)?;
            let mut l = live.borrow_mut();
            if l.streaming {
                return Err(mlua::Error::runtime(
                    "cannot call body() after body streaming has started",
                ));
            }
            l.wants_body = l.stream.body_pending;
            Ok(l.wants_body)
        })?,
    )?;
    rust.set(
        "streamChunks",
        lua.create_function(|_, ud: AnyUserData| {
            let live = shared(&ud)?;
            let mut l = live.borrow_mut();
            if l.stream.body_pending {
                l.stream.body_pending = false;
                l.streaming = true;
            }
            Ok(l.streaming && !l.chunks_ended)
        })?,
    )?;
    rust.set(
        "nextChunk",
        lua.create_function(|_, ud: AnyUserData| {
            let live = shared(&ud)?;
            let mut l = live.borrow_mut();
            if !l.chunks_ended {
                l.wants_chunk = true;
            }
            Ok(())
        })?,
    )?;
    rust.set(
        "chunk",
        lua.create_function(|_, ud: AnyUserData| {
            let live = shared(&ud)?;
            let ended = live.borrow().chunks_ended;
            Ok((!ended).then_some(BufferUd(live)))
        })?,
    )?;
    rust.set(
        "bodyChunks",
        lua.create_function(|lua, ud: AnyUserData| {
            let live = shared(&ud)?;
            let mut given = false;
            lua.create_function_mut(move |_, ()| {
                check(&live)?;
                let has = live.borrow().stream.body.is_some();
                if given || !has {
                    return Ok(None);
                }
                given = true;
                Ok(Some(BufferUd(live.clone())))
            })
        })?,
    )?;
    rust.set(
        "metadata",
        lua.create_function(|_, ud: AnyUserData| Ok(RouteMetadataUd(shared(&ud)?)))?,
    )?;
    rust.set(
        "streamInfo",
        lua.create_function(|_, ud: AnyUserData| Ok(StreamInfoUd(shared(&ud)?)))?,
    )?;
    rust.set(
        "connection",
        lua.create_function(|_, ud: AnyUserData| Ok(ConnectionUd(shared(&ud)?)))?,
    )?;
    for (name, level) in [
        ("logTrace", tracing::Level::TRACE),
        ("logDebug", tracing::Level::DEBUG),
        ("logInfo", tracing::Level::INFO),
        ("logWarn", tracing::Level::WARN),
        ("logErr", tracing::Level::ERROR),
        ("logCritical", tracing::Level::ERROR),
    ] {
        rust.set(
            name,
            lua.create_function(move |_, (ud, msg): (AnyUserData, mlua::LuaString)| {
                let live = shared(&ud)?;
                let script = live.borrow().script.clone();
                log(level, &script, &msg.to_string_lossy());
                Ok(())
            })?,
        )?;
    }
    rust.set(
        "timestamp",
        lua.create_function(move |_, (ud, _resolution): (AnyUserData, Option<String>)| {
            shared(&ud)?;
            let since = clock().duration_since(UNIX_EPOCH).unwrap_or_default();
            Ok(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
        })?,
    )?;
    rust.set(
        "timestampString",
        lua.create_function(move |_, (ud, resolution): (AnyUserData, Option<String>)| {
            shared(&ud)?;
            let since = clock().duration_since(UNIX_EPOCH).unwrap_or_default();
            Ok(match resolution.as_deref() {
                Some("MICROSECOND") => since.as_micros().to_string(),
                _ => since.as_millis().to_string(),
            })
        })?,
    )?;
    rust.set(
        "base64Escape",
        lua.create_function(|_, (ud, s): (AnyUserData, mlua::LuaString)| {
            shared(&ud)?;
            Ok(crate::base64::encode(&s.as_bytes()))
        })?,
    )?;
    rust.set(
        "filterContext",
        lua.create_function(|lua, ud: AnyUserData| {
            let live = shared(&ud)?;
            let l = live.borrow();
            json_object_to_lua(lua, &l.stream.filter_context)
        })?,
    )?;
    rust.set(
        "clearRouteCache",
        lua.create_function(|_, ud: AnyUserData| {
            shared(&ud)?.borrow_mut().stream.clear_route_cache = true;
            Ok(())
        })?,
    )?;
    rust.set(
        "respond",
        lua.create_function(
            |_, (ud, headers, body): (AnyUserData, Table, Option<mlua::LuaString>)| {
                let live = shared(&ud)?;
                if live.borrow().phase == crate::Phase::Response {
                    // Envoy's encoder callbacks refuse it (a script error).
                    return Err(mlua::Error::runtime(
                        "respond not currently supported in the response path",
                    ));
                }
                let mut headers = header_table(&headers)?;
                let status = headers
                    .first(":status")
                    .and_then(|s| std::str::from_utf8(s).ok())
                    .and_then(|s| s.parse::<u16>().ok())
                    .filter(|s| (200..=599).contains(s))
                    .ok_or_else(|| mlua::Error::runtime(":status must be a valid HTTP status"))?;
                headers.remove(":status");
                live.borrow_mut().respond = Some(LocalResponse {
                    status,
                    headers,
                    body: body.map(|b| b.as_bytes().to_vec()).unwrap_or_default(),
                });
                Ok(())
            },
        )?,
    )?;
    rust.set(
        "httpCall",
        lua.create_function(
            |_,
             (ud, cluster, headers, body, timeout, asynchronous): (
                AnyUserData,
                String,
                Table,
                Option<mlua::LuaString>,
                Value,
                Option<bool>,
            )| {
                let live = shared(&ud)?;
                let headers = header_table(&headers)?;
                for required in [":method", ":path", ":authority"] {
                    if headers.first(required).is_none() {
                        return Err(mlua::Error::runtime(format!(
                            "http call headers must include ':path', ':method', and \
                             ':authority' ({required} is missing)"
                        )));
                    }
                }
                // Either (timeout_ms, asynchronous) or an options table.
                let mut return_duplicate_headers = false;
                let (timeout_ms, asynchronous) = match timeout {
                    Value::Table(options) => {
                        return_duplicate_headers = options
                            .get::<Option<bool>>("return_duplicate_headers")?
                            .unwrap_or(false);
                        (
                            options.get::<Option<u64>>("timeout_ms")?.unwrap_or(0),
                            options
                                .get::<Option<bool>>("asynchronous")?
                                .unwrap_or(false),
                        )
                    }
                    Value::Integer(t) => {
                        (u64::try_from(t).unwrap_or(0), asynchronous == Some(true))
                    }
                    Value::Number(t) if t >= 0.0 => (t as u64, asynchronous == Some(true)),
                    Value::Nil => (0, asynchronous == Some(true)),
                    _ => return Err(mlua::Error::runtime("http call timeout must be >= 0")),
                };
                let call = HttpCall {
                    cluster,
                    headers,
                    body: body.map(|b| b.as_bytes().to_vec()).unwrap_or_default(),
                    timeout_ms,
                    asynchronous,
                    return_duplicate_headers,
                };
                let mut l = live.borrow_mut();
                if asynchronous {
                    l.stream.async_calls.push(call);
                    Ok(false)
                } else {
                    l.call = Some(call);
                    Ok(true)
                }
            },
        )?,
    )?;
    let globals = lua.globals();
    let yield_fn: Function = globals.get::<Table>("coroutine")?.get("yield")?;
    let setmetatable: Function = globals.get("setmetatable")?;
    lua.load(PRELUDE)
        .set_name("=warden.lua.prelude")
        .call((rust, yield_fn, setmetatable))
}

/// A handle for `live`, made with [`install`]'s function.
pub(crate) fn handle(lua: &Lua, make: &Function, live: &Shared) -> mlua::Result<Value> {
    let ud = lua.create_userdata(StreamUd(live.clone()))?;
    make.call(ud)
}
