//! The `date` response header of the fast path, formatted once per second per thread (as hyper
//! does) instead of once per response.

use std::cell::Cell;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// `Sun, 06 Nov 1994 08:49:37 GMT`
pub const DATE_LEN: usize = 29;

thread_local! {
    /// (unix second, that second formatted)
    static CACHED: Cell<(u64, [u8; DATE_LEN])> = const { Cell::new((u64::MAX, [b' '; DATE_LEN])) };
}

/// The current time as an HTTP date.
pub fn now() -> [u8; DATE_LEN] {
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    CACHED.with(|cached| {
        let (at, text) = cached.get();
        if at == second {
            return text;
        }
        let mut text = [b' '; DATE_LEN];
        // Every date from 1970 to 9999 is exactly DATE_LEN bytes, so the write cannot fall short.
        let _ = write!(&mut text[..], "{}", httpdate::HttpDate::from(now));
        cached.set((second, text));
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_an_http_date() {
        let text = now();
        let parsed = httpdate::parse_http_date(std::str::from_utf8(&text).unwrap()).unwrap();
        let age = SystemTime::now().duration_since(parsed).unwrap();
        assert!(age.as_secs() <= 2, "{age:?}");
    }
}
