//! Where scripts run: one Lua state per script per worker thread (as Envoy keeps one per
//! worker), made on the worker's first request after a config load, each with an
//! instruction budget per call (a count hook once a phase runs long: `budget_watch`) and a
//! memory limit. Every phase runs as a coroutine, so `httpCall` can suspend it; a suspended
//! coroutine stays on its worker, in a thread-local table, and [`Pending`] names it. A
//! coroutine whose phase ended is reset and kept for the state's next phase, so a request
//! makes none.

use crate::budget_watch::{self, HOOK_STEP, INSTRUCTION_LIMIT};
use crate::handle;
use crate::headers::HeaderList;
use crate::live::{self, Kind, Live, Shared, Streams};
use crate::resume;
use crate::script::Script;
use crate::stream::{HttpCall, HttpReply, LocalResponse, Stream};
use mlua::thread::ThreadStatus;
use mlua::{Function, Lua, LuaOptions, RegistryKey, StdLib, Thread, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::SystemTime;

/// What one call of a script may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Lua VM instructions per phase (and per resumption after an `httpCall`), counted from
    /// when the phase has run a tick of CPU time (`budget_watch`).
    pub instructions: u64,
    /// Bytes the script's Lua state may hold (its globals, the request's objects).
    pub memory_bytes: usize,
}

impl Default for Limits {
    /// 10 million instructions (tens of milliseconds; Envoy's own filters take microseconds)
    /// and 32 MiB per state.
    fn default() -> Self {
        Limits {
            instructions: 10_000_000,
            memory_bytes: 32 << 20,
        }
    }
}

/// Which entry point a phase calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Request,
    Response,
}

/// Why a script stopped with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A Lua error (raised, or a bad call of the API).
    Runtime,
    /// The instruction budget ran out.
    InstructionLimit,
    /// The memory limit was reached.
    MemoryLimit,
}

/// A script's runtime error, as logged.
#[derive(Debug, Clone)]
pub struct ScriptError {
    pub script: Arc<str>,
    pub kind: ErrorKind,
    /// Lua's message, with the script's name and line (`name:LINE: ...`) when Lua gave one.
    pub message: String,
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// How a phase ended.
#[derive(Debug)]
pub enum Run {
    /// Go on with the (possibly changed) stream.
    Continue(Stream),
    /// `respond()`: answer with this instead.
    Respond(Stream, LocalResponse),
    /// The script failed (already logged and counted): Envoy goes on with the stream as the
    /// script left it.
    Failed(Stream, ScriptError),
    /// `httpCall()`: make the call, then [`Pending::resume`] with its answer.
    Call(Pending),
    /// `body()` on a body not read yet ([`Stream::body_pending`]): read it, then
    /// [`BodyWait::resume`] with it.
    Body(BodyWait),
    /// `bodyChunks()` on a body not read yet: the iterator waits for the next chunk
    /// ([`ChunkWait::resume`]); the headers as the script left them go on meanwhile
    /// ([`ChunkWait::stream`]).
    Chunk(ChunkWait),
}

/// A phase suspended on this worker (its coroutine is in the worker's table under `token`).
#[derive(Debug)]
struct Suspension {
    token: u64,
    program: Program,
}

impl Suspension {
    /// Resume the coroutine: `prepare` sets the stream up and makes the resumption's values.
    fn resume(self, prepare: impl FnOnce(&Lua, &Shared) -> mlua::Result<mlua::MultiValue>) -> Run {
        let suspended = WORKER.with(|w| w.borrow_mut().suspended.remove(&self.token));
        let Some(s) = suspended else {
            return Run::Failed(
                Stream::default(),
                ScriptError {
                    script: "".into(),
                    kind: ErrorKind::Runtime,
                    message: "a suspended script was resumed on another thread".into(),
                },
            );
        };
        let result = match prepare(&s.state.lua, &s.live) {
            Ok(args) => {
                budget_watch::watch(s.thread.state(), self.program.0.budget_steps(), || {
                    s.thread.resume::<()>(args)
                })
            }
            Err(e) => Err(e),
        }
        .map(|()| s.thread.status() != ThreadStatus::Resumable);
        self.program
            .finish(&s.state, s.thread, s.generation, s.live, result)
    }
}

impl Drop for Suspension {
    fn drop(&mut self) {
        // A request that went away while its phase waited: its coroutine goes too, and the
        // objects its script kept are dead.
        let _ = WORKER.try_with(|w| {
            let gone = w
                .try_borrow_mut()
                .ok()
                .and_then(|mut w| w.suspended.remove(&self.token));
            if let Some(s) = gone {
                s.state.streams.close(s.generation);
            }
        });
    }
}

/// A phase suspended in `httpCall`, on this worker.
#[derive(Debug)]
pub struct Pending {
    suspension: Suspension,
    pub call: HttpCall,
}

impl Pending {
    /// Resume the script with the call's answer, on the worker that suspended it.
    pub fn resume(self, reply: HttpReply) -> Run {
        let duplicates = self.call.return_duplicate_headers;
        self.suspension.resume(|lua, _| {
            let headers = handle::headers_to_table(lua, &reply.headers, duplicates)?;
            let body = match &reply.body {
                Some(b) => Value::String(lua.create_string(b)?),
                None => Value::Nil,
            };
            Ok(mlua::MultiValue::from_iter([Value::Table(headers), body]))
        })
    }
}

/// A phase suspended in `bodyChunks()` until the next chunk (or the body's end) comes.
#[derive(Debug)]
pub struct ChunkWait {
    suspension: Suspension,
}

impl ChunkWait {
    fn live<R>(&self, f: impl FnOnce(&mut Stream) -> R) -> Option<R> {
        WORKER.with(|w| {
            let w = w.borrow();
            let s = w.suspended.get(&self.suspension.token)?;
            let mut l = s.live.borrow_mut();
            Some(f(&mut l.stream))
        })
    }

