//! `--plot FILE.svg`: completion latency percentiles and IOPS over time, so that a
//! stall, a reconnect or a loss burst shows as a spike or a gap rather than hides in
//! a mean (plotters, SVG backend).
//!
//! Every job keeps a timeline of windows (`--log_avg_msec`, 500 ms by default) with
//! the completions of each direction and their latencies in fio's histogram
//! ([`crate::result::TimelineWindow`]). Windows of all jobs that start at the same
//! time are added up: the upper chart draws p50, p90, p99, p99.9 and the maximum
//! (microseconds, log scale; no line through windows without completions), the
//! lower one the IOPS of each direction that did I/O (0 in a window without
//! completions).

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use crate::histogram::PlatHistogram;
use crate::result::BenchResult;
use crate::stats::DDIR_COUNT;

/// The latency series drawn, with the percentile each stands for (`None`: the max).
pub const LATENCY_SERIES: [(&str, Option<f64>); 5] = [
    ("p50", Some(50.0)),
    ("p90", Some(90.0)),
    ("p99", Some(99.0)),
    ("p99.9", Some(99.9)),
    ("max", None),
];

/// The IOPS series names, per direction.
pub const IOPS_SERIES: [&str; DDIR_COUNT] = ["read IOPS", "write IOPS", "trim IOPS"];

/// What [`write_plot`] drew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotSummary {
    /// Windows on the time axis.
    pub windows: usize,
    /// The series drawn, by name.
    pub series: Vec<String>,
}

/// One merged window.
#[derive(Default)]
struct Window {
    ios: [u64; DDIR_COUNT],
    hist: PlatHistogram,
    max_ns: u64,
}

