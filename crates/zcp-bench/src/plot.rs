//! The documents' charts, drawn as one SVG with a panel per scenario that ran: time against
//! file size per sender engine on log-log axes (document 001, Fig. 2; 003/004), Gbit/s per
//! offset mode and per sink as grouped bars (document 000, Table 2 and Figs. 12-15), Gbit/s
//! against the stream count (document 002, Fig. 6), Gbit/s per transport and stream count
//! (`transport`, as grouped bars). Error bars span min to max.

use plotters::prelude::*;

use crate::report::{CellResult, Report};
use crate::{Scenario, size_label};

const PANEL_HEIGHT: u32 = 420;
const WIDTH: u32 = 960;

/// Draws `report` as SVG text.
pub fn svg(report: &Report) -> Result<String, String> {
    let mut scenarios: Vec<Scenario> = Vec::new();
    for c in &report.cells {
        if !scenarios.contains(&c.spec.scenario) {
            scenarios.push(c.spec.scenario);
        }
    }
    if scenarios.is_empty() {
        return Err("nothing to plot: the report has no cells".into());
    }
    let mut out = String::new();
    {
        let height = PANEL_HEIGHT * scenarios.len() as u32;
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let panels = root.split_evenly((scenarios.len(), 1));
        for (area, s) in panels.iter().zip(&scenarios) {
            let cells: Vec<&CellResult> = report
                .cells
                .iter()
                .filter(|c| c.spec.scenario == *s)
                .collect();
            match s {
                Scenario::Sizes => sizes(area, &cells),
                Scenario::Streams => streams(area, &cells),
                Scenario::Offset | Scenario::Sink | Scenario::Transport => bars(area, *s, &cells),
            }
            .map_err(|e| format!("drawing {}: {e}", s.name()))?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;

/// What a line or a bar colour stands for: the sender engine, or a `transport` cell's
/// transport.
fn series(c: &CellResult) -> &str {
    c.spec
        .transport
        .map_or(c.spec.engine.as_str(), |t| t.name())
}

fn engines(cells: &[&CellResult]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for c in cells {
        if !v.iter().any(|e| e == series(c)) {
            v.push(series(c).to_string());
        }
    }
    v
}

/// Series colour `i` (matplotlib's first eight), shared by every chart zcp draws.
pub(crate) fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0x8c, 0x56, 0x4b),
        RGBColor(0x17, 0xbe, 0xcf),
        RGBColor(0x7f, 0x7f, 0x7f),
    ];
    C[i % C.len()]
}

fn stat(c: &CellResult, m: &str) -> (f64, f64, f64) {
    c.stats
        .get(m)
        .map_or((f64::NAN, f64::NAN, f64::NAN), |s| (s.min, s.median, s.max))
}

/// Time against size, log-log, a line per engine.
fn sizes(area: &Area<'_>, cells: &[&CellResult]) -> Drawn {
    let xs = || cells.iter().map(|c| c.spec.size as f64);
    let ys = || {
        cells
            .iter()
            .map(|c| stat(c, "seconds"))
            .flat_map(|(a, _, b)| [a, b])
    };
    let (x0, x1) = (xs().fold(f64::MAX, f64::min), xs().fold(0.0, f64::max));
    let (y0, y1) = (
        ys().filter(|y| *y > 0.0).fold(f64::MAX, f64::min),
        ys().fold(0.0, f64::max),
    );
    let mut chart = ChartBuilder::on(area)
        .caption(
            "sizes: time per file vs file size, per sender engine (log-log)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0 / 1.5..x1 * 1.5).log_scale(),
            (y0 / 1.5..y1 * 1.5).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("file size")
        .y_desc("seconds")
        .x_label_formatter(&|x| size_label(round_size(*x)))
        .draw()?;
    lines(&mut chart, cells, "seconds", |c| c.spec.size as f64)?;
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// A line per sender engine through the medians of `metric` at `x`, with min-max error bars.
fn lines<X, Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    cells: &[&CellResult],
    metric: &str,
    x: impl Fn(&CellResult) -> f64,
) -> Drawn
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, e) in engines(cells).iter().enumerate() {
        let pts: Vec<(f64, (f64, f64, f64))> = cells
            .iter()
            .filter(|c| series(c) == e)
            .map(|c| (x(c), stat(c, metric)))
            .collect();
        let col = color(i);
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|(x, s)| (*x, s.1)),
                col.stroke_width(2),
            ))?
            .label(e.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
        chart.draw_series(
            pts.iter()
                .map(|(x, s)| ErrorBar::new_vertical(*x, s.0, s.1, s.2, col.filled(), 6)),
        )?;
    }
    Ok(())
}

