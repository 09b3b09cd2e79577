//! The config loader (multi-document YAML -> validated `ConfigSet`) on arbitrary text: errors
//! are reported, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match warden_config::load_str("fuzz.yaml", text) {
        Ok(loaded) => {
            // Later stages look documents' fields up by path; make sure that works too.
            let _ = format!("{:?}", loaded.warnings);
        }
        Err(errors) => {
            let _ = errors.to_string();
        }
    }
});