/// Draws `result`'s timelines (windows of `window_ms`) into the SVG file `path`.
///
/// Errors: no timeline (the run kept none, or nothing completed), or the file
/// cannot be written (the message names it).
pub fn write_plot(
    result: &BenchResult,
    window_ms: u64,
    path: &Path,
) -> Result<PlotSummary, String> {
    let window_ms = window_ms.max(1);
    let mut windows: BTreeMap<u64, Window> = BTreeMap::new();
    for j in &result.jobs {
        for w in &j.timeline {
            let m = windows.entry(w.start_ms / window_ms).or_default();
            for d in 0..DDIR_COUNT {
                m.ios[d] += w.ios[d];
            }
            for &(idx, n) in &w.clat {
                m.hist.add_bucket(usize::from(idx), u64::from(n));
            }
            m.max_ns = m.max_ns.max(w.max_ns);
        }
    }
    let (Some(&first), Some(&last)) = (windows.keys().next(), windows.keys().next_back()) else {
        return Err("--plot: no I/O completed, nothing to draw".into());
    };
    let secs = |idx: u64| (idx * window_ms) as f64 / 1000.0 + window_ms as f64 / 2000.0;
    let x_range = secs(first) - window_ms as f64 / 2000.0..secs(last) + window_ms as f64 / 2000.0;
    // Latency series: runs of consecutive windows with completions.
    let mut lat: Vec<Vec<Vec<(f64, f64)>>> = vec![Vec::new(); LATENCY_SERIES.len()];
    let mut prev: Option<u64> = None;
    for (&idx, w) in &windows {
        if w.hist.count() == 0 {
            continue;
        }
        let fresh = prev != Some(idx.wrapping_sub(1));
        prev = Some(idx);
        for (k, (_, p)) in LATENCY_SERIES.iter().enumerate() {
            let ns = match p {
                Some(p) => w.hist.percentile(*p),
                None => w.max_ns,
            };
            let us = (ns as f64 / 1000.0).max(0.001);
            if fresh || lat[k].is_empty() {
                lat[k].push(Vec::new());
            }
            if let Some(run) = lat[k].last_mut() {
                run.push((secs(idx), us));
            }
        }
    }
    let lat_max = lat
        .iter()
        .flatten()
        .flatten()
        .map(|p| p.1)
        .fold(1.0f64, f64::max);
    let lat_min = lat
        .iter()
        .flatten()
        .flatten()
        .map(|p| p.1)
        .fold(f64::MAX, f64::min)
        .min(lat_max);
    // IOPS series: every window from the first to the last, 0 where none completed.
    let mut iops: Vec<Vec<(f64, f64)>> = vec![Vec::new(); DDIR_COUNT];
    for idx in first..=last {
        let ios = windows.get(&idx).map_or([0; DDIR_COUNT], |w| w.ios);
        for d in 0..DDIR_COUNT {
            iops[d].push((secs(idx), ios[d] as f64 * 1000.0 / window_ms as f64));
        }
    }
    let dirs: Vec<usize> = (0..DDIR_COUNT)
        .filter(|&d| iops[d].iter().any(|p| p.1 > 0.0))
        .collect();
    let iops_max = dirs
        .iter()
        .flat_map(|&d| iops[d].iter().map(|p| p.1))
        .fold(1.0f64, f64::max);

    let err = |e: &dyn std::fmt::Display| format!("--plot {}: {e}", path.display());
    let root = SVGBackend::new(path, (1100, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically(430);
    let colors = [&BLUE, &GREEN, &RGBColor(230, 140, 0), &RED, &BLACK];
    let mut drawn = Vec::new();
    {
        let mut chart = ChartBuilder::on(&top)
            .caption(
                format!("completion latency per {window_ms} ms window (us, log scale)"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(70)
            .build_cartesian_2d(x_range.clone(), (lat_min * 0.8..lat_max * 1.25).log_scale())
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("clat (us)")
            .draw()
            .map_err(|e| err(&e))?;
        for (k, (name, _)) in LATENCY_SERIES.iter().enumerate() {
            let color = colors[k];
            for (r, run) in lat[k].iter().enumerate() {
                let s = chart
                    .draw_series(LineSeries::new(run.iter().copied(), color))
                    .map_err(|e| err(&e))?;
                if r == 0 {
                    s.label(*name)
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
                }
            }
            drawn.push((*name).to_string());
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    {
        let mut chart = ChartBuilder::on(&bottom)
            .caption(
                format!("IOPS per {window_ms} ms window"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(70)
            .build_cartesian_2d(x_range, 0.0..iops_max * 1.1)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("IOPS")
            .draw()
            .map_err(|e| err(&e))?;
        let dir_colors = [&BLUE, &RED, &GREEN];
        for &d in &dirs {
            let color = dir_colors[d];
            chart
                .draw_series(LineSeries::new(iops[d].iter().copied(), color))
                .map_err(|e| err(&e))?
                .label(IOPS_SERIES[d])
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
            drawn.push(IOPS_SERIES[d].to_string());
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(PlotSummary {
        windows: (last - first + 1) as usize,
        series: drawn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::bucket_index;
    use crate::result::TimelineWindow;

    #[test]
    fn the_svg_has_every_series_and_a_stall_shows_as_zero_iops() {
        let mut r = crate::report::testdata::result();
        let w = |start_ms: u64, us: u64, n: u32| TimelineWindow {
            start_ms,
            ios: [u64::from(n), 0, 0],
            clat: vec![(bucket_index(us * 1000) as u16, n)],
            max_ns: us * 1000 + 500,
        };
        // Windows 0, 1, then a stall in 2, then 3 with a slow tail.
        r.jobs[0].timeline = vec![w(0, 10, 100), w(500, 12, 90), w(1500, 400, 20)];
        r.jobs[1].timeline = vec![w(0, 11, 50)];
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.svg");
        let s = write_plot(&r, 500, &p).unwrap();
        assert_eq!(s.windows, 4);
        assert_eq!(s.series, ["p50", "p90", "p99", "p99.9", "max", "read IOPS"]);
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
        // The texts of the SVG: the legend names every series.
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| t.split_once('>').and_then(|(_, r)| r.split_once("</text>")))
            .map(|(t, _)| t.trim())
            .collect();
        for name in s.series.iter() {
            assert!(
                texts.contains(&name.as_str()),
                "no legend {name}: {texts:?}"
            );
        }
        assert!(texts
            .iter()
            .any(|t| t.starts_with("completion latency per 500 ms")));
        // Five latency series in two runs each (the stall breaks them) and one IOPS line.
        assert!(
            svg.matches("<polyline").count() >= 11,
            "{}",
            svg.matches("<polyline").count()
        );
        let e = write_plot(&crate::report::testdata::result(), 500, &p).unwrap_err();
        assert!(e.contains("nothing to draw"), "{e}");
    }
}