    /// The stream as the script left it so far (its headers go on before the body), without
    /// the body.
    pub fn stream(&self) -> Option<Stream> {
        self.live(|s| Stream {
            headers: s.headers.clone(),
            body: None,
            body_pending: false,
            trailers: None,
            info: s.info.clone(),
            dynamic_metadata: s.dynamic_metadata.clone(),
            route_metadata: serde_json::Map::new(),
            filter_context: serde_json::Map::new(),
            headers_changed: s.headers_changed,
            body_changed: false,
            dynamic_metadata_changed: s.dynamic_metadata_changed,
            reason_phrase: s.reason_phrase.clone(),
            clear_route_cache: s.clear_route_cache,
            async_calls: std::mem::take(&mut s.async_calls),
        })
    }

    /// The chunk the script had (as it left it), taken to be sent on.
    pub fn take_chunk(&self) -> Option<Vec<u8>> {
        self.live(|s| s.body.take()).flatten()
    }

    /// Resume with the next chunk, or (None) the body's end and the trailers after it: the
    /// iterator then answers nil, and the last chunk stays the script's to change.
    pub fn resume(self, chunk: Option<Vec<u8>>, trailers: Option<HeaderList>) -> Run {
        self.suspension.resume(|_, live| {
            let mut l = live.borrow_mut();
            match chunk {
                Some(c) => l.stream.body = Some(c),
                None => {
                    l.chunks_ended = true;
                    l.stream.trailers = trailers;
                }
            }
            Ok(mlua::MultiValue::new())
        })
    }
}

/// A phase suspended in `body()` until the whole body is read.
#[derive(Debug)]
pub struct BodyWait {
    suspension: Suspension,
}

impl BodyWait {
    /// Resume the script with the body (None: there was none) and the trailers after it.
    pub fn resume(self, body: Option<Vec<u8>>, trailers: Option<HeaderList>) -> Run {
        self.suspension.resume(|_, live| {
            let mut l = live.borrow_mut();
            l.stream.body = body;
            l.stream.trailers = trailers;
            l.stream.body_pending = false;
            Ok(mlua::MultiValue::new())
        })
    }
}

/// The scripts of one filter config, checked at load; cheap to clone and shared by workers.
#[derive(Clone)]
pub struct Program(Arc<Inner>);

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("scripts", &self.0.scripts.len())
            .field("limits", &self.0.limits)
            .finish()
    }
}

