//! The ratios the source documents published (../shared/SEEDS.md), and where a benchmark
//! measures the same thing. The published numbers are citations, measured on the authors'
//! hardware; the measured ones come from this run's cells.

use serde::{Deserialize, Serialize};

use crate::Scenario;
use crate::report::{CellResult, columns};

/// What a published ratio compares, in this benchmark's cells.
#[derive(Debug, Clone, Copy)]
enum Measure {
    /// The speed ratio (read/write time over this cell's) of a cell.
    Speed(Scenario, &'static str, &'static str),
    /// Read/write's sender system CPU over this cell's.
    SysCpu(Scenario, &'static str, &'static str),
    /// Gbit/s of `streams` = to, over that of from, for an engine.
    Streams(u32, u32, &'static str),
}

struct Published {
    document: &'static str,
    experiment: &'static str,
    ratio: f64,
    measure: Measure,
}

const fn published(
    document: &'static str,
    experiment: &'static str,
    ratio: f64,
    measure: Measure,
) -> Published {
    Published {
        document,
        experiment,
        ratio,
        measure,
    }
}

/// Document 003/004's table: file size, read/write ms, transferTo ms.
const JAVA: [(&str, f64, f64); 8] = [
    ("7M", 156.0, 45.0),
    ("21M", 337.0, 128.0),
    ("63M", 843.0, 387.0),
    ("98M", 1320.0, 617.0),
    ("200M", 2124.0, 1150.0),
    ("350M", 3631.0, 1762.0),
    ("700M", 13498.0, 4422.0),
    ("1G", 18399.0, 8537.0),
];

fn all() -> Vec<Published> {
    use Measure::{Speed, SysCpu};
    use Scenario::{Offset, Sink, Sizes};
    let mut v = vec![
        published(
            "000 Table 2",
            "10 GB in one host, fixed offset: sendfile 73.7 vs read/write 29.2 Gbit/s",
            73.7 / 29.2,
            Speed(Offset, "fixed", "sendfile"),
        ),
        published(
            "000 Table 2",
            "10 GB in one host, advancing offset: sendfile 51.5 vs read/write 24.7 Gbit/s",
            51.5 / 24.7,
            Speed(Offset, "advancing", "sendfile"),
        ),
        published(
            "000 Figs. 14-15",
            "100 GB to receiver memory: zero-copy 14.2 vs read/write 10.3 Gbit/s",
            14.2 / 10.3,
            Speed(Sink, "memory/mem", "sendfile"),
        ),
        published(
            "000 Fig. 14",
            "100 GB stored to disk by a read+write server: 11.2 vs 10.2 Gbit/s",
            11.2 / 10.2,
            Speed(Sink, "durable/rw", "sendfile"),
        ),
        published(
            "001 Fig. 2",
            "256 KB and smaller: little difference",
            1.0,
            Speed(Sizes, "256K", "sendfile"),
        ),
        published(
            "001 Fig. 3",
            "64 MB, elapsed: read/write 3.20 s vs sendfile 1.85 s",
            3.198704240 / 1.851168347,
            Speed(Sizes, "64M", "sendfile"),
        ),
        published(
            "001 Fig. 3",
            "64 MB, system CPU: 2.456 s vs 0.672 s (the paper's \"3.65x faster\")",
            2.456 / 0.672,
            SysCpu(Sizes, "64M", "sendfile"),
        ),
    ];
    for (size, rw, tt) in JAVA {
        v.push(Published {
            document: "003/004 table",
            experiment: "",
            ratio: rw / tt,
            measure: Speed(Sizes, size, "sendfile"),
        });
    }
    v.push(published(
        "002 Fig. 6",
        "8 streams vs 1, MTU 9000, 100 GbE: 98 vs 36 Gbit/s",
        98.0 / 36.0,
        Measure::Streams(1, 8, "sendfile"),
    ));
    v
}

/// One published ratio beside the measured one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedRow {
    /// Document and figure or table.
    pub document: String,
    /// What was measured there.
    pub experiment: String,
    /// The ratio they published (above 1: the zero-copy side or the larger count wins).
    pub published: f64,
    /// The same ratio in this run, if the cell ran.
    pub measured: Option<f64>,
    /// The cells it comes from, or why it is missing.
    pub from: String,
}

