//! Hand-written inline SVG charts: horizontal bars with the rounds' range, ratio intervals
//! against 1.0 with the article's ratio marked, and latency CDFs on a log axis. Three small
//! chart kinds did not justify plotters (its text layout needs a font backend or estimates
//! widths; here the browser lays text out with the page's CSS).

use std::fmt::Write;

/// Colours by server, as the report's legend names them.
pub fn colour(server: &str, i: usize) -> &'static str {
    const WARDEN: [&str; 6] = [
        "#1f6feb", "#388bfd", "#0b4fb3", "#58a6ff", "#174a8b", "#79c0ff",
    ];
    match server {
        "nginx" => "#2da44e",
        "haproxy" => "#bf8700",
        "article" => "#8250df",
        _ => WARDEN[i % WARDEN.len()],
    }
}

pub fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub struct Bar {
    pub label: String,
    pub value: f64,
    /// Lowest and highest round.
    pub range: Option<(f64, f64)>,
    pub colour: &'static str,
}

/// A "nice" upper bound for an axis: 1, 2 or 5 times a power of ten at or above `max`.
fn nice_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|v| *v >= max)
        .unwrap_or(10.0 * p)
}

/// Horizontal bars, one per case, with a whisker from the lowest to the highest round.
pub fn bars(title: &str, unit: &str, items: &[Bar]) -> String {
    let (left, right, row, top) = (250.0, 110.0, 26.0, 34.0);
    let width = 820.0;
    let plot = width - left - right;
    let height = top + row * items.len() as f64 + 30.0;
    let max = nice_max(
        items
            .iter()
            .map(|b| b.range.map_or(b.value, |r| r.1.max(b.value)))
            .fold(0.0, f64::max),
    );
    let x = |v: f64| left + plot * (v / max).clamp(0.0, 1.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart bars" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" aria-label="{t}"><title>{t}</title><text x="10" y="20" class="ctitle">{t}</text>"#,
        t = esc(title)
    );
    for i in 0..=4 {
        let v = max * i as f64 / 4.0;
        let _ = write!(
            s,
            r#"<line x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}" class="grid"/><text x="{0:.1}" y="{3}" class="tick" text-anchor="middle">{4}</text>"#,
            x(v),
            top - 4.0,
            height - 24.0,
            height - 10.0,
            short(v)
        );
    }
    for (i, b) in items.iter().enumerate() {
        let y = top + row * i as f64;
        let _ = write!(
            s,
            r#"<text x="{lx}" y="{ty:.1}" class="label" text-anchor="end">{l}</text><rect x="{left}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{c}"><title>{l}: {v:.1} {unit}</title></rect>"#,
            lx = left - 8.0,
            ty = y + row * 0.62,
            l = esc(&b.label),
            w = (x(b.value) - left).max(0.5),
            h = row * 0.7,
            c = b.colour,
            v = b.value
        );
        if let Some((lo, hi)) = b.range {
            let cy = y + row * 0.35;
            let _ = write!(
                s,
                r#"<line x1="{:.1}" x2="{:.1}" y1="{cy:.1}" y2="{cy:.1}" class="whisker"/>"#,
                x(lo),
                x(hi)
            );
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" class="value">{} {unit}</text>"#,
            x(b.value.max(b.range.map_or(0.0, |r| r.1))) + 6.0,
            y + row * 0.62,
            short(b.value)
        );
    }
    s.push_str("</svg>");
    s
}

/// 12345 -> "12.3k", 0.456 -> "0.456".
pub fn short(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1}k", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

pub struct RatioRow {
    pub label: String,
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
    pub article: Option<f64>,
    pub noise_floor: bool,
}

