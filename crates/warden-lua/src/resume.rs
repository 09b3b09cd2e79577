//! A phase's start as Lua's own `lua_resume` on a kept coroutine: the entry point pushed from
//! the registry onto a coroutine whose last phase ended, the handle after it. mlua's
//! `Thread::reset` and `Thread::resume` around the same call (status checks, stack guards, the
//! arguments moved from the main thread, the results moved back and converted) cost a request
//! about 600 instructions (callgrind). A phase's later resumptions (after `httpCall`, a body,
//! a chunk) stay mlua's: they are rare.
//!
//! An error is made into the `mlua::Error` mlua's resume makes of it (the callback's error a
//! Rust callback raised, else the value's text with the coroutine's traceback), so what is
//! logged and classified does not change.

#![allow(unsafe_code)]

use mlua::{ffi, LightUserData, Lua, Value};
use std::ffi::c_int;
use std::ptr;

/// Pushes the function under registry key `key` onto `co` when `co` is a coroutine whose
/// last phase ended (no frames, an empty stack): whether it did. Else the caller resets it
/// (a coroutine left suspended) or makes another.
pub(crate) fn push_entry(co: *mut ffi::lua_State, key: c_int) -> bool {
    // SAFETY: `co` is a live coroutine of the caller's state (kept by its `Thread`); status,
    // top and stack queries raise nothing; `lua_rawgeti` on the registry reads a table slot
    // (no metamethod, no allocation) into a slot the empty stack has (LUA_MINSTACK).
    unsafe {
        if ffi::lua_status(co) != ffi::LUA_OK || ffi::lua_gettop(co) != 0 {
            return false;
        }
        let mut ar: ffi::lua_Debug = std::mem::zeroed();
        if ffi::lua_getstack(co, 0, &mut ar) != 0 {
            return false;
        }
        if ffi::lua_rawgeti(co, ffi::LUA_REGISTRYINDEX, ffi::lua_Integer::from(key))
            != ffi::LUA_TFUNCTION
        {
            ffi::lua_settop(co, 0);
            return false;
        }
        true
    }
}

/// Starts the coroutine `co` (its function on its stack, as [`push_entry`] or mlua's
/// `reset`/`create_thread` leave it) with `handle`: `Ok(true)` when the phase ended, `Ok(false)`
/// when it yielded. `from` is the state's main thread.
pub(crate) fn start(
    lua: &Lua,
    from: *mut ffi::lua_State,
    co: *mut ffi::lua_State,
    handle: LightUserData,
) -> mlua::Result<bool> {
    let mut results: c_int = 0;
    // SAFETY: `co` is a live coroutine with its function on its stack, not running;
    // lua_checkstack raises nothing (it answers 0 when the stack cannot grow); pushing a
    // light userdata allocates nothing; lua_resume runs the coroutine protected and returns
    // its status, with its results (or its error) on its stack. Nothing of Rust's is alive in
    // this frame across it that Lua could skip (errors do not leave lua_resume).
    let status = unsafe {
        if ffi::lua_checkstack(co, 2) == 0 {
            return Err(mlua::Error::StackError);
        }
        ffi::lua_pushlightuserdata(co, handle.0);
        ffi::lua_resume(co, from, 1, &mut results)
    };
    match status {
        ffi::LUA_OK | ffi::LUA_YIELD => {
            // SAFETY: the results (or yielded values) are the top `results` slots of `co`;
            // mlua moves them away too, so a later resumption finds only its arguments.
            unsafe { ffi::lua_pop(co, results) };
            Ok(status == ffi::LUA_OK)
        }
        _ => Err(error(lua, co, status)),
    }
}

/// The error on top of the failed coroutine `co` as mlua's resume makes it.
fn error(lua: &Lua, co: *mut ffi::lua_State, status: c_int) -> mlua::Error {
    // SAFETY: the closure runs protected on the state's own thread; it moves the error value
    // (the top of `co`, which failed and runs no more) onto that thread's stack.
    let value = unsafe {
        lua.exec_raw::<Value>((), |state| {
            ffi::lua_xmove(co, state, 1);
        })
    };
    let value = match value {
        // A Rust callback's error (a panic's resumes unwinding in the conversion, as in mlua).
        Ok(Value::Error(e)) => return *e,
        Ok(v) => v,
        Err(e) => return e,
    };
    let memory = status == ffi::LUA_ERRMEM;
    // SAFETY: the closure runs protected with the value at stack 1; luaL_tolstring and
    // luaL_traceback push strings (raising only when out of memory, with nothing of Rust's to
    // drop); mlua adds no traceback to memory errors.
    let text = unsafe {
        lua.exec_raw::<mlua::MultiValue>(value, |state| {
            let text = ffi::luaL_tolstring(state, 1, ptr::null_mut());
            if !memory && ffi::lua_checkstack(state, ffi::LUA_TRACEBACK_STACK) != 0 {
                ffi::luaL_traceback(state, co, text, 0);
            }
        })
    };
    let message = match text {
        Ok(values) => match values.into_iter().last() {
            Some(Value::String(s)) => s.to_string_lossy(),
            _ => String::new(),
        },
        Err(e) => return e,
    };
    if memory {
        mlua::Error::MemoryError(message)
    } else {
        mlua::Error::RuntimeError(message)
    }
}
