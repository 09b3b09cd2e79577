//! Envoy's Lua HTTP filter API (`envoy.filters.http.lua`) over plain request and response
//! data, on an embedded Lua 5.4: a script's `envoy_on_request(handle)` and
//! `envoy_on_response(handle)` get Envoy's stream handle (`headers()`, `body()`,
//! `trailers()`, `metadata()`, `streamInfo()`, `connection()`, `respond()`, `httpCall()`,
//! `log*()`, `timestamp()`, `base64Escape()`, `filterContext()`, `clearRouteCache()`).
//!
//! Lua 5.4 rather than LuaJIT (Envoy's runtime): its allocator hook lets a state's memory be
//! bounded (`Limits::memory_bytes`), which mlua cannot do for LuaJIT, and its count hook
//! bounds instructions per call. Scripts written for Envoy run unchanged unless they use
//! LuaJIT's `ffi`/`bit` modules.
//!
//! The proxy turns its request into a [`Stream`], calls [`Program::run`], and applies what
//! comes back ([`Run`]); nothing here does I/O (an `httpCall` comes back as [`Run::Call`]).

// `raw_methods`, `resume` and `budget_watch` call Lua's C API (and libc's timers): only they allow it.
#![deny(unsafe_code)]

pub mod base64;
mod budget_watch;
mod handle;
pub mod headers;
mod live;
mod raw_methods;
mod resume;
pub mod script;
pub mod stream;
mod vm;

pub use headers::HeaderList;
pub use script::{Script, SyntaxError};
pub use stream::{
    DynamicMetadata, HttpCall, HttpReply, LocalResponse, SslInfo, Stream, StreamInfo,
};
pub use vm::{BodyWait, ChunkWait, ErrorKind, Limits, Pending, Phase, Program, Run, ScriptError};