struct Inner {
    id: u64,
    scripts: Vec<Script>,
    limits: Limits,
    clock: fn() -> SystemTime,
    errors: AtomicU64,
}

impl Inner {
    fn budget_steps(&self) -> u64 {
        self.limits
            .instructions
            .div_ceil(u64::from(HOOK_STEP))
            .max(1)
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Program {
    pub fn new(scripts: Vec<Script>, limits: Limits) -> Program {
        Program::with_clock(scripts, limits, SystemTime::now)
    }

    /// With the clock `timestamp()` reads.
    pub fn with_clock(scripts: Vec<Script>, limits: Limits, clock: fn() -> SystemTime) -> Program {
        Program(Arc::new(Inner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            scripts,
            limits,
            clock,
            errors: AtomicU64::new(0),
        }))
    }

    pub fn scripts(&self) -> &[Script] {
        &self.0.scripts
    }

    /// Script errors so far (Envoy's `lua.errors`).
    pub fn errors(&self) -> u64 {
        self.0.errors.load(Ordering::Relaxed)
    }

    /// Whether script `index` defines the entry point of `phase` (loading it on this worker).
    pub fn has(&self, index: usize, phase: Phase) -> bool {
        self.state(index).is_some_and(|s| s.entry(phase).is_some())
    }

    /// Which entry points script `index` defines, as (request, response): [`Program::has`] of
    /// both phases with one look-up of the worker's state.
    pub fn entry_points(&self, index: usize) -> (bool, bool) {
        self.state(index).map_or((false, false), |s| {
            (s.on_request.is_some(), s.on_response.is_some())
        })
    }

    /// Run `phase` of script `index` over `stream`.
    pub fn run(&self, index: usize, phase: Phase, stream: Stream) -> Run {
        let Some(state) = self.state(index) else {
            return Run::Continue(stream);
        };
        let Some(entry) = state.entry(phase) else {
            return Run::Continue(stream);
        };
        let script = self.0.scripts[index].name.clone();
        let live: Shared = Rc::new(RefCell::new(Live::new(stream, phase, script)));
        let generation = state.streams.open(live.clone());
        let thread = match state.thread(entry) {
            Ok(t) => t,
            Err(e) => return self.failed(&state, generation, live, e),
        };
        let co = thread.state();
        let result = budget_watch::watch(co, self.0.budget_steps(), || {
            resume::start(
                &state.lua,
                state.main,
                co,
                live::object(generation, Kind::Handle),
            )
        });
        self.finish(&state, thread, generation, live, result)
    }

    /// What a resumption's result (whether the phase ended) means.
    fn finish(
        &self,
        state: &Rc<State>,
        thread: Thread,
        generation: usize,
        live: Shared,
        result: mlua::Result<bool>,
    ) -> Run {
        let ended = match result {
            Ok(ended) => ended,
            Err(e) => return self.failed(state, generation, live, e),
        };
        if ended {
            state.streams.close(generation);
            state.keep(thread);
            return Run::Continue(take(live));
        }
        let (respond, call) = {
            let mut l = live.borrow_mut();
            (l.respond.take(), l.call.take())
        };
        if let Some(r) = respond {
            state.streams.close(generation);
            state.keep(thread);
            return Run::Respond(take(live), r);
        }
        let (wants_body, wants_chunk) = {
            let mut l = live.borrow_mut();
            (
                std::mem::take(&mut l.wants_body),
                std::mem::take(&mut l.wants_chunk),
            )
        };
        if call.is_none() && !wants_body && !wants_chunk {
            return self.failed(
                state,
                generation,
                live,
                mlua::Error::runtime("script yielded outside an Envoy API call"),
            );
        }
        let token = WORKER.with(|w| {
            let mut w = w.borrow_mut();
            w.next_token += 1;
            let token = w.next_token;
            w.suspended.insert(
                token,
                Suspended {
                    state: state.clone(),
                    thread,
                    generation,
                    live,
                },
            );
            token
        });
        let suspension = Suspension {
            token,
            program: self.clone(),
        };
        match call {
            Some(call) => Run::Call(Pending { suspension, call }),
            None if wants_chunk => Run::Chunk(ChunkWait { suspension }),
            None => Run::Body(BodyWait { suspension }),
        }
    }

    fn failed(&self, state: &State, generation: usize, live: Shared, e: mlua::Error) -> Run {
        state.streams.close(generation);
        self.0.errors.fetch_add(1, Ordering::Relaxed);
        let script = live.borrow().script.clone();
        let error = classify(script, &e);
        tracing::error!(script = %error.script, "script log: {}", error.message);
        // What the failed call allocated goes now, not at the next request's expense.
        let _ = state.lua.gc_collect();
        Run::Failed(take(live), error)
    }

    /// This worker's state for script `index`, made (and its chunk run) on first use.
    fn state(&self, index: usize) -> Option<Rc<State>> {
        let key = (self.0.id, index);
        let found = WORKER.with(|w| {
            let w = w.borrow();
            w.states
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, s)| s.clone())
        });
        if found.is_some() {
            return found;
        }
        let script = self.0.scripts.get(index)?;
        let state = match State::load(script, &self.0) {
            Ok(s) => Rc::new(s),
            Err(e) => {
                self.0.errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(script = %script.name, "script log: {e}");
                Rc::new(State::broken(&self.0)?)
            }
        };
        WORKER.with(|w| {
            let mut w = w.borrow_mut();
            // States of configs that were replaced go with the first new state made here.
            w.states.retain(|(_, s)| s.program.strong_count() > 0);
            w.states.push((key, state.clone()));
        });
        Some(state)
    }
}