fn legend<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    at: SeriesLabelPosition,
) -> Drawn
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(at)
        .draw()?;
    Ok(())
}

/// Sizes are powers of two or round numbers: snap a log-axis tick to the nearest power of 2.
fn round_size(x: f64) -> u64 {
    if x < 1.0 {
        return 0;
    }
    1u64 << (x.log2().round() as u32).min(62)
}

/// Gbit/s against the stream count, a line per engine.
fn streams(area: &Area<'_>, cells: &[&CellResult]) -> Drawn {
    let most = cells.iter().map(|c| c.spec.streams).max().unwrap_or(1);
    let top = cells
        .iter()
        .map(|c| stat(c, "gbit_per_second").2)
        .fold(0.0, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "streams: Gbit/s vs parallel streams, per sender engine",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.5f64..most as f64 + 0.5, 0.0..top * 1.15 + 1e-9)?;
    chart
        .configure_mesh()
        .x_desc("streams")
        .y_desc("Gbit/s")
        .x_labels(most as usize + 1)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    lines(&mut chart, cells, "gbit_per_second", |c| {
        f64::from(c.spec.streams)
    })?;
    legend(&mut chart, SeriesLabelPosition::LowerRight)
}

/// Gbit/s per parameter value as grouped bars, a colour per engine.
fn bars(area: &Area<'_>, s: Scenario, cells: &[&CellResult]) -> Drawn {
    let mut params: Vec<String> = Vec::new();
    for c in cells {
        if !params.contains(&c.spec.param) {
            params.push(c.spec.param.clone());
        }
    }
    let engines = engines(cells);
    let top = cells
        .iter()
        .map(|c| stat(c, "gbit_per_second").2)
        .fold(0.0, f64::max);
    let caption = match s {
        Scenario::Offset => "offset: Gbit/s, fixed vs advancing offset, per sender engine",
        Scenario::Transport => "transport: Gbit/s of a whole zcp session per -P, per transport",
        _ => "sink: Gbit/s into memory, page cache and durable storage, per sender engine",
    };
    let n = params.len();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0.0..top * 1.15 + 1e-9)?;
    let names = params.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc("Gbit/s")
        .x_labels(n)
        .x_label_formatter(&move |x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()?;
    let width = 0.8 / engines.len().max(1) as f64;
    for (ei, e) in engines.iter().enumerate() {
        let col = color(ei);
        let bars: Vec<(f64, (f64, f64, f64))> = params
            .iter()
            .enumerate()
            .filter_map(|(pi, p)| {
                let c = cells
                    .iter()
                    .find(|c| series(c) == e && &c.spec.param == p)?;
                let x = pi as f64 - 0.4 + width * (ei as f64 + 0.5);
                Some((x, stat(c, "gbit_per_second")))
            })
            .collect();
        chart
            .draw_series(bars.iter().map(|(x, s)| {
                Rectangle::new(
                    [(x - width * 0.45, 0.0), (x + width * 0.45, s.1)],
                    col.filled(),
                )
            }))?
            .label(e.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], col.filled()));
        chart.draw_series(
            bars.iter()
                .map(|(x, s)| ErrorBar::new_vertical(*x, s.0, s.1, s.2, BLACK.filled(), 6)),
        )?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_panel_per_scenario_with_every_engine() {
        let report = crate::report::tests::sample();
        let svg = svg(&report).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
        assert!(svg.contains("sizes: time per file vs file size"));
        assert!(svg.contains("offset: Gbit/s"));
        assert!(!svg.contains("streams: Gbit/s"));
        for e in ["rw", "sendfile", "mmap", "splice"] {
            assert!(svg.contains(&format!("\n{e}\n</text>")), "legend names {e}");
        }
        assert!(svg.contains("\nfixed\n</text>") && svg.contains("\nadvancing\n</text>"));
    }

    #[test]
    fn snaps_ticks_to_powers_of_two() {
        assert_eq!(round_size(1000.0), 1024);
        assert_eq!(round_size(67_000_000.0), 64 << 20);
        assert_eq!(round_size(0.5), 0);
    }
}
