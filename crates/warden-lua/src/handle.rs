//! The stream handle a script's `envoy_on_request` / `envoy_on_response` receives, and the
//! objects it hands out (`headers()`, `body()`, `streamInfo()`, `metadata()`,
//! `connection()`), with Envoy's method names. Every object is a light userdata naming its
//! stream and kind (see `live`); all of them share one metatable whose `__index` is one table
//! of Rust functions, each finding its stream from the object it is called on. `httpCall`,
//! `body`, `bodyChunks` and `respond` are Lua functions of that table (see `PRELUDE`) that
//! yield the script's coroutine, as Envoy's do.

use crate::headers::HeaderList;
use crate::live::{Kind, Shared, Streams};
use crate::stream::{HttpCall, LocalResponse};
use mlua::{Function, LightUserData, Lua, MultiValue, Table, Value};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

const HEADERS: &[Kind] = &[Kind::Headers, Kind::Trailers];
const HANDLE: &[Kind] = &[Kind::Handle];
const BUFFER: &[Kind] = &[Kind::Buffer];
const STREAM_INFO: &[Kind] = &[Kind::StreamInfo];
const SSL: &[Kind] = &[Kind::Ssl];

static EMPTY: HeaderList = HeaderList::empty();

/// The header list a headers object reads.
pub(crate) fn list(live: &crate::live::Live, kind: Kind) -> &HeaderList {
    match kind {
        Kind::Trailers => live.stream.trailers.as_ref().unwrap_or(&EMPTY),
        _ => &live.stream.headers,
    }
}

/// Change the header list of a headers object.
fn edit(live: &Shared, kind: Kind, f: impl FnOnce(&mut HeaderList)) -> mlua::Result<()> {
    let mut live = live.try_borrow_mut().map_err(|_| busy())?;
    match editable(&mut live, kind) {
        Some(h) => {
            f(h);
            Ok(())
        }
        // Streaming through `bodyChunks()` sent the headers on (Envoy's error).
        None => Err(mlua::Error::runtime("header map can no longer be modified")),
    }
}

/// The header list a headers object edits, marked changed (None: the headers went on
/// already, streaming through `bodyChunks()`).
pub(crate) fn editable(live: &mut crate::live::Live, kind: Kind) -> Option<&mut HeaderList> {
    match kind {
        Kind::Headers if live.streaming => None,
        Kind::Headers => {
            live.stream.headers_changed = true;
            Some(&mut live.stream.headers)
        }
        _ => Some(live.stream.trailers.get_or_insert_with(HeaderList::new)),
    }
}

/// A stream in use by a call further up (a finalizer that calls back into the API).
fn busy() -> mlua::Error {
    mlua::Error::runtime("stream in use")
}

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

/// The functions of the method table, by the name scripts call them with; each checks that
/// it is called on an object of its kinds, whose phase is still running.
struct Methods<'a> {
    lua: &'a Lua,
    streams: &'a Rc<Streams>,
    table: Table,
}