/// The stream of a phase that ended (its generation closed): moved out of the last reference,
/// without making and dropping a default one in its place.
fn take(live: Shared) -> Stream {
    match Rc::try_unwrap(live) {
        Ok(live) => live.into_inner().stream,
        Err(live) => std::mem::take(&mut live.borrow_mut().stream),
    }
}

fn classify(script: Arc<str>, e: &mlua::Error) -> ScriptError {
    let (kind, message) = match root(e) {
        mlua::Error::MemoryError(m) => (
            ErrorKind::MemoryLimit,
            format!("memory limit reached ({m})"),
        ),
        other => {
            let m = match other {
                mlua::Error::RuntimeError(m) => m.clone(),
                other => other.to_string(),
            };
            let kind = if m.contains(INSTRUCTION_LIMIT) {
                ErrorKind::InstructionLimit
            } else {
                ErrorKind::Runtime
            };
            // Lua's message is the first line; a traceback follows.
            (kind, m.lines().next().unwrap_or_default().to_string())
        }
    };
    ScriptError {
        script,
        kind,
        message,
    }
}

/// The error a callback error wraps.
fn root(e: &mlua::Error) -> &mlua::Error {
    match e {
        mlua::Error::CallbackError { cause, .. } => root(cause),
        other => other,
    }
}

/// The coroutines a state keeps for its next phases (more are made when phases wait).
const KEPT_THREADS: usize = 4;

/// An entry point: the function, and its registry key (a phase pushes it from there).
struct Entry {
    function: Function,
    key: RegistryKey,
}

/// One script's Lua state on one worker.
struct State {
    lua: Lua,
    /// The state's main thread, which phases are resumed from.
    main: *mut mlua::ffi::lua_State,
    on_request: Option<Entry>,
    on_response: Option<Entry>,
    /// The phases running or waiting, by generation (what the objects scripts hold name).
    streams: Rc<Streams>,
    /// Coroutines whose phase ended, for the next ones.
    idle: RefCell<Vec<Thread>>,
    program: Weak<Inner>,
}

