//! Per-thread LIFO pools of the HTTP/1 fast path's read and write buffers.
//!
//! An idle keep-alive connection holds no buffer, as nginx frees its header buffer between
//! requests: with a thousand connections the buffers in use stay few and hot in cache, instead
//! of 16 KiB per connection, each touched cold once per request (by the kernel's copy too).
//! Each worker is one thread, so a thread-local pool is the worker's pool.

use bytes::BytesMut;
use std::cell::RefCell;

/// Capacity of a read buffer, and of a write buffer when first made.
pub const BUFFER_SIZE: usize = 8 * 1024;
/// Idle buffers kept per thread and kind; more are freed.
const KEEP: usize = 128;
/// A write buffer grown past this (a large body) is freed rather than kept.
const MAX_KEPT_OUTPUT: usize = 64 * 1024;

thread_local! {
    static INPUTS: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    static OUTPUTS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty read buffer with room for [`BUFFER_SIZE`] bytes.
pub fn take_input() -> BytesMut {
    INPUTS
        .with(|pool| pool.borrow_mut().pop())
        .unwrap_or_else(|| BytesMut::with_capacity(BUFFER_SIZE))
}

/// Hand back a read buffer whose bytes have all been consumed.
pub fn give_input(mut buf: BytesMut) {
    if buf.capacity() == 0 || !buf.is_empty() {
        return;
    }
    // Consumed bytes moved the start forward; reserving moves it back in place (the buffer is
    // unique), so the next user gets the whole capacity.
    buf.reserve(BUFFER_SIZE);
    INPUTS.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.len() < KEEP {
            pool.push(buf);
        }
    });
}

/// An empty write buffer.
pub fn take_output() -> Vec<u8> {
    OUTPUTS
        .with(|pool| pool.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(BUFFER_SIZE))
}

/// Hand back a write buffer (its contents are dropped).
pub fn give_output(mut buf: Vec<u8>) {
    if buf.capacity() == 0 || buf.capacity() > MAX_KEPT_OUTPUT {
        return;
    }
    buf.clear();
    OUTPUTS.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.len() < KEEP {
            pool.push(buf);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;

    #[test]
    fn buffers_are_reused_last_in_first_out_with_their_full_capacity() {
        let mut a = take_input();
        a.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        a.advance(a.len());
        let ptr = a.as_ptr();
        give_input(a);
        let b = take_input();
        assert!(b.is_empty() && b.capacity() >= BUFFER_SIZE);
        assert_eq!(
            b.as_ptr(),
            ptr.wrapping_sub(18),
            "the same allocation, from its start"
        );
        // Unconsumed bytes are never pooled.
        let mut c = take_input();
        c.extend_from_slice(b"partial");
        give_input(c);
        assert!(take_input().is_empty());
        let mut out = take_output();
        out.extend_from_slice(b"response");
        give_output(out);
        assert!(take_output().is_empty());
    }
}
