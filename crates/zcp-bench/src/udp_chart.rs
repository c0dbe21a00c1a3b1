//! The chart of `benches/udp.sh`: Gbit/s against the injected loss, a panel per RTT, a line
//! per transport, MTU and stream count, drawn from the script's CSV (`udp.csv`). Rows that did
//! not finish (`status` other than `ok` or `timeout`) are left out; columns it does not need
//! are ignored, so the script's CSV may grow.

use crate::plot::color;
use plotters::prelude::*;
use serde::Deserialize;

const PANEL_HEIGHT: u32 = 380;
const WIDTH: u32 = 900;

#[derive(Debug, Deserialize)]
struct Row {
    mtu: u32,
    rtt_ms: f64,
    loss_pct: f64,
    transport: String,
    streams: u32,
    status: String,
    gbps: Option<f64>,
}

/// A point of the chart: (RTT, series label, loss, Gbit/s).
type Point = (f64, String, f64, f64);

fn points(csv_text: &str) -> Result<Vec<Point>, String> {
    let mut r = csv::Reader::from_reader(csv_text.as_bytes());
    let mut out = Vec::new();
    for (i, row) in r.deserialize::<Row>().enumerate() {
        let row = row.map_err(|e| format!("row {}: {e}", i + 2))?;
        let Some(g) = row
            .gbps
            .filter(|_| matches!(row.status.as_str(), "ok" | "timeout"))
        else {
            continue;
        };
        let label = format!("{} MTU {} -P {}", row.transport, row.mtu, row.streams);
        out.push((row.rtt_ms, label, row.loss_pct, g));
    }
    Ok(out)
}

fn sorted_unique(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// Draws the CSV text of `benches/udp.sh` as SVG text.
pub fn svg(csv_text: &str) -> Result<String, String> {
    let pts = points(csv_text)?;
    if pts.is_empty() {
        return Err("nothing to plot: no row of the CSV has a rate (status ok or timeout)".into());
    }
    let rtts = sorted_unique(pts.iter().map(|p| p.0).collect());
    let losses = sorted_unique(pts.iter().map(|p| p.2).collect());
    let mut labels: Vec<String> = pts.iter().map(|p| p.1.clone()).collect();
    labels.sort();
    labels.dedup();
    let top = pts.iter().map(|p| p.3).fold(0.0, f64::max);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, PANEL_HEIGHT * rtts.len() as u32))
            .into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        for (area, rtt) in root.split_evenly((rtts.len(), 1)).iter().zip(&rtts) {
            panel(area, *rtt, &pts, &losses, &labels, top)
                .map_err(|e| format!("drawing RTT {rtt} ms: {e}"))?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// One RTT: the loss values evenly spaced (0 has no place on a log axis), a line per series.
fn panel(
    area: &Area<'_>,
    rtt: f64,
    pts: &[Point],
    losses: &[f64],
    labels: &[String],
    top: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let n = losses.len();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("RTT {rtt} ms: Gbit/s vs loss on the sender -> receiver direction"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.3f64..n as f64 - 0.7, 0.0..top * 1.15 + 1e-9)?;
    let names: Vec<String> = losses.iter().map(|l| format!("{l}%")).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("loss")
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
    let at = |l: f64| losses.iter().position(|x| *x == l).unwrap_or(0) as f64;
    for (i, label) in labels.iter().enumerate() {
        let line: Vec<(f64, f64)> = pts
            .iter()
            .filter(|p| p.0 == rtt && &p.1 == label)
            .map(|p| (at(p.2), p.3))
            .collect();
        if line.is_empty() {
            continue;
        }
        let col = color(i);
        chart
            .draw_series(LineSeries::new(line.iter().copied(), col.stroke_width(2)))?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
        chart.draw_series(line.iter().map(|p| Circle::new(*p, 4, col.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "\
mtu,rtt_ms,loss_pct,transport,streams,size_bytes,status,seconds,gbps,extra_column
1500,10,0,tcp,1,1000,ok,1.0,1.85,x
1500,10,1,tcp,1,1000,ok,1.0,0.71,x
1500,10,0,udp,1,1000,ok,1.0,1.80,x
1500,10,1,udp,1,1000,timeout,1.0,1.60,x
1500,50,0,tcp,1,1000,ok,1.0,1.70,x
1500,50,1,tcp,1,1000,ok,1.0,0.12,x
1500,50,1,udp,1,1000,failed,,,x
";

    #[test]
    fn a_panel_per_rtt_and_a_line_per_series() {
        let svg = svg(CSV).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("RTT 10 ms: Gbit/s vs loss"));
        assert!(svg.contains("RTT 50 ms: Gbit/s vs loss"));
        assert!(svg.contains("\ntcp MTU 1500 -P 1\n</text>"));
        assert!(svg.contains("\nudp MTU 1500 -P 1\n</text>"));
        assert!(svg.contains("\n1%\n</text>"));
        insta::assert_snapshot!(svg);
    }

    #[test]
    fn failed_rows_are_left_out_and_nothing_to_plot_is_an_error() {
        let pts = points(CSV).unwrap();
        assert_eq!(pts.len(), 6, "the failed row has no rate");
        assert!(pts.contains(&(10.0, "udp MTU 1500 -P 1".into(), 1.0, 1.60)));
        let header = CSV.lines().next().unwrap();
        let e = svg(&format!("{header}\n1500,10,0,udp,1,1,failed,,,x\n")).unwrap_err();
        assert!(e.contains("nothing to plot"), "{e}");
        let e = svg(&format!("{header}\n1500,ten,0,udp,1,1,ok,1,1,x\n")).unwrap_err();
        assert!(e.contains("row 2"), "{e}");
    }
}
