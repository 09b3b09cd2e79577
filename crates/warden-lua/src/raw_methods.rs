//! The methods every script calls (`headers()`, and a headers object's `get`, `add`,
//! `replace`, `remove`) as plain Lua C functions in front of their mlua callbacks: an mlua
//! callback costs a call about 600 instructions (a protected call, `catch_unwind`, argument
//! conversion), which was most of what the article's script cost a request (callgrind).
//!
//! Each C function answers only the common case (the right number of arguments, strings,
//! an object of a running phase that is not in use); anything else goes to the mlua callback
//! it stands in front of (its first upvalue), which gives the error (or answer) it always
//! gave. Lua raises with `longjmp`, which must not pass Rust values that need dropping: the
//! fast paths call nothing that can raise until every borrow and value of theirs is gone, and
//! only copy a header value into Lua (`lua_pushlstring`, which raises only when out of
//! memory) after that.

#![allow(unsafe_code)]

use crate::handle::{editable, list};
use crate::live::{self, Kind, Streams};
use mlua::{ffi, Function, LightUserData, Lua, Table, Variadic};
use std::ffi::c_int;
use std::rc::Rc;

/// The methods replaced, with their C functions.
const METHODS: [(&str, ffi::lua_CFunction); 5] = [
    ("headers", headers),
    ("get", get),
    ("add", add),
    ("replace", replace),
    ("remove", remove),
];

/// Puts the C functions in `table` in front of the callbacks it holds under their names.
pub(crate) fn install(lua: &Lua, streams: &Rc<Streams>, table: &Table) -> mlua::Result<()> {
    let slow = METHODS
        .iter()
        .map(|(name, _)| table.raw_get::<Function>(*name))
        .collect::<mlua::Result<Variadic<Function>>>()?;
    let n = c_int::try_from(METHODS.len()).map_err(mlua::Error::external)?;
    // SAFETY: the closure runs protected (exec_raw) with the callbacks at stack 1..=n and
    // leaves the n C closures there; it holds no Rust value that needs dropping when one of
    // the allocating calls raises (the Rc is turned into a pointer after the last of them
    // that could leave it behind).
    let fast: Variadic<Function> = unsafe {
        lua.exec_raw(slow, |state| {
            let slot = ffi::lua_newuserdatauv(state, size_of::<*const Streams>(), 0)
                .cast::<*const Streams>();
            slot.write(std::ptr::null());
            ffi::lua_createtable(state, 0, 1);
            ffi::lua_pushcfunction(state, release_streams);
            ffi::lua_setfield(state, -2, c"__gc".as_ptr());
            ffi::lua_setmetatable(state, -2);
            slot.write(Rc::into_raw(Rc::clone(streams)));
            let context = n + 1;
            for (i, (_, f)) in (1..=n).zip(METHODS) {
                ffi::lua_pushvalue(state, i);
                ffi::lua_pushvalue(state, context);
                ffi::lua_pushcclosure(state, f, 2);
            }
            for i in (1..=n).rev() {
                ffi::lua_replace(state, i);
            }
            ffi::lua_settop(state, n);
        })
    }?;
    for ((name, _), f) in METHODS.iter().zip(fast) {
        table.raw_set(*name, f)?;
    }
    Ok(())
}

/// The context userdata's `__gc`: the streams go with the state (or earlier, if finalizers
/// run in another order; a method then finds none and calls its callback).
unsafe extern "C-unwind" fn release_streams(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua calls `__gc` with the userdata made in `install`, whose block holds a
    // pointer from `Rc::into_raw` or null; it is nulled here so it is released once.
    unsafe {
        let slot = ffi::lua_touserdata(state, 1).cast::<*const Streams>();
        if !slot.is_null() {
            let streams = slot.read();
            slot.write(std::ptr::null());
            if !streams.is_null() {
                drop(Rc::from_raw(streams));
            }
        }
    }
    0
}

