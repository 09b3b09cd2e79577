//! report.html from results.json alone: one self-contained page (inline CSS, inline SVG, no
//! script, no network), per seed the article's table beside ours, bar charts of throughput,
//! the ratios with their spread, latency CDFs and a plain-language verdict.

mod svg;

use crate::model::{LabResults, SeedResult, SeedStatus};
use crate::stats::median;
use std::fmt::Write;
use svg::{esc, Bar, RatioRow, Series};

const CSS: &str = r#"
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1f2328;background:#f6f8fa}
main{max-width:1000px;margin:0 auto;padding:24px}
h1{font-size:26px;margin:0 0 4px} h2{font-size:21px;margin:0 0 6px} h3{font-size:16px;margin:18px 0 6px}
section{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:18px 22px;margin:18px 0}
table{border-collapse:collapse;width:100%;margin:6px 0 10px;font-size:14px}
th,td{border-bottom:1px solid #d8dee4;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.verdict{background:#ddf4ff;border-left:4px solid #1f6feb;padding:10px 14px;margin:10px 0;border-radius:4px}
.skipped{background:#fff8c5;border-left:4px solid #bf8700}
.status{display:inline-block;font-size:12px;padding:1px 8px;border-radius:10px;background:#eaeef2;margin-left:6px;vertical-align:middle}
.status.ran{background:#dafbe1} .status.partial{background:#fff8c5} .status.skipped{background:#ffebe9}
.noise-yes{color:#57606a} .noise-no{font-weight:600}
.muted{color:#57606a;font-size:13px} code,pre{font:12.5px ui-monospace,SFMono-Regular,Menlo,monospace}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
svg.chart{width:100%;height:auto;margin:8px 0;background:#fff}
svg .ctitle{font-weight:600;font-size:14px;fill:#1f2328} svg .label{font-size:12.5px;fill:#1f2328}
svg .tick{font-size:11px;fill:#57606a} svg .value{font-size:12px;fill:#1f2328}
svg .grid{stroke:#eaeef2} svg .whisker{stroke:#1f2328;stroke-width:1.5} svg .one{stroke:#1f2328;stroke-dasharray:4 3}
svg .ci{stroke:#1f6feb;stroke-width:3} svg .median{fill:#1f6feb} svg .article{fill:#8250df}
svg .noise{fill:#eaeef2;opacity:.8}
"#;

/// The whole page.
pub fn render(r: &LabResults) -> String {
    let mut h = String::with_capacity(64 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>warden lab report</title>\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><style>{CSS}</style></head><body><main>"
    );
    let _ = write!(
        h,
        "<h1>warden lab: the source articles' experiments, reproduced</h1>\
         <p class=\"muted\">{} &middot; started {} &middot; finished {}{}{}</p>",
        esc(&r.warden_version),
        esc(&r.started),
        esc(&r.finished),
        if r.quick {
            " &middot; <b>--quick</b> (short rounds: a smoke test, not a measurement)"
        } else {
            ""
        },
        if r.interrupted {
            " &middot; <b>stopped by Ctrl-C</b>: partial results"
        } else {
            ""
        }
    );
    machine(&mut h, r);
    summary(&mut h, r);
    for seed in &r.seeds {
        section(&mut h, seed);
    }
    h.push_str(
        "<section><h2>How to read this</h2><p>Every comparison is a series of back-to-back pairs of runs \
         (A then B, the order swapped every round, the comparisons' order rotated between rounds), so both \
         sides of a pair see nearly the same machine. The ratio shown is the median of the per-pair ratios \
         with a bootstrapped 90% interval. The <b>noise floor</b> is one server measured against itself in \
         the same way: a difference no larger than the noise floor's spread, or whose interval contains 1.0, \
         is reported as <i>within noise</i>. CPU per request is the server processes' user + system time \
         divided by the requests served. Absolute numbers depend on this machine; the ratios are what \
         compare with the articles.</p></section>",
    );
    h.push_str("</main></body></html>\n");
    h
}

fn machine(h: &mut String, r: &LabResults) {
    let m = &r.machine;
    let _ = write!(
        h,
        "<section><h2>Machine</h2><table><tbody>\
         <tr><th>CPU</th><td>{} cores, {}</td></tr><tr><th>memory</th><td>{} MiB</td></tr>\
         <tr><th>kernel</th><td>{}</td></tr><tr><th>background busy</th><td>{:.0}% of all CPUs before the lab started{}</td></tr>\
         <tr><th>pinning</th><td>{}</td></tr><tr><th>root</th><td>{}</td></tr>",
        m.cores,
        esc(&m.cpu_model),
        m.memory_mib,
        esc(&m.kernel),
        m.background_busy_pct,
        if m.background_busy_pct > 20.0 { " &mdash; <b>the machine was busy: numbers are noisy</b>" } else { "" },
        if m.pinned { "servers on CPU 0, load generator and backends on CPU 1" } else { "none (fewer than 2 cores or no taskset)" },
        if m.root { "yes" } else { "no (the sidecar experiments need it)" }
    );
    let peers: Vec<String> = m
        .peers
        .iter()
        .map(|p| {
            format!(
                "<b>{}</b> {} <span class=\"muted\">({})</span>",
                esc(&p.name),
                esc(&p.version),
                esc(&p.path)
            )
        })
        .collect();
    let _ = write!(
        h,
        "<tr><th>peers found</th><td>{}</td></tr><tr><th>peers missing</th><td>{}</td></tr></tbody></table></section>",
        if peers.is_empty() { "none".into() } else { peers.join("<br>") },
        if m.missing_peers.is_empty() { "none".into() } else { format!("{} <span class=\"muted\">(the lab installs nothing; their cases are left out)</span>", esc(&m.missing_peers.join(", "))) }
    );
}

fn summary(h: &mut String, r: &LabResults) {
    h.push_str("<section><h2>At a glance</h2><table><thead><tr><th>article</th><th>status</th><th>verdict</th></tr></thead><tbody>");
    for s in &r.seeds {
        let _ = write!(
            h,
            "<tr><td><a href=\"#{id}\">{id}</a>: {}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.title),
            status_badge(s.status),
            esc(&s.verdict),
            id = esc(&s.id)
        );
    }
    h.push_str("</tbody></table></section>");
}

fn status_badge(s: SeedStatus) -> &'static str {
    match s {
        SeedStatus::Ran => "<span class=\"status ran\">ran</span>",
        SeedStatus::Partial => "<span class=\"status partial\">partial</span>",
        SeedStatus::Skipped => "<span class=\"status skipped\">not run</span>",
    }
}

fn section(h: &mut String, s: &SeedResult) {
    let _ = write!(
        h,
        "<section id=\"{}\" class=\"seed\"><h2>{}: {} {}</h2><p class=\"muted\">The article: {}</p>",
        esc(&s.id),
        esc(&s.id),
        esc(&s.title),
        status_badge(s.status),
        esc(&s.article)
    );
    if let Some(reason) = &s.skip_reason {
        let _ = write!(
            h,
            "<div class=\"verdict skipped\">Not run here: {}</div>",
            esc(reason)
        );
        commands(h, s);
        h.push_str("</section>");
        return;
    }
    let _ = write!(h, "<div class=\"verdict\">{}</div>", esc(&s.verdict));
    let _ = write!(
        h,
        "<p class=\"muted\">Load: {} &middot; background busy before this seed: {:.0}%</p>",
        esc(&s.load_shape),
        s.background_busy_pct
    );
    if !s.missing_peers.is_empty() {
        let _ = write!(
            h,
            "<p><b>Not on PATH, left out:</b> {}</p>",
            esc(&s.missing_peers.join(", "))
        );
    }
    // The article's table beside ours.
    h.push_str("<h3>The article's numbers beside ours</h3><table class=\"published\"><thead><tr><th>case</th><th>article</th><th>measured here</th></tr></thead><tbody>");
    for row in &s.published {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&row.what),
            esc(&row.article),
            esc(&row.measured)
        );
    }
    h.push_str("</tbody></table>");
    let measured: Vec<_> = s.cases.iter().filter(|c| !c.runs.is_empty()).collect();
    // Throughput bars.
    let bars: Vec<Bar> = measured
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let v: Vec<f64> = c.runs.iter().map(|r| r.rps).collect();
            Bar {
                label: c.label.clone(),
                value: c.median_rps,
                range: Some((
                    v.iter().copied().fold(f64::MAX, f64::min),
                    v.iter().copied().fold(0.0, f64::max),
                )),
                colour: svg::colour(&c.server, i),
            }
        })
        .collect();
    if !bars.is_empty() {
        let find_max = measured
            .iter()
            .any(|c| c.runs.iter().any(|r| !r.steps.is_empty()));
        let title = if find_max {
            "maximum rate found (median of rounds; whisker: lowest to highest round)"
        } else {
            "throughput, req/s (median of rounds; whisker: lowest to highest round)"
        };
        h.push_str(&svg::bars(title, "req/s", &bars));
    }
    // Ratios with their spread.
    let rows: Vec<RatioRow> = s
        .comparisons
        .iter()
        .map(|c| RatioRow {
            label: c.name.clone(),
            median: c.median,
            lo: c.ci_low,
            hi: c.ci_high,
            article: c.article_ratio,
            noise_floor: c.noise_floor,
        })
        .collect();
    if !rows.is_empty() {
        h.push_str(&svg::ratios(
            "ratios B / A over back-to-back pairs (1.0 = no difference)",
            &rows,
        ));
    }
    // Latency CDFs: each case's median-p99 run.
    let series: Vec<Series> = measured
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let mid = median(&c.runs.iter().map(|r| r.p99_ms).collect::<Vec<_>>());
            let run = c
                .runs
                .iter()
                .min_by(|a, b| (a.p99_ms - mid).abs().total_cmp(&(b.p99_ms - mid).abs()))?;
            (!run.cdf.is_empty()).then(|| Series {
                label: c.label.clone(),
                colour: svg::colour(&c.server, i),
                points: run.cdf.clone(),
            })
        })
        .collect();
    if !series.is_empty() {
        h.push_str(&svg::cdf(
            "latency CDF (the round with the median p99 of each case)",
            &series,
        ));
    }
    comparisons_table(h, s);
    cases_table(h, s);
    if !s.notes.is_empty() {
        h.push_str("<h3>Notes</h3><ul>");
        for n in &s.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>");
    }
    commands(h, s);
    h.push_str("</section>");
}

fn comparisons_table(h: &mut String, s: &SeedResult) {
    h.push_str("<h3>Comparisons</h3><table class=\"comparisons\"><thead><tr><th>B / A</th><th>metric</th><th>median</th><th>90% CI</th><th>article</th><th>per pair</th><th>noise</th></tr></thead><tbody>");
    for c in &s.comparisons {
        let noise = if c.noise_floor {
            "<span class=\"noise-yes\">this is the noise floor</span>".to_string()
        } else if c.ratios.is_empty() {
            "not measured".into()
        } else if c.within_noise {
            "<span class=\"noise-yes\">within noise</span>".into()
        } else {
            let better = (c.median > 1.0) == c.metric.higher_is_better();
            format!(
                "<span class=\"noise-no\">beyond noise ({})</span>",
                if better { "B better" } else { "B worse" }
            )
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{:.3}</td><td class=\"num\">{:.3}-{:.3}</td><td class=\"num\">{}</td><td class=\"muted\">{}</td><td>{noise}</td></tr>",
            esc(&c.name),
            c.metric.label(),
            c.median,
            c.ci_low,
            c.ci_high,
            c.article_ratio.map_or("-".into(), |a| format!("{a:.3}")),
            c.ratios.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(" ")
        );
    }
    h.push_str("</tbody></table>");
}

fn cases_table(h: &mut String, s: &SeedResult) {
    h.push_str("<h3>Cases (medians over runs)</h3><table class=\"cases\"><thead><tr><th>case</th><th>req/s</th><th>p50 ms</th><th>p99 ms</th><th>avg ms</th><th>CPU &micro;s/req</th><th>RSS MiB</th><th>errors</th><th>req/s per run</th></tr></thead><tbody>");
    for c in &s.cases {
        let errors: u64 = c.runs.iter().map(|r| r.errors).sum();
        let non_ok: u64 = c
            .runs
            .iter()
            .flat_map(|r| r.codes.iter())
            .filter(|(k, _)| !matches!(k.as_str(), "200" | "333" | "403" | "OK"))
            .map(|(_, v)| v)
            .sum();
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"num\">{:.0}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.2}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}{}</td><td class=\"muted\">{}</td></tr>",
            esc(&c.label),
            c.median_rps,
            c.median_p50_ms,
            c.median_p99_ms,
            c.median_avg_ms,
            c.median_cpu_us_per_req.map_or("-".into(), |v| format!("{v:.1}")),
            c.rss_mib.map_or("-".into(), |v| format!("{v:.1}")),
            errors,
            if non_ok > 0 { format!(" ({non_ok} unexpected status)") } else { String::new() },
            c.runs.iter().map(|r| format!("{:.0}", r.rps)).collect::<Vec<_>>().join(" ")
        );
    }
    h.push_str("</tbody></table>");
    let steps: Vec<_> = s
        .cases
        .iter()
        .filter_map(|c| c.runs.iter().find(|r| !r.steps.is_empty()).map(|r| (c, r)))
        .collect();
    if !steps.is_empty() {
        h.push_str("<h3>find-max ramps (first round)</h3><table class=\"steps\"><thead><tr><th>case</th><th>rates tried (requested &rarr; achieved, p99 ms, errors)</th></tr></thead><tbody>");
        for (c, r) in steps {
            let text: Vec<String> = r
                .steps
                .iter()
                .map(|s| {
                    format!(
                        "{}{:.0}&rarr;{:.0} ({:.1} ms, {}){}",
                        if s.passed { "" } else { "<s>" },
                        s.requested_qps,
                        s.actual_qps,
                        s.p99_ms,
                        s.errors,
                        if s.passed { "" } else { "</s>" }
                    )
                })
                .collect();
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"muted\">{}</td></tr>",
                esc(&c.label),
                text.join(", ")
            );
        }
        h.push_str("</tbody></table>");
    }
}

fn commands(h: &mut String, s: &SeedResult) {
    if s.commands.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<details><summary>Commands run ({})</summary><pre>",
        s.commands.len()
    );
    for c in &s.commands {
        let _ = writeln!(h, "{}", esc(c));
    }
    h.push_str("</pre></details>");
}