impl Methods<'_> {
    /// `name(object, args...)` for objects of `kinds`.
    fn add<A, R>(
        &self,
        name: &'static str,
        kinds: &'static [Kind],
        f: impl Fn(&Lua, &Shared, Kind, A) -> mlua::Result<R> + 'static,
    ) -> mlua::Result<()>
    where
        A: mlua::FromLuaMulti,
        R: mlua::IntoLuaMulti,
    {
        let streams = self.streams.clone();
        let function = self
            .lua
            .create_function(move |lua, (o, args): (LightUserData, A)| {
                let (live, kind) = streams.find(o, name, kinds)?;
                f(lua, &live, kind, args)
            })?;
        self.table.raw_set(name, function)
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

/// Installs the handle's methods on light userdata; runs once per Lua state.
pub(crate) fn install(
    lua: &Lua,
    streams: &Rc<Streams>,
    clock: fn() -> SystemTime,
) -> mlua::Result<()> {
    let m = Methods {
        lua,
        streams,
        table: lua.create_table()?,
    };
    header_methods(&m)?;
    handle_methods(&m, clock)?;
    body_methods(&m)?;
    info_methods(&m)?;
    crate::raw_methods::install(lua, streams, &m.table)?;
    // The internals the prelude's yielding methods call (not methods of any object).
    let internal = Methods {
        lua,
        streams,
        table: lua.create_table()?,
    };
    yielding_internals(&internal)?;
    let streams_for_pairs = streams.clone();
    let pairs = lua.create_function(move |lua, o: LightUserData| {
        let kinds = &[
            Kind::Headers,
            Kind::Trailers,
            Kind::RouteMetadata,
            Kind::DynamicMetadata,
        ];
        let (live, kind) = streams_for_pairs.find(o, "__pairs", kinds)?;
        pairs_of(lua, &streams_for_pairs, o, &live, kind)
    })?;
    let globals = lua.globals();
    let yield_fn: Function = globals.get::<Table>("coroutine")?.get("yield")?;
    lua.load(PRELUDE)
        .set_name("=warden.lua.prelude")
        .call::<()>((m.table.clone(), internal.table, yield_fn))?;
    let meta = lua.create_table()?;
    meta.raw_set("__index", m.table)?;
    meta.raw_set("__pairs", pairs)?;
    meta.raw_set("__metatable", false)?;
    lua.set_type_metatable::<LightUserData>(Some(meta));
    Ok(())
}

/// Adds the yielding methods (`body`, `bodyChunks`, `httpCall`, `respond`) to the method table
/// over the internals they call. Every other method is a Rust function: with the count hook
/// on, each Lua instruction costs tens of machine instructions, and a Lua `headers()` that
/// answered the running phase's object without calling Rust cost more than the call it
/// saved (callgrind).
const PRELUDE: &str = r#"
local M, internal, yield = ...
local need_body, body = internal.needBody, internal.body
local stream_chunks, next_chunk, chunk = internal.streamChunks, internal.nextChunk, internal.chunk
local buffered = internal.buffered
local call, respond = internal.httpCall, internal.respond
-- The body is read (the coroutine suspended) only when a script asks for it.
M.body = function(self, ...)
  if need_body(self) then yield() end
  return body(self, ...)
end
-- A body not read yet streams: each step of the iterator waits for the next chunk.
M.bodyChunks = function(self)
  if not stream_chunks(self) then
    local given = false
    return function()
      local b = buffered(self, given)
      given = true
      return b
    end
  end
  return function()
    next_chunk(self)
    yield()
    return chunk(self)
  end
end
M.httpCall = function(self, ...)
  if call(self, ...) then return yield() end
end
M.respond = function(self, ...)
  respond(self, ...)
  yield()
  error("respond() ended the stream", 0)
end
"#;

/// Header values scripts read lately, as the Lua strings they got: the same value read again
/// (a method, a common path, an authority) is answered without making a string, which from
/// Rust costs a protected call under a memory limit (about 600 instructions, callgrind).
/// A Lua string is immutable and compared by value, so a script cannot tell.
#[derive(Default)]
struct RecentValues {
    entries: RefCell<Vec<(Box<[u8]>, mlua::LuaString)>>,
    /// The entry the next new value replaces once all are taken.
    next: Cell<usize>,
}

/// How many values are kept, and how long one may be (longer ones are made each time).
const RECENT_VALUES: usize = 16;
const RECENT_VALUE_BYTES: usize = 128;

impl RecentValues {
    fn string(&self, lua: &Lua, bytes: &[u8]) -> mlua::Result<mlua::LuaString> {
        if bytes.len() > RECENT_VALUE_BYTES {
            return lua.create_string(bytes);
        }
        let known = self.entries.try_borrow().ok().and_then(|e| {
            e.iter()
                .find(|(b, _)| **b == *bytes)
                .map(|(_, s)| s.clone())
        });
        if let Some(s) = known {
            return Ok(s);
        }
        // Made with no borrow held: the allocation may run a finalizer that reads a header.
        let s = lua.create_string(bytes)?;
        if let Ok(mut entries) = self.entries.try_borrow_mut() {
            let entry = (Box::from(bytes), s.clone());
            if entries.len() < RECENT_VALUES {
                entries.push(entry);
            } else {
                let i = self.next.get() % RECENT_VALUES;
                entries[i] = entry;
                self.next.set(i + 1);
            }
        }
        Ok(s)
    }
}

fn header_methods(m: &Methods<'_>) -> mlua::Result<()> {
    let recent = Rc::new(RecentValues::default());
    // `get` is also the metadata objects' (one table holds every kind's methods).
    m.add(
        "get",
        &[
            Kind::Headers,
            Kind::Trailers,
            Kind::RouteMetadata,
            Kind::DynamicMetadata,
        ],
        move |lua, live, kind, name: String| {
            let live = live.try_borrow().map_err(|_| busy())?;
            match kind {
                Kind::RouteMetadata => match live.stream.route_metadata.get(&name) {
                    Some(v) => json_to_lua(lua, v, 0),
                    None => Ok(Value::Nil),
                },
                Kind::DynamicMetadata => match live.stream.dynamic_metadata.get(&name) {
                    Some(fields) => Ok(Value::Table(json_object_to_lua(lua, fields)?)),
                    None => Ok(Value::Nil),
                },
                // The string is made while the stream is borrowed: an allocation may run a
                // finalizer, whose calls into the API then find the stream busy (an error).
                _ => match list(&live, kind).joined(&name) {
                    Some(v) => Ok(Value::String(recent.string(lua, &v)?)),
                    None => Ok(Value::Nil),
                },
            }
        },
    )?;
    m.add(
        "getAtIndex",
        HEADERS,
        |lua, live, kind, (name, index): (String, i64)| {
            let Ok(index) = usize::try_from(index) else {
                return Ok(Value::Nil);
            };
            let value = {
                let live = live.try_borrow().map_err(|_| busy())?;
                list(&live, kind)
                    .get_at_index(&name, index)
                    .map(<[u8]>::to_vec)
            };
            match value {
                Some(v) => Ok(Value::String(lua.create_string(v)?)),
                None => Ok(Value::Nil),
            }
        },
    )?;
    m.add("getNumValues", HEADERS, |_, live, kind, name: String| {
        let live = live.try_borrow().map_err(|_| busy())?;
        Ok(list(&live, kind).num_values(&name))
    })?;
    m.add(
        "add",
        HEADERS,
        |_, live, kind, (name, value): (String, Value)| {
            let value = bytes_of(&value)?;
            edit(live, kind, |h| h.add(&name, value))
        },
    )?;
    m.add(
        "replace",
        HEADERS,
        |_, live, kind, (name, value): (String, Value)| {
            let value = bytes_of(&value)?;
            edit(live, kind, |h| h.replace(&name, value))
        },
    )?;
    m.add("remove", HEADERS, |_, live, kind, name: String| {
        edit(live, kind, |h| h.remove(&name))
    })?;
    m.add(
        "setHttp1ReasonPhrase",
        HEADERS,
        |_, live, _, reason: String| {
            live.try_borrow_mut()
                .map_err(|_| busy())?
                .stream
                .reason_phrase = Some(reason);
            Ok(())
        },
    )?;
    Ok(())
}

/// `pairs(object)`: a headers object's entries as stored (pseudo-headers first), a metadata
/// object's fields.
fn pairs_of(
    lua: &Lua,
    streams: &Rc<Streams>,
    o: LightUserData,
    live: &Shared,
    kind: Kind,
) -> mlua::Result<(Function, Value, Value)> {
    let next: Function = lua.globals().get("next")?;
    match kind {
        Kind::RouteMetadata => {
            let table = {
                let l = live.try_borrow().map_err(|_| busy())?;
                json_object_to_lua(lua, &l.stream.route_metadata)?
            };
            Ok((next, Value::Table(table), Value::Nil))
        }
        Kind::DynamicMetadata => {
            let l = live.try_borrow().map_err(|_| busy())?;
            let table = lua.create_table()?;
            for (ns, fields) in &l.stream.dynamic_metadata {
                table.set(ns.as_str(), json_object_to_lua(lua, fields)?)?;
            }
            Ok((next, Value::Table(table), Value::Nil))
        }
        _ => {
            let streams = streams.clone();
            let mut at = 0usize;
            let next = lua.create_function_mut(move |lua, ()| {
                let (live, kind) = streams.find(o, "__pairs", HEADERS)?;
                let (n, v) = {
                    let l = live.try_borrow().map_err(|_| busy())?;
                    let Some((n, v)) = list(&l, kind).entry(at) else {
                        return Ok(MultiValue::new());
                    };
                    (n.as_bytes().to_vec(), v.to_vec())
                };
                at += 1;
                Ok(MultiValue::from_iter([
                    Value::String(lua.create_string(n)?),
                    Value::String(lua.create_string(v)?),
                ]))
            })?;
            Ok((next, Value::Nil, Value::Nil))
        }
    }
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

fn handle_methods(m: &Methods<'_>, clock: fn() -> SystemTime) -> mlua::Result<()> {
    use crate::live::object;
    fn generation(o: LightUserData) -> usize {
        crate::live::decode(o).map_or(0, |(g, _)| g)
    }
    // The handle's objects are its generation with another kind: the same object each time.
    for (name, kind) in [
        ("headers", Kind::Headers),
        ("metadata", Kind::RouteMetadata),
        ("streamInfo", Kind::StreamInfo),
        ("connection", Kind::Connection),
    ] {
        let streams = m.streams.clone();
        let f = m.lua.create_function(move |_, o: LightUserData| {
            streams.find(o, name, HANDLE)?;
            Ok(object(generation(o), kind))
        })?;
        m.table.raw_set(name, f)?;
    }
    let streams = m.streams.clone();
    let trailers = m.lua.create_function(move |_, o: LightUserData| {
        let (live, _) = streams.find(o, "trailers", HANDLE)?;
        let has = live
            .try_borrow()
            .map_err(|_| busy())?
            .stream
            .trailers
            .is_some();
        Ok(has.then(|| object(generation(o), Kind::Trailers)))
    })?;
    m.table.raw_set("trailers", trailers)?;
    for (name, level) in [
        ("logTrace", tracing::Level::TRACE),
        ("logDebug", tracing::Level::DEBUG),
        ("logInfo", tracing::Level::INFO),
        ("logWarn", tracing::Level::WARN),
        ("logErr", tracing::Level::ERROR),
        ("logCritical", tracing::Level::ERROR),
    ] {
        m.add(name, HANDLE, move |_, live, _, msg: mlua::LuaString| {
            let script = live.try_borrow().map_err(|_| busy())?.script.clone();
            log(level, &script, &msg.to_string_lossy());
            Ok(())
        })?;
    }
    m.add(
        "timestamp",
        HANDLE,
        move |_, _, _, _resolution: Option<String>| {
            let since = clock().duration_since(UNIX_EPOCH).unwrap_or_default();
            Ok(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
        },
    )?;
    m.add(
        "timestampString",
        HANDLE,
        move |_, _, _, resolution: Option<String>| {
            let since = clock().duration_since(UNIX_EPOCH).unwrap_or_default();
            Ok(match resolution.as_deref() {
                Some("MICROSECOND") => since.as_micros().to_string(),
                _ => since.as_millis().to_string(),
            })
        },
    )?;
    m.add("base64Escape", HANDLE, |_, _, _, s: mlua::LuaString| {
        Ok(crate::base64::encode(&s.as_bytes()))
    })?;
    m.add("filterContext", HANDLE, |lua, live, _, ()| {
        let l = live.try_borrow().map_err(|_| busy())?;
        json_object_to_lua(lua, &l.stream.filter_context)
    })?;
    m.add("clearRouteCache", HANDLE, |_, live, _, ()| {
        live.try_borrow_mut()
            .map_err(|_| busy())?
            .stream
            .clear_route_cache = true;
        Ok(())
    })?;
    Ok(())
}

fn body_methods(m: &Methods<'_>) -> mlua::Result<()> {
    m.add("length", BUFFER, |_, live, _, ()| {
        let l = live.try_borrow().map_err(|_| busy())?;
        Ok(l.stream.body.as_ref().map_or(0, Vec::len))
    })?;
    m.add(
        "getBytes",
        BUFFER,
        |lua, live, _, (index, length): (i64, i64)| {
            let bytes = {
                let l = live.try_borrow().map_err(|_| busy())?;
                let body = l.stream.body.as_deref().unwrap_or_default();
                let start = usize::try_from(index).unwrap_or(usize::MAX);
                let len = usize::try_from(length).unwrap_or(0);
                if start > body.len() || len > body.len() - start {
                    return Err(mlua::Error::runtime(
                        "index/length must be >= 0 and (index + length) must be <= buffer size",
                    ));
                }
                body[start..start + len].to_vec()
            };
            lua.create_string(bytes)
        },
    )?;
    // Envoy answers the new length (and sets `content-length` to it, which the proxy does
    // when it applies the body).
    m.add("setBytes", BUFFER, |_, live, _, bytes: mlua::LuaString| {
        let mut l = live.try_borrow_mut().map_err(|_| busy())?;
        let bytes = bytes.as_bytes().to_vec();
        let len = bytes.len();
        l.stream.body = Some(bytes);
        l.stream.body_changed = true;
        Ok(len)
    })?;
    Ok(())
}

fn info_methods(m: &Methods<'_>) -> mlua::Result<()> {
    use crate::live::object;
    fn info<R>(live: &Shared, f: impl FnOnce(&crate::StreamInfo) -> R) -> mlua::Result<R> {
        Ok(f(&live.try_borrow().map_err(|_| busy())?.stream.info))
    }
    m.add("protocol", STREAM_INFO, |_, live, _, ()| {
        info(live, |i| i.protocol)
    })?;
    m.add("downstreamLocalAddress", STREAM_INFO, |_, live, _, ()| {
        info(live, |i| i.downstream_local_address.to_string())
    })?;
    // No original-destination rewrite of the local address here: the same one.
    m.add(
        "downstreamDirectLocalAddress",
        STREAM_INFO,
        |_, live, _, ()| info(live, |i| i.downstream_local_address.to_string()),
    )?;
    // warden has no virtual clusters: Envoy's answer when none matched.
    m.add("virtualClusterName", STREAM_INFO, |_, _, _, ()| Ok(""))?;
    m.add(
        "downstreamDirectRemoteAddress",
        STREAM_INFO,
        |_, live, _, ()| info(live, |i| i.downstream_direct_remote_address.to_string()),
    )?;
    m.add("downstreamRemoteAddress", STREAM_INFO, |_, live, _, ()| {
        info(live, |i| i.downstream_remote_address.to_string())
    })?;
    m.add("requestedServerName", STREAM_INFO, |_, live, _, ()| {
        info(live, |i| i.requested_server_name.clone())
    })?;
    m.add("routeName", STREAM_INFO, |_, live, _, ()| {
        info(live, |i| i.route_name.clone())
    })?;
    let streams = m.streams.clone();
    let dynamic = m.lua.create_function(move |_, o: LightUserData| {
        streams.find(o, "dynamicMetadata", STREAM_INFO)?;
        let generation = crate::live::decode(o).map_or(0, |(g, _)| g);
        Ok(object(generation, Kind::DynamicMetadata))
    })?;
    m.table.raw_set("dynamicMetadata", dynamic)?;
    // The connection's TLS: nil on a plain connection.
    for (name, kinds) in [
        ("downstreamSslConnection", STREAM_INFO),
        ("ssl", &[Kind::Connection][..]),
    ] {
        let streams = m.streams.clone();
        let f = m.lua.create_function(move |_, o: LightUserData| {
            let (live, _) = streams.find(o, name, kinds)?;
            let has = live
                .try_borrow()
                .map_err(|_| busy())?
                .stream
                .info
                .ssl
                .is_some();
            let generation = crate::live::decode(o).map_or(0, |(g, _)| g);
            Ok(has.then(|| object(generation, Kind::Ssl)))
        })?;
        m.table.raw_set(name, f)?;
    }
    m.add(
        "set",
        &[Kind::DynamicMetadata],
        |_, live, _, (ns, key, value): (String, String, Value)| {
            let value = lua_to_json(&value, 0)?;
            let mut l = live.try_borrow_mut().map_err(|_| busy())?;
            l.stream
                .dynamic_metadata
                .entry(ns)
                .or_default()
                .insert(key, value);
            l.stream.dynamic_metadata_changed = true;
            Ok(())
        },
    )?;
    fn ssl<R>(live: &Shared, f: impl FnOnce(&crate::SslInfo) -> R) -> mlua::Result<R> {
        let l = live.try_borrow().map_err(|_| busy())?;
        l.stream
            .info
            .ssl
            .as_deref()
            .map(f)
            .ok_or_else(|| mlua::Error::runtime("not a TLS connection"))
    }
    m.add("peerCertificatePresented", SSL, |_, live, _, ()| {
        ssl(live, |s| s.peer_certificate_presented)
    })?;
    m.add("peerCertificateValidated", SSL, |_, live, _, ()| {
        ssl(live, |s| s.peer_certificate_validated)
    })?;
    m.add("uriSanPeerCertificate", SSL, |_, live, _, ()| {
        ssl(live, |s| s.uri_san_peer_certificate.clone())
    })?;
    m.add("dnsSansPeerCertificate", SSL, |_, live, _, ()| {
        ssl(live, |s| s.dns_sans_peer_certificate.clone())
    })?;
    m.add("subjectPeerCertificate", SSL, |_, live, _, ()| {
        ssl(live, |s| s.subject_peer_certificate.clone())
    })?;
    m.add("tlsVersion", SSL, |_, live, _, ()| {
        ssl(live, |s| s.tls_version.clone())
    })?;
    Ok(())
}

/// What `body`, `bodyChunks`, `httpCall` and `respond` call before and after they yield.
fn yielding_internals(m: &Methods<'_>) -> mlua::Result<()> {
    use crate::live::object;
    let buffer =
        |o: LightUserData| object(crate::live::decode(o).map_or(0, |(g, _)| g), Kind::Buffer);
    let streams = m.streams.clone();
    let body =
        m.lua
            .create_function(move |_, (o, always_wrap): (LightUserData, Option<bool>)| {
                let (live, _) = streams.find(o, "body", HANDLE)?;
                let mut l = live.try_borrow_mut().map_err(|_| busy())?;
                let has = l.stream.body.is_some();
                if !has && always_wrap == Some(true) {
                    l.stream.body = Some(Vec::new());
                }
                Ok((has || always_wrap == Some(true)).then(|| buffer(o)))
            })?;
    m.table.raw_set("body", body)?;
    m.add("needBody", HANDLE, |_, live, _, ()| {
        let mut l = live.try_borrow_mut().map_err(|_| busy())?;
        if l.streaming {
            return Err(mlua::Error::runtime(
                "cannot call body() after body streaming has started",
            ));
        }
        l.wants_body = l.stream.body_pending;
        Ok(l.wants_body)
    })?;
    m.add("streamChunks", HANDLE, |_, live, _, ()| {
        let mut l = live.try_borrow_mut().map_err(|_| busy())?;
        if l.stream.body_pending {
            l.stream.body_pending = false;
            l.streaming = true;
        }
        Ok(l.streaming && !l.chunks_ended)
    })?;
    m.add("nextChunk", HANDLE, |_, live, _, ()| {
        let mut l = live.try_borrow_mut().map_err(|_| busy())?;
        if !l.chunks_ended {
            l.wants_chunk = true;
        }
        Ok(())
    })?;
    let streams = m.streams.clone();
    let chunk = m.lua.create_function(move |_, o: LightUserData| {
        let (live, _) = streams.find(o, "bodyChunks", HANDLE)?;
        let ended = live.try_borrow().map_err(|_| busy())?.chunks_ended;
        Ok((!ended).then(|| buffer(o)))
    })?;
    m.table.raw_set("chunk", chunk)?;
    // A buffered body's one chunk (nil after it, and without a body).
    let streams = m.streams.clone();
    let buffered = m
        .lua
        .create_function(move |_, (o, given): (LightUserData, bool)| {
            let (live, _) = streams.find(o, "bodyChunks", HANDLE)?;
            let has = live.try_borrow().map_err(|_| busy())?.stream.body.is_some();
            Ok((has && !given).then(|| buffer(o)))
        })?;
    m.table.raw_set("buffered", buffered)?;
    m.add(
        "respond",
        HANDLE,
        |_, live, _, (headers, body): (Table, Option<mlua::LuaString>)| {
            if live.try_borrow().map_err(|_| busy())?.phase == crate::Phase::Response {
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
            live.try_borrow_mut().map_err(|_| busy())?.respond = Some(LocalResponse {
                status,
                headers,
                body: body.map(|b| b.as_bytes().to_vec()).unwrap_or_default(),
            });
            Ok(())
        },
    )?;
    m.add(
        "httpCall",
        HANDLE,
        |_,
         live,
         _,
         (cluster, headers, body, timeout, asynchronous): (
            String,
            Table,
            Option<mlua::LuaString>,
            Value,
            Option<bool>,
        )| {
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
                Value::Integer(t) => (u64::try_from(t).unwrap_or(0), asynchronous == Some(true)),
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
            let mut l = live.try_borrow_mut().map_err(|_| busy())?;
            if asynchronous {
                l.stream.async_calls.push(call);
                Ok(false)
            } else {
                l.call = Some(call);
                Ok(true)
            }
        },
    )?;
    Ok(())
}