/// Each comparison's median ratio with its 90% interval, a line at 1.0, the noise floor's
/// interval as a band, and the article's ratio as a diamond.
pub fn ratios(title: &str, rows: &[RatioRow]) -> String {
    let (left, right, row, top) = (300.0, 40.0, 26.0, 34.0);
    let width = 820.0;
    let plot = width - left - right;
    let height = top + row * rows.len() as f64 + 44.0;
    let hi = rows
        .iter()
        .flat_map(|r| [r.hi, r.article.unwrap_or(0.0), 1.0])
        .fold(1.2, f64::max)
        .min(4.0);
    let lo = rows
        .iter()
        .flat_map(|r| [r.lo, r.article.unwrap_or(1.0), 1.0])
        .fold(0.8, f64::min)
        .max(0.0);
    let (lo, hi) = ((lo * 10.0).floor() / 10.0, (hi * 10.0).ceil() / 10.0);
    let x = |v: f64| left + plot * ((v - lo) / (hi - lo)).clamp(0.0, 1.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart ratios" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" aria-label="{t}"><title>{t}</title><text x="10" y="20" class="ctitle">{t}</text>"#,
        t = esc(title)
    );
    if let Some(n) = rows.iter().find(|r| r.noise_floor && r.hi > 0.0) {
        // The band is how far from 1.0 two runs of one server land: the floor's interval.
        let spread = (n.median - 1.0).abs() + (n.hi - n.lo) / 2.0;
        let _ = write!(
            s,
            r#"<rect x="{:.1}" y="{}" width="{:.1}" height="{:.1}" class="noise"><title>noise floor: 1.0 +/- {spread:.3}</title></rect>"#,
            x(1.0 - spread),
            top - 4.0,
            (x(1.0 + spread) - x(1.0 - spread)).max(1.0),
            row * rows.len() as f64 + 4.0
        );
    }
    let steps = 8;
    for i in 0..=steps {
        let v = lo + (hi - lo) * i as f64 / steps as f64;
        let _ = write!(
            s,
            r#"<line x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}" class="grid"/><text x="{0:.1}" y="{3}" class="tick" text-anchor="middle">{v:.2}</text>"#,
            x(v),
            top - 4.0,
            top + row * rows.len() as f64,
            top + row * rows.len() as f64 + 16.0
        );
    }
    let _ = write!(
        s,
        r#"<line x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}" class="one"/>"#,
        x(1.0),
        top - 4.0,
        top + row * rows.len() as f64
    );
    for (i, r) in rows.iter().enumerate() {
        let cy = top + row * i as f64 + row * 0.4;
        let _ = write!(
            s,
            r#"<text x="{}" y="{:.1}" class="label" text-anchor="end">{}</text>"#,
            left - 8.0,
            cy + 4.0,
            esc(&r.label)
        );
        if r.hi <= 0.0 {
            continue;
        }
        let _ = write!(
            s,
            r#"<line x1="{:.1}" x2="{:.1}" y1="{cy:.1}" y2="{cy:.1}" class="ci"/><circle cx="{:.1}" cy="{cy:.1}" r="5" class="median"><title>{}: median {:.3}, 90% CI {:.3}-{:.3}</title></circle>"#,
            x(r.lo),
            x(r.hi),
            x(r.median),
            esc(&r.label),
            r.median,
            r.lo,
            r.hi
        );
        if let Some(a) = r.article {
            let ax = x(a);
            let _ = write!(
                s,
                r#"<path d="M{ax:.1} {:.1} l6 6 l-6 6 l-6 -6 z" class="article"><title>article: {a:.3}</title></path>"#,
                cy - 6.0
            );
        }
    }
    let ly = top + row * rows.len() as f64 + 34.0;
    let _ = write!(
        s,
        r#"<circle cx="{left}" cy="{:.1}" r="5" class="median"/><text x="{}" y="{ly:.1}" class="tick">warden (median, 90% CI)</text><path d="M{} {:.1} l6 6 l-6 6 l-6 -6 z" class="article"/><text x="{}" y="{ly:.1}" class="tick">article</text><rect x="{}" y="{:.1}" width="14" height="10" class="noise"/><text x="{}" y="{ly:.1}" class="tick">noise floor</text>"#,
        ly - 4.0,
        left + 10.0,
        left + 200.0,
        ly - 10.0,
        left + 210.0,
        left + 290.0,
        ly - 9.0,
        left + 310.0
    );
    s.push_str("</svg>");
    s
}

