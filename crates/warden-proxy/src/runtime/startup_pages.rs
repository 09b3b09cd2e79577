//! Start-up and reloads run code a request never runs (CLI, YAML, validation, snapshot
//! compilation, TLS setup): megabytes of the executable's pages that would otherwise stay in
//! the proxy's RSS for its whole life. Once the proxy is up, and after each reload, the proxy
//! unmaps its executable's file pages (`MADV_DONTNEED`); they stay in the page cache, shared by
//! every proxy on the node, and the pages serving requests come back on their next use (a minor
//! fault each). So a pod's RSS shows what serving costs, as the kernel would leave it under
//! memory pressure. A mapping holding anonymous pages (relocated, copy-on-write data) is never
//! touched: dropping those would revert them to the file's bytes.

use std::path::Path;

/// One mapping of `/proc/self/smaps`.
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    writable: bool,
    path: String,
    anonymous_kb: u64,
}

/// The mappings listed in `smaps` (header line, then `Key: value kB` lines per mapping).
fn parse_smaps(smaps: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some((start, end)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) {
                let perms = fields.next().unwrap_or("");
                let path = fields.nth(3).unwrap_or("").to_string();
                out.push(Mapping {
                    start,
                    end,
                    writable: perms.as_bytes().get(1) == Some(&b'w'),
                    path,
                    // Unknown until its `Anonymous:` line says.
                    anonymous_kb: u64::MAX,
                });
                continue;
            }
        }
        if first == "Anonymous:" {
            if let (Some(m), Some(kb)) = (out.last_mut(), fields.next()) {
                m.anonymous_kb = kb.parse().unwrap_or(u64::MAX);
            }
        }
    }
    out
}

/// The ranges of `exe`'s read-only mappings with no anonymous pages.
fn releasable(mappings: &[Mapping], exe: &Path) -> Vec<(usize, usize)> {
    let exe = exe.to_string_lossy();
    mappings
        .iter()
        .filter(|m| m.path == exe && !m.writable && m.anonymous_kb == 0 && m.end > m.start)
        .map(|m| (m.start, m.end - m.start))
        .collect()
}

/// Unmap the executable's resident file pages; returns the bytes of the mappings released.
pub fn release() -> std::io::Result<usize> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut released = 0;
    for (start, len) in releasable(&parse_smaps(&smaps), &exe) {
        // SAFETY: the range is a read-only, file-backed private mapping of our own executable
        // without copy-on-write pages: dropping its pages only makes the next access read them
        // again from the (unchanged: the kernel refuses writes to a running executable) file.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        released += len;
    }
    Ok(released)
}

/// [`release`], logged; failing only costs memory.
pub fn release_logged(when: &str) {
    match release() {
        Ok(bytes) => tracing::debug!(when, bytes, "start-up code pages released"),
        Err(e) => tracing::debug!(when, error = %e, "start-up code pages kept"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55f2d5efc000-55f2d64e9000 r--p 00000000 fe:00 5312251                    /opt/warden
Rss:                2000 kB
Anonymous:             0 kB
55f2d64e9000-55f2d77a9000 r-xp 005ec000 fe:00 5312251                    /opt/warden
Rss:               10276 kB
Anonymous:             0 kB
55f2d77a9000-55f2d7851000 r--p 018ab000 fe:00 5312251                    /opt/warden
Rss:                 672 kB
Anonymous:           672 kB
55f2d7851000-55f2d7860000 rw-p 01953000 fe:00 5312251                    /opt/warden
Anonymous:            60 kB
7f60c7000000-7f60c7800000 rw-p 00000000 00:00 0 
Anonymous:           592 kB
7f60c7a29000-7f60c7b7f000 r-xp 00026000 fe:00 326279                     /usr/lib/libc.so.6
Anonymous:             0 kB
";

    #[test]
    fn only_the_executables_clean_read_only_mappings_are_released() {
        let maps = parse_smaps(SMAPS);
        assert_eq!(maps.len(), 6);
        assert_eq!(
            releasable(&maps, Path::new("/opt/warden")),
            vec![
                (0x55f2d5efc000, 0x55f2d64e9000 - 0x55f2d5efc000),
                (0x55f2d64e9000, 0x55f2d77a9000 - 0x55f2d64e9000),
            ]
        );
    }

    fn rss_file_kb() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
        line.split_ascii_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    }

    #[test]
    fn releasing_lowers_rss_and_the_code_comes_back_on_use() {
        let before = rss_file_kb();
        assert!(release().unwrap() > 0);
        let after = rss_file_kb();
        assert!(after < before, "RssFile {before} kB -> {after} kB");
        let v: Vec<String> = (0..100).map(|i| format!("{i:x}")).collect();
        assert_eq!(v[99], "63");
    }
}
