//! The instruction budget without a count hook on every phase. In Lua 5.4 any count hook makes
//! every VM instruction go through `luaG_traceexec` (about a twentieth of what the article's
//! script cost a request, callgrind), so a phase runs unhooked, and a timer on the worker
//! thread's CPU time ticks every [`TICK`]: a tick that finds the phase it found last time
//! still running hooks it (`lua_sethook` from a signal handler, as `lua.c` does for Ctrl-C,
//! which `ldebug.c` allows), and from then on the budget is spent as before, one step per
//! [`HOOK_STEP`] instructions, an error when none is left. A runaway phase is stopped after
//! one or two ticks plus its budget. Coroutines a script makes are hooked from the start (no
//! tick could find them). Where no timer can be made, every phase is hooked from the start.

#![allow(unsafe_code)]

use mlua::ffi;
use std::cell::Cell;
use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The hook fires every this many instructions; the budget is counted in these steps.
pub(crate) const HOOK_STEP: u32 = 1000;

/// CPU time of a worker thread between ticks.
const TICK: Duration = Duration::from_millis(10);

/// Marks the hook's error so it can be told from a script's own.
pub(crate) const INSTRUCTION_LIMIT: &str = "instruction limit reached";

// What the signal handler reads and writes: atomics of this thread (a handler runs on the
// thread it interrupts), const-initialised, so reading them allocates nothing.
thread_local! {
    /// The Lua thread whose phase runs here (null: none).
    static RUNNING: AtomicPtr<ffi::lua_State> = const { AtomicPtr::new(ptr::null_mut()) };
    /// Phases started on this thread: a tick tells a long one by finding it twice.
    static STARTED: AtomicU64 = const { AtomicU64::new(0) };
    /// The phase the last tick found running.
    static SEEN: AtomicU64 = const { AtomicU64::new(0) };
    /// Whether the running phase's Lua thread is hooked.
    static HOOKED: AtomicBool = const { AtomicBool::new(false) };
    /// Budget steps the running phase has left.
    static LEFT: AtomicU64 = const { AtomicU64::new(0) };
    /// This thread's timer (None: none could be made), made on its first phase.
    static TIMER: Cell<Option<Option<Timer>>> = const { Cell::new(None) };
}

/// Runs `run` (a phase's resumption of `state`) with `steps` budget steps.
pub(crate) fn watch<R>(state: *mut ffi::lua_State, steps: u64, run: impl FnOnce() -> R) -> R {
    let ticking = TIMER.with(|t| {
        let timer = t.take().unwrap_or_else(Timer::start);
        let ticking = timer.is_some();
        t.set(Some(timer));
        ticking
    });
    LEFT.with(|l| l.store(steps, Ordering::Relaxed));
    STARTED.with(|s| s.fetch_add(1, Ordering::Relaxed));
    if !ticking {
        HOOKED.with(|h| h.store(true, Ordering::Relaxed));
        // SAFETY: `state` is a live Lua thread (the caller's); setting a hook raises nothing.
        unsafe { hook(state) };
    }
    RUNNING.with(|r| r.store(state, Ordering::Relaxed));
    compiler_fence(Ordering::SeqCst);
    // Unhooks `state` after `run`, even when it panics.
    struct Done(*mut ffi::lua_State);
    impl Drop for Done {
        fn drop(&mut self) {
            RUNNING.with(|r| r.store(ptr::null_mut(), Ordering::Relaxed));
            compiler_fence(Ordering::SeqCst);
            if HOOKED.with(|h| h.swap(false, Ordering::Relaxed)) {
                // SAFETY: the Lua thread is the caller's, alive; removing a hook raises
                // nothing. No tick hooks it again: RUNNING is null.
                unsafe { ffi::lua_sethook(self.0, None, 0, 0) };
            }
        }
    }
    let _done = Done(state);
    run()
}

/// Hooks `state` with the budget's count hook.
///
/// # Safety
/// `state` is a live Lua thread of this OS thread.
unsafe fn hook(state: *mut ffi::lua_State) {
    let step = c_int::try_from(HOOK_STEP).unwrap_or(c_int::MAX);
    // SAFETY: as the caller promises; lua_sethook only sets fields of the thread.
    unsafe { ffi::lua_sethook(state, Some(spend), ffi::LUA_MASKCOUNT, step) };
}

/// The count hook: one budget step, Lua's error when none is left.
unsafe extern "C-unwind" fn spend(state: *mut ffi::lua_State, _: *mut ffi::lua_Debug) {
    let left = LEFT.with(|l| l.load(Ordering::Relaxed));
    if left > 0 {
        LEFT.with(|l| l.store(left - 1, Ordering::Relaxed));
        return;
    }
    // SAFETY: a hook may raise; nothing of Rust's is alive in this frame to be dropped.
    unsafe {
        ffi::lua_pushlstring(
            state,
            INSTRUCTION_LIMIT.as_ptr().cast(),
            INSTRUCTION_LIMIT.len(),
        );
        ffi::lua_error(state);
    }
}