impl State {
    fn entry(&self, phase: Phase) -> Option<&Entry> {
        match phase {
            Phase::Request => self.on_request.as_ref(),
            Phase::Response => self.on_response.as_ref(),
        }
    }

    /// A coroutine that calls `entry`: one a phase left (with `entry` pushed, or reset), or a
    /// new one (it inherits the instruction hook).
    fn thread(&self, entry: &Entry) -> mlua::Result<Thread> {
        let kept = self.idle.borrow_mut().pop();
        if let Some(thread) = kept {
            if resume::push_entry(thread.state(), entry.key.id()) {
                return Ok(thread);
            }
            // A coroutine left suspended by `respond()` is closed here (its to-be-closed
            // variables run); an error doing so goes with it.
            if thread.reset(entry.function.clone()).is_ok() {
                return Ok(thread);
            }
        }
        self.lua.create_thread(entry.function.clone())
    }

    /// Keep `thread`, whose phase ended, for a next phase.
    fn keep(&self, thread: Thread) {
        let mut idle = self.idle.borrow_mut();
        if idle.len() < KEPT_THREADS {
            idle.push(thread);
        }
    }

    fn new_lua(program: &Inner) -> mlua::Result<(Lua, Rc<Streams>)> {
        // Envoy opens LuaJIT's standard libraries; `debug` (which could remove the hook) and
        // the C module loader stay out.
        let lua = Lua::new_with(StdLib::ALL_SAFE, LuaOptions::default())?;
        lua.set_memory_limit(program.limits.memory_bytes)?;
        budget_watch::install(&lua)?;
        let globals = lua.globals();
        let resolution = lua.create_table()?;
        resolution.set("MILLISECOND", "MILLISECOND")?;
        resolution.set("MICROSECOND", "MICROSECOND")?;
        globals.set("EnvoyTimestampResolution", resolution)?;
        let streams = Rc::new(Streams::default());
        handle::install(&lua, &streams, program.clock)?;
        Ok((lua, streams))
    }

    fn load(script: &Script, program: &Arc<Inner>) -> mlua::Result<State> {
        let (lua, streams) = Self::new_lua(program)?;
        let main = budget_watch::main_thread(&lua)?;
        budget_watch::watch(main, program.budget_steps(), || {
            lua.load(&*script.source)
                .set_name(format!("={}", script.name))
                .exec()
        })?;
        let globals = lua.globals();
        let entry = |name: &str| -> mlua::Result<Option<Entry>> {
            match globals.get::<Value>(name) {
                Ok(Value::Function(function)) => Ok(Some(Entry {
                    key: lua.create_registry_value(function.clone())?,
                    function,
                })),
                _ => Ok(None),
            }
        };
        Ok(State {
            on_request: entry("envoy_on_request")?,
            on_response: entry("envoy_on_response")?,
            main,
            lua: lua.clone(),
            streams,
            idle: RefCell::new(Vec::new()),
            program: Arc::downgrade(program),
        })
    }

    /// A state whose chunk failed to run: no entry points (the filter passes streams).
    fn broken(program: &Arc<Inner>) -> Option<State> {
        let (lua, streams) = Self::new_lua(program).ok()?;
        let main = budget_watch::main_thread(&lua).ok()?;
        Some(State {
            lua,
            main,
            on_request: None,
            on_response: None,
            streams,
            idle: RefCell::new(Vec::new()),
            program: Arc::downgrade(program),
        })
    }
}

/// A phase waiting on this worker: its state, coroutine and stream.
struct Suspended {
    state: Rc<State>,
    thread: Thread,
    generation: usize,
    live: Shared,
}

#[derive(Default)]
struct Worker {
    /// Each loaded script's state, by (program, script index): a few, searched in order.
    states: Vec<((u64, usize), Rc<State>)>,
    suspended: HashMap<u64, Suspended>,
    next_token: u64,
}

thread_local! {
    static WORKER: RefCell<Worker> = RefCell::new(Worker::default());
}