pub struct Series {
    pub label: String,
    pub colour: &'static str,
    /// (milliseconds, cumulative percent), ascending.
    pub points: Vec<(f64, f64)>,
}

/// Latency CDFs on a log-scaled millisecond axis.
pub fn cdf(title: &str, series: &[Series]) -> String {
    let (left, right, top, bottom) = (60.0, 230.0, 34.0, 40.0);
    let (width, height) = (820.0, 320.0);
    let (pw, ph) = (width - left - right, height - top - bottom);
    let all = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|v| *v > 0.0);
    let (mut min, mut max) = all.fold((f64::MAX, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    if min == f64::MAX {
        (min, max) = (0.01, 1.0);
    }
    let (lmin, lmax) = (
        min.log10().floor(),
        max.log10().ceil().max(min.log10().floor() + 1.0),
    );
    let x = |v: f64| left + pw * ((v.max(1e-6).log10() - lmin) / (lmax - lmin)).clamp(0.0, 1.0);
    let y = |p: f64| top + ph * (1.0 - p / 100.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart cdf" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" aria-label="{t}"><title>{t}</title><text x="10" y="20" class="ctitle">{t}</text>"#,
        t = esc(title)
    );
    for d in (lmin as i32)..=(lmax as i32) {
        let v = 10f64.powi(d);
        let label = if v >= 1.0 {
            format!("{v:.0} ms")
        } else {
            format!("{v} ms")
        };
        let _ = write!(
            s,
            r#"<line x1="{0:.1}" x2="{0:.1}" y1="{top}" y2="{1}" class="grid"/><text x="{0:.1}" y="{2}" class="tick" text-anchor="middle">{label}</text>"#,
            x(v),
            top + ph,
            top + ph + 16.0
        );
    }
    for p in [0.0, 25.0, 50.0, 75.0, 90.0, 100.0] {
        let _ = write!(
            s,
            r#"<line x1="{left}" x2="{0}" y1="{1:.1}" y2="{1:.1}" class="grid"/><text x="{2}" y="{3:.1}" class="tick" text-anchor="end">{p}%</text>"#,
            left + pw,
            y(p),
            left - 6.0,
            y(p) + 4.0
        );
    }
    for (i, se) in series.iter().enumerate() {
        let pts: Vec<String> = se
            .points
            .iter()
            .filter(|p| p.0 > 0.0)
            .map(|(v, p)| format!("{:.1},{:.1}", x(*v), y(*p)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"><title>{l}</title></polyline><rect x="{lx}" y="{ly:.1}" width="14" height="4" fill="{c}"/><text x="{tx}" y="{ty:.1}" class="tick">{l}</text>"#,
            pts.join(" "),
            c = se.colour,
            l = esc(&se.label),
            lx = left + pw + 14.0,
            ly = top + 18.0 * i as f64,
            tx = left + pw + 34.0,
            ty = top + 18.0 * i as f64 + 5.0
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" class="tick" text-anchor="middle">latency (log scale), share of requests at or below</text></svg>"#,
        left + pw / 2.0,
        height - 6.0
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_escaped_labels() {
        let b = bars(
            "req/s",
            "req/s",
            &[Bar {
                label: "a <b>".into(),
                value: 1234.0,
                range: Some((1000.0, 1300.0)),
                colour: "#000",
            }],
        );
        assert!(b.starts_with("<svg") && b.ends_with("</svg>") && b.contains("a &lt;b&gt;"));
        let c = cdf(
            "lat",
            &[Series {
                label: "x".into(),
                colour: "#000",
                points: vec![(0.1, 0.0), (1.0, 50.0), (10.0, 100.0)],
            }],
        );
        assert!(c.contains("<polyline"));
        let r = ratios(
            "r",
            &[RatioRow {
                label: "x".into(),
                median: 0.9,
                lo: 0.85,
                hi: 0.95,
                article: Some(0.24),
                noise_floor: false,
            }],
        );
        assert!(r.contains("class=\"article\""));
        assert_eq!(nice_max(1234.0), 2000.0);
    }
}
