//! A small SVG line chart for reports: no dependencies, readable in any browser or on GitHub.

use std::fmt::Write;

pub struct Series<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 800.0;
const H: f64 = 360.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLOURS: &[&str] = &["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"];

/// A rounded axis maximum with a tick step: 1, 2 or 5 times a power of ten.
fn nice_max(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 0.2);
    }
    let magnitude = 10f64.powf((max / 5.0).log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| s * 5.0 >= max)
        .unwrap_or(10.0 * magnitude);
    ((max / step).ceil() * step, step)
}

fn label(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.1}M", v / 1_000_000.0)
    } else if v >= 1_000.0 {
        format!("{:.0}k", v / 1_000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series<'_>]) -> String {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let (x_max, x_step) = nice_max(all().map(|p| p.0).fold(0.0, f64::max));
    let (y_max, y_step) = nice_max(all().map(|p| p.1).fold(0.0, f64::max));
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |v: f64| LEFT + v / x_max * pw;
    let y = |v: f64| TOP + ph - v / y_max * ph;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    let mut tick = 0.0;
    while tick <= y_max + y_step / 2.0 {
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y(tick) + 4.0,
            label(tick),
            yy = y(tick)
        );
        tick += y_step;
    }
    let mut tick = 0.0;
    while tick <= x_max + x_step / 2.0 {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x(tick),
            TOP + ph + 18.0,
            label(tick)
        );
        tick += x_step;
    }
    let _ = writeln!(
        out,
        r#"<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{}" stroke="black"/><line x1="{LEFT}" x2="{}" y1="{b}" y2="{b}" stroke="black"/>"#,
        TOP + ph,
        W - RIGHT,
        b = TOP + ph
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 10.0,
        escape(x_label)
    );
    let _ = writeln!(
        out,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = s
            .points
            .iter()
            .map(|(px, py)| format!("{:.1},{:.1}", x(*px), y(*py)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
            points.join(" ")
        );
        let ly = TOP + 14.0 + 16.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<rect x="{}" y="{}" width="12" height="3" fill="{colour}"/><text x="{}" y="{}">{}</text>"#,
            LEFT + 12.0,
            ly - 4.0,
            LEFT + 30.0,
            ly,
            escape(s.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!(nice_max(87.0), (100.0, 20.0));
        assert_eq!(nice_max(23_456.0), (25_000.0, 5_000.0));
        assert_eq!(nice_max(0.0), (1.0, 0.2));
    }

    #[test]
    fn a_chart_has_one_polyline_per_series_and_escapes_text() {
        let svg = line_chart(
            "a < b",
            "s",
            "records/s",
            &[
                Series {
                    name: "hub",
                    points: vec![(0.0, 1.0), (1.0, 2.0)],
                },
                Series {
                    name: "raw",
                    points: vec![(0.0, 3.0)],
                },
            ],
        );
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a &lt; b"));
    }
}