/// The streams of the running C closure's state (its second upvalue).
///
/// # Safety
/// `state` is running one of `install`'s closures. The reference must not be used across a
/// call that can run Lua code (a finalizer could release the streams).
unsafe fn streams<'a>(state: *mut ffi::lua_State) -> Option<&'a Streams> {
    // SAFETY: the upvalue is the userdata `install` made; its pointer, when not null, holds
    // a strong count of the streams.
    unsafe {
        let slot = ffi::lua_touserdata(state, ffi::lua_upvalueindex(2)).cast::<*const Streams>();
        if slot.is_null() {
            return None;
        }
        slot.read().as_ref()
    }
}

/// Calls the callback (the first upvalue) with the arguments as given: its answers are the
/// method's.
///
/// # Safety
/// `state` is running one of `install`'s closures, and the caller holds nothing that needs
/// dropping (the callback may raise).
unsafe fn callback(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: a C function has LUA_MINSTACK free slots, one is pushed; the arguments stay
    // where Lua put them.
    unsafe {
        let n = ffi::lua_gettop(state);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, n, ffi::LUA_MULTRET);
        ffi::lua_gettop(state)
    }
}

/// Argument `i` as one of our objects: its generation and kind.
///
/// # Safety
/// `state` is a running C function's, `i` one of its arguments.
unsafe fn object(state: *mut ffi::lua_State, i: c_int) -> Option<(usize, Kind)> {
    // SAFETY: type checks and reading a light userdata's value raise nothing.
    unsafe {
        if ffi::lua_type(state, i) != ffi::LUA_TLIGHTUSERDATA {
            return None;
        }
        live::decode(LightUserData(ffi::lua_touserdata(state, i)))
    }
}

/// Argument `i` when it is a string: its bytes, valid while it stays on the stack.
///
/// # Safety
/// As [`object`]; the slice must not outlive the call.
unsafe fn bytes<'a>(state: *mut ffi::lua_State, i: c_int) -> Option<&'a [u8]> {
    // SAFETY: a string argument converts without allocating (only numbers would), and its
    // bytes live while it is on the stack.
    unsafe {
        if ffi::lua_type(state, i) != ffi::LUA_TSTRING {
            return None;
        }
        let mut len = 0usize;
        let p = ffi::lua_tolstring(state, i, &mut len);
        (!p.is_null()).then(|| std::slice::from_raw_parts(p.cast::<u8>(), len))
    }
}

/// Argument `i` as a header name (a UTF-8 string, as the callback takes it).
///
/// # Safety
/// As [`bytes`].
unsafe fn name<'a>(state: *mut ffi::lua_State, i: c_int) -> Option<&'a str> {
    // SAFETY: as `bytes`.
    let b = unsafe { bytes(state, i) }?;
    if b.is_ascii() {
        // SAFETY: ASCII is UTF-8 (checked so, the common case costs less than `from_utf8`).
        Some(unsafe { std::str::from_utf8_unchecked(b) })
    } else {
        std::str::from_utf8(b).ok()
    }
}

/// `handle:headers()`: the phase's headers object.
unsafe extern "C-unwind" fn headers(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: argument checks raise nothing; the streams are used before any push.
    let found = unsafe {
        match (ffi::lua_gettop(state), object(state, 1), streams(state)) {
            (1, Some((generation, Kind::Handle)), Some(streams)) => streams
                .with(generation, |_| live::object(generation, Kind::Headers))
                .map(|o| o.0),
            _ => None,
        }
    };
    match found {
        // SAFETY: pushing a light userdata allocates nothing; a C function has stack room.
        Some(o) => unsafe {
            ffi::lua_pushlightuserdata(state, o);
            1
        },
        // SAFETY: nothing of ours is left to drop.
        None => unsafe { callback(state) },
    }
}

/// What a headers object's `get` found: a value's bytes (where they are) or none.
enum Found {
    Value(*const u8, usize),
    Nil,
}

