//! `LOG_FORMAT=json` lines as the reference writes them (logrus' `JSONFormatter` with
//! `FieldKeyTime: "@timestamp"`, `FieldKeyMsg: "@message"`, `TimestampFormat: RFC3339Nano`):
//! one JSON object per line, keys sorted, `level` named as logrus names levels (`warning`, not
//! `warn`), the event's other fields as keys of their own (a field named like one of the three
//! becomes `fields.<name>`, as logrus does).

use serde_json::{Map, Value};
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter; `now` is the clock (tests fix it).
#[derive(Debug, Clone, Copy)]
pub struct ReferenceJson {
    pub now: fn() -> SystemTime,
}

impl Default for ReferenceJson {
    fn default() -> Self {
        ReferenceJson {
            now: SystemTime::now,
        }
    }
}

/// logrus' level names.
fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// `LOG_LEVEL` as logrus parses it, as a tracing filter directive (`warning` -> `warn`; logrus'
/// `fatal` and `panic` log errors only).
pub fn level_directive(log_level: &str) -> String {
    match log_level.trim().to_ascii_lowercase().as_str() {
        "warning" => "warn".into(),
        "fatal" | "panic" => "error".into(),
        other => other.into(),
    }
}

/// Go's `time.RFC3339Nano` in UTC: fraction digits without trailing zeros, none when zero.
pub fn rfc3339_nano(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    let mut out = format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    let nanos = d.subsec_nanos();
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The event's fields; `message` kept apart.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    others: Map<String, Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                Value::String(s) => s,
                other => other.to_string(),
            });
            return;
        }
        let name = match field.name() {
            // logrus keeps the three keys for itself and renames clashing fields.
            n @ ("@timestamp" | "@message" | "level") => format!("fields.{n}"),
            n => n.to_owned(),
        };
        self.others.insert(name, value);
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }
}

impl<S, N> FormatEvent<S, N> for ReferenceJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = fields.others;
        line.insert(
            "@timestamp".into(),
            Value::String(rfc3339_nano((self.now)())),
        );
        line.insert(
            "@message".into(),
            Value::String(fields.message.unwrap_or_default()),
        );
        line.insert(
            "level".into(),
            Value::String(level_name(event.metadata().level()).into()),
        );
        // serde_json's map is sorted, as Go's encoding/json writes map keys.
        writeln!(writer, "{}", Value::Object(line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn fixed() -> SystemTime {
        UNIX_EPOCH + Duration::new(1_700_000_040, 120_000_000)
    }

    #[test]
    fn lines_have_the_reference_keys() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .event_format(ReferenceJson { now: fixed })
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(error = %"CLUSTERDOWN", attempts = 3, "redis call failed");
            tracing::error!(level = "x", "Error loading new configuration: bad");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                r#"{"@message":"redis call failed","@timestamp":"2023-11-14T22:14:00.12Z","attempts":3,"error":"CLUSTERDOWN","level":"warning"}"#,
                r#"{"@message":"Error loading new configuration: bad","@timestamp":"2023-11-14T22:14:00.12Z","fields.level":"x","level":"error"}"#,
            ]
        );
    }

    #[test]
    fn timestamps_are_rfc3339_nano() {
        let at = |s, n| rfc3339_nano(UNIX_EPOCH + Duration::new(s, n));
        assert_eq!(at(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400, 1), "2000-02-29T00:00:00.000000001Z");
        assert_eq!(
            at(1_700_000_040, 123_456_789),
            "2023-11-14T22:14:00.123456789Z"
        );
        assert_eq!(at(4_102_444_799, 500_000_000), "2099-12-31T23:59:59.5Z");
    }

    #[test]
    fn log_levels_as_logrus_reads_them() {
        assert_eq!(level_directive("WARNING"), "warn");
        assert_eq!(level_directive("warn"), "warn");
        assert_eq!(level_directive("Fatal"), "error");
        assert_eq!(level_directive("debug"), "debug");
    }
}