/// Every published ratio, measured where this run has the cells for it.
pub fn compare(cells: &[CellResult]) -> Vec<SeedRow> {
    let find = |s: Scenario, param: &str, engine: &str| {
        cells
            .iter()
            .find(|c| c.spec.scenario == s && c.spec.param == param && c.spec.engine == engine)
    };
    all()
        .into_iter()
        .map(|p| {
            let (measured, from) = match p.measure {
                Measure::Speed(s, param, engine) | Measure::SysCpu(s, param, engine) => {
                    let name = format!("{} {param} {engine} vs rw", s.name());
                    match find(s, param, engine).and_then(|c| c.vs_rw) {
                        Some(r) => {
                            let v = match p.measure {
                                Measure::SysCpu(..) => r.sender_sys,
                                _ => r.speed,
                            };
                            (v, name)
                        }
                        None => (None, format!("{name}: not run")),
                    }
                }
                Measure::Streams(from, to, engine) => {
                    let name = format!("streams {to} vs {from}, {engine}");
                    let g = |n: u32| {
                        find(Scenario::Streams, &n.to_string(), engine)?.median("gbit_per_second")
                    };
                    match (g(from), g(to)) {
                        (Some(a), Some(b)) => (crate::stats::ratio(b, a), name),
                        _ => (None, format!("{name}: not run")),
                    }
                }
            };
            let experiment = if p.experiment.is_empty() {
                match p.measure {
                    Measure::Speed(_, size, _) => {
                        let (_, rw, tt) = JAVA.iter().find(|j| j.0 == size).expect("listed");
                        format!("{size}B file: read/write {rw} ms vs transferTo {tt} ms")
                    }
                    _ => unreachable!("only the Java rows leave it empty"),
                }
            } else {
                p.experiment.to_string()
            };
            SeedRow {
                document: p.document.to_string(),
                experiment,
                published: p.ratio,
                measured,
                from,
            }
        })
        .collect()
}

/// The seeds as a table.
pub fn table(rows: &[SeedRow]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.document.clone(),
                r.experiment.clone(),
                format!("{:.2}", r.published),
                r.measured.map_or("-".into(), |m| format!("{m:.2}")),
                r.from.clone(),
            ]
        })
        .collect();
    let mut out = String::from(
        "published vs measured (ratios; above 1 the zero-copy engine, or more streams, wins):\n",
    );
    out.push_str(&columns(
        &["document", "experiment", "published", "measured", "from"],
        &body,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_ratios_are_the_documents_numbers() {
        let a = all();
        let t2 = a
            .iter()
            .find(|p| p.experiment.contains("fixed offset"))
            .unwrap();
        assert!((t2.ratio - 2.524).abs() < 0.001);
        let cpu = a
            .iter()
            .find(|p| p.experiment.contains("system CPU"))
            .unwrap();
        assert!((cpu.ratio - 3.655).abs() < 0.001);
        assert_eq!(a.len(), 7 + JAVA.len() + 1);
    }

    #[test]
    fn measured_ratios_come_from_the_cells_that_ran() {
        let report = crate::report::tests::sample().with_seeds();
        let rows = report.seeds.as_ref().unwrap();
        let row = rows
            .iter()
            .find(|r| r.experiment.contains("64 MB, elapsed"))
            .unwrap();
        let cell = report
            .cells
            .iter()
            .find(|c| c.spec.param == "64M" && c.spec.engine == "sendfile")
            .unwrap();
        assert_eq!(row.measured, cell.vs_rw.unwrap().speed);
        let streams = rows.iter().find(|r| r.document == "002 Fig. 6").unwrap();
        assert_eq!(streams.measured, None);
        assert!(streams.from.ends_with("not run"), "{}", streams.from);
        insta::assert_snapshot!(table(rows));
    }
}