/// `headers:get(name)`: the value (several joined by commas) or nil.
unsafe extern "C-unwind" fn get(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: argument checks raise nothing; the borrows end inside the block.
    let found = unsafe {
        match (
            ffi::lua_gettop(state),
            object(state, 1),
            name(state, 2),
            streams(state),
        ) {
            (
                2,
                Some((generation, kind @ (Kind::Headers | Kind::Trailers))),
                Some(name),
                Some(s),
            ) => s
                .with(generation, |live| {
                    let live = live.try_borrow().ok()?;
                    match list(&live, kind).joined(name) {
                        None => Some(Found::Nil),
                        Some(std::borrow::Cow::Borrowed(v)) => {
                            Some(Found::Value(v.as_ptr(), v.len()))
                        }
                        // Several values joined: the callback makes (and keeps) that string.
                        Some(std::borrow::Cow::Owned(_)) => None,
                    }
                })
                .flatten(),
            _ => None,
        }
    };
    match found {
        // SAFETY: the bytes are the header list's, which nothing has changed since they were
        // found (no code ran since); lua_pushlstring copies them before it can run any (a
        // finalizer may run after the copy; an emergency collection runs none) and raises only
        // when out of memory, with nothing of ours to drop.
        Some(Found::Value(p, len)) => unsafe {
            ffi::lua_pushlstring(state, p.cast(), len);
            1
        },
        // SAFETY: pushing nil allocates nothing.
        Some(Found::Nil) => unsafe {
            ffi::lua_pushnil(state);
            1
        },
        // SAFETY: nothing of ours is left to drop.
        None => unsafe { callback(state) },
    }
}

/// Runs `f` on the header list of argument 1 (a headers or trailers object of a running
/// phase, not in use): whether it did.
///
/// # Safety
/// `state` is running one of `install`'s closures; `f` must not call Lua.
unsafe fn edit_list(state: *mut ffi::lua_State, f: impl FnOnce(&mut crate::HeaderList)) -> bool {
    // SAFETY: argument checks raise nothing.
    let (object, streams) = unsafe { (object(state, 1), streams(state)) };
    let (Some((generation, kind @ (Kind::Headers | Kind::Trailers))), Some(streams)) =
        (object, streams)
    else {
        return false;
    };
    streams
        .with(generation, |live| {
            let mut live = live.try_borrow_mut().ok()?;
            editable(&mut live, kind).map(f)
        })
        .flatten()
        .is_some()
}

/// `headers:add(name, value)` and `headers:replace(name, value)` with string arguments.
///
/// # Safety
/// As [`edit_list`].
unsafe fn set(state: *mut ffi::lua_State, replace: bool) -> c_int {
    // SAFETY: argument checks raise nothing; the strings stay on the stack meanwhile.
    let done = unsafe {
        match (ffi::lua_gettop(state), name(state, 2), bytes(state, 3)) {
            (3, Some(name), Some(value)) => edit_list(state, |h| {
                if replace {
                    h.replace(name, value.to_vec());
                } else {
                    h.add_bytes(name, value);
                }
            }),
            _ => false,
        }
    };
    if done {
        0
    } else {
        // SAFETY: nothing of ours is left to drop.
        unsafe { callback(state) }
    }
}

unsafe extern "C-unwind" fn add(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: called by Lua as one of `install`'s closures.
    unsafe { set(state, false) }
}

unsafe extern "C-unwind" fn replace(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: called by Lua as one of `install`'s closures.
    unsafe { set(state, true) }
}

/// `headers:remove(name)`.
unsafe extern "C-unwind" fn remove(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: argument checks raise nothing; the name stays on the stack meanwhile.
    let done = unsafe {
        match (ffi::lua_gettop(state), name(state, 2)) {
            (2, Some(name)) => edit_list(state, |h| h.remove(name)),
            _ => false,
        }
    };
    if done {
        0
    } else {
        // SAFETY: nothing of ours is left to drop.
        unsafe { callback(state) }
    }
}
