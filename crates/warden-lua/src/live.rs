//! A phase's stream while it runs (or waits), and the objects a script holds for it.
//!
//! Every object a script gets (the stream handle, `headers()`, `body()`, `streamInfo()`, ...)
//! is a light userdata whose value names the stream's generation and the object's kind: handing
//! one out allocates nothing and leaves nothing for the collector to finalize (full userdata
//! per object cost a request about a third of its instructions, callgrind). A method finds its
//! stream by the generation in [`Streams`]; an object whose phase ended finds none and answers
//! Envoy's "object used outside of proper scope". Within a phase `headers()` is always the same
//! object, as Envoy's handle keeps one headers wrapper per stream.

use crate::stream::{HttpCall, LocalResponse, Stream};
use mlua::LightUserData;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

/// The stream while a phase runs (and while it waits for a call, a body or a chunk).
pub(crate) struct Live {
    pub stream: Stream,
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

impl Live {
    pub fn new(stream: Stream, phase: crate::Phase, script: Arc<str>) -> Live {
        Live {
            stream,
            respond: None,
            call: None,
            wants_body: false,
            wants_chunk: false,
            streaming: false,
            chunks_ended: false,
            phase,
            script,
        }
    }
}

pub(crate) type Shared = Rc<RefCell<Live>>;

/// What an object is (the low bits of its value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Handle = 1,
    Headers,
    Trailers,
    Buffer,
    RouteMetadata,
    DynamicMetadata,
    StreamInfo,
    Connection,
    Ssl,
}

const KIND_BITS: u32 = 4;
const KINDS: [Kind; 9] = [
    Kind::Handle,
    Kind::Headers,
    Kind::Trailers,
    Kind::Buffer,
    Kind::RouteMetadata,
    Kind::DynamicMetadata,
    Kind::StreamInfo,
    Kind::Connection,
    Kind::Ssl,
];

/// The object of kind `kind` for the stream of generation `generation`.
pub(crate) fn object(generation: usize, kind: Kind) -> LightUserData {
    let bits = (generation << KIND_BITS) | kind as usize;
    // A value, never dereferenced: Lua compares and hands it back, nothing more.
    LightUserData(std::ptr::without_provenance_mut(bits))
}

/// The generation and kind an object names (None: not one of ours).
pub(crate) fn decode(o: LightUserData) -> Option<(usize, Kind)> {
    let bits = o.0.addr();
    let kind = *KINDS.get((bits & ((1 << KIND_BITS) - 1)).checked_sub(1)?)?;
    Some((bits >> KIND_BITS, kind))
}

/// The streams of one Lua state whose phase runs or waits, by generation (a handful at most:
/// the running one and those waiting for a call or a body).
#[derive(Default)]
pub(crate) struct Streams {
    open: RefCell<Vec<(usize, Shared)>>,
    last: Cell<usize>,
}

impl Streams {
    /// A new generation for `live`, open until [`Streams::close`].
    pub fn open(&self, live: Shared) -> usize {
        let generation = self.last.get() + 1;
        self.last.set(generation);
        self.open.borrow_mut().push((generation, live));
        generation
    }

    /// The phase of `generation` ended: its objects are dead.
    pub fn close(&self, generation: usize) {
        let mut open = self.open.borrow_mut();
        if let Some(i) = open.iter().position(|(g, _)| *g == generation) {
            open.swap_remove(i);
        }
    }

    /// `f` over the stream of `generation`, without taking a reference to it (the raw
    /// methods' way: nothing of theirs may need dropping when Lua raises).
    pub fn with<R>(&self, generation: usize, f: impl FnOnce(&Shared) -> R) -> Option<R> {
        let open = self.open.try_borrow().ok()?;
        open.iter()
            .find(|(g, _)| *g == generation)
            .map(|(_, l)| f(l))
    }

    pub fn get(&self, generation: usize) -> Option<Shared> {
        let open = self.open.try_borrow().ok()?;
        open.iter()
            .find(|(g, _)| *g == generation)
            .map(|(_, l)| l.clone())
    }

    /// The stream of object `o` when it is one of `kinds` (else Lua's error for a method the
    /// object does not have), and its kind.
    pub fn find(
        &self,
        o: LightUserData,
        method: &str,
        kinds: &[Kind],
    ) -> mlua::Result<(Shared, Kind)> {
        let Some((generation, kind)) = decode(o).filter(|(_, k)| kinds.contains(k)) else {
            return Err(no_method(method));
        };
        match self.get(generation) {
            Some(live) => Ok((live, kind)),
            None => Err(dead()),
        }
    }
}

/// Envoy's error for an object kept past its phase.
pub(crate) fn dead() -> mlua::Error {
    mlua::Error::runtime("object used outside of proper scope")
}

/// Lua's error for a method an object does not have (all objects share one method table).
pub(crate) fn no_method(method: &str) -> mlua::Error {
    mlua::Error::runtime(format!("attempt to call a nil value (method '{method}')"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_name_their_generation_and_kind() {
        for generation in [1, 2, 77, usize::MAX >> KIND_BITS] {
            for kind in KINDS {
                assert_eq!(
                    decode(object(generation, kind)),
                    Some((generation, kind)),
                    "{generation} {kind:?}"
                );
            }
        }
        let foreign = [0usize, 0x10, 0x1f];
        for bits in foreign {
            assert_eq!(
                decode(LightUserData(std::ptr::without_provenance_mut(bits))),
                None,
                "{bits:#x}"
            );
        }
    }

    #[test]
    fn a_closed_generation_finds_no_stream() {
        let streams = Streams::default();
        let live = |s: &str| {
            Rc::new(RefCell::new(Live::new(
                Stream::default(),
                crate::Phase::Request,
                s.into(),
            )))
        };
        let a = streams.open(live("a"));
        let b = streams.open(live("b"));
        assert_ne!(a, b);
        streams.close(a);
        assert!(streams.get(a).is_none());
        let (found, kind) = streams
            .find(object(b, Kind::Headers), "get", &[Kind::Headers])
            .unwrap();
        assert_eq!(&*found.borrow().script, "b");
        assert_eq!(kind, Kind::Headers);
        let error = |r: mlua::Result<(Shared, Kind)>| r.err().map(|e| e.to_string());
        let wrong = streams.find(object(b, Kind::Buffer), "get", &[Kind::Headers]);
        assert!(error(wrong).unwrap().contains("method 'get'"));
        let gone = streams.find(object(a, Kind::Headers), "get", &[Kind::Headers]);
        assert!(error(gone).unwrap().contains("proper scope"));
    }
}