/// The tick's signal handler: hooks a phase found running twice in a row.
extern "C" fn tick(_: c_int) {
    let state = RUNNING.with(|r| r.load(Ordering::Relaxed));
    if state.is_null() {
        return;
    }
    let started = STARTED.with(|s| s.load(Ordering::Relaxed));
    if SEEN.with(|s| s.swap(started, Ordering::Relaxed)) != started {
        return;
    }
    if !HOOKED.with(|h| h.swap(true, Ordering::Relaxed)) {
        // SAFETY: the running phase's Lua thread, interrupted on this OS thread; lua_sethook
        // may be called asynchronously (ldebug.c: it sets the hook's fields and the
        // running Lua functions' traps, nothing else).
        unsafe { hook(state) };
    }
}

/// `coroutine.create` and `coroutine.wrap` (their originals the first upvalue) with the
/// coroutine hooked from the start.
unsafe extern "C-unwind" fn create_hooked(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: called by Lua as `install`'s closures; nothing of Rust's is alive across the
    // calls that can raise. The check is the original's, made here so its error names the
    // function as the script called it.
    unsafe {
        ffi::luaL_checktype(state, 1, ffi::LUA_TFUNCTION);
        ffi::lua_settop(state, 1);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, 1, 1);
        // A coroutine, or `wrap`'s function, whose first upvalue is its coroutine.
        let co = if ffi::lua_type(state, -1) == ffi::LUA_TTHREAD {
            ffi::lua_tothread(state, -1)
        } else if !ffi::lua_getupvalue(state, -1, 1).is_null() {
            let co = ffi::lua_tothread(state, -1);
            ffi::lua_pop(state, 1);
            co
        } else {
            ptr::null_mut()
        };
        if !co.is_null() {
            hook(co);
        }
        1
    }
}

/// Puts `create_hooked` in front of `coroutine.create` and `coroutine.wrap`.
pub(crate) fn install(lua: &mlua::Lua) -> mlua::Result<()> {
    let coroutine: mlua::Table = lua.globals().get("coroutine")?;
    for name in ["create", "wrap"] {
        let original: mlua::Function = coroutine.get(name)?;
        // SAFETY: the closure runs protected with the original at stack 1 and leaves the new
        // closure there; it holds nothing that needs dropping.
        let hooked: mlua::Function = unsafe {
            lua.exec_raw(original, |state| {
                ffi::lua_pushcclosure(state, create_hooked, 1);
            })
        }?;
        coroutine.set(name, hooked)?;
    }
    Ok(())
}

/// The Lua state's main thread (a script's top level runs there).
pub(crate) fn main_thread(lua: &mlua::Lua) -> mlua::Result<*mut ffi::lua_State> {
    let mut main = ptr::null_mut();
    // SAFETY: the closure only reads the state it is given.
    unsafe {
        lua.exec_raw::<()>((), |state| {
            main = state;
        })
    }?;
    Ok(main)
}

/// A thread's CPU-time timer, deleted with the thread.
struct Timer(libc::timer_t);

/// The signal ticks are sent with (0: none could be set up).
fn tick_signal() -> c_int {
    static SIGNAL: OnceLock<c_int> = OnceLock::new();
    *SIGNAL.get_or_init(|| {
        let signal = libc::SIGRTMIN() + 7;
        // SAFETY: a zeroed sigaction is valid; the handler only touches this thread's
        // atomics and calls lua_sethook, which are async-signal-safe. SA_RESTART: system
        // calls the tick lands in go on.
        let set = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = tick as extern "C" fn(c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, ptr::null_mut()) == 0
        };
        if set {
            signal
        } else {
            0
        }
    })
}

impl Timer {
    /// A timer ticking this thread every [`TICK`] of its CPU time (None: it cannot be made).
    fn start() -> Option<Timer> {
        let signal = tick_signal();
        if signal == 0 {
            return None;
        }
        // SAFETY: plain libc calls on values made here; a zeroed sigevent is valid.
        unsafe {
            let mut event: libc::sigevent = std::mem::zeroed();
            event.sigev_notify = libc::SIGEV_THREAD_ID;
            event.sigev_signo = signal;
            event.sigev_notify_thread_id = libc::gettid();
            let mut id: libc::timer_t = ptr::null_mut();
            if libc::timer_create(libc::CLOCK_THREAD_CPUTIME_ID, &mut event, &mut id) != 0 {
                return None;
            }
            let timer = Timer(id);
            let every = libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::c_long::try_from(TICK.as_nanos()).unwrap_or(10_000_000),
            };
            let spec = libc::itimerspec {
                it_interval: every,
                it_value: every,
            };
            (libc::timer_settime(timer.0, 0, &spec, ptr::null_mut()) == 0).then_some(timer)
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: the id is this timer's, deleted once.
        unsafe { libc::timer_delete(self.0) };
    }
}
