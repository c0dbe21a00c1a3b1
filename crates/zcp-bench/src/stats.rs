//! Minimum, median and maximum of a cell's runs.

use serde::{Deserialize, Serialize};

/// What `repeat` runs of one figure gave.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Smallest value.
    pub min: f64,
    /// Middle value; the mean of the two middle values for an even count.
    pub median: f64,
    /// Largest value.
    pub max: f64,
}

impl Summary {
    /// The summary of `values`; `None` when there are none, or any is not a number.
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            min: v[0],
            median,
            max: v[n - 1],
        })
    }

    /// How far the runs spread around the median, as a fraction of it (0 when the median is
    /// 0).
    pub fn spread(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / self.median
        }
    }
}

/// `a / b`, or `None` when `b` is 0 or either is not finite.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    let r = a / b;
    (b != 0.0 && r.is_finite()).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_counts_take_the_middle_value() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
        let one = Summary::of(&[7.5]).unwrap();
        assert_eq!((one.min, one.median, one.max), (7.5, 7.5, 7.5));
    }

    #[test]
    fn even_counts_average_the_two_middle_values() {
        let s = Summary::of(&[4.0, 1.0, 3.0, 10.0]).unwrap();
        assert_eq!((s.min, s.median, s.max), (1.0, 3.5, 10.0));
    }

    #[test]
    fn nothing_or_nan_gives_no_summary() {
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn spread_is_relative_to_the_median() {
        let s = Summary::of(&[9.0, 10.0, 11.0]).unwrap();
        assert!((s.spread() - 0.2).abs() < 1e-12);
        assert_eq!(Summary::of(&[0.0, 0.0]).unwrap().spread(), 0.0);
    }

    #[test]
    fn ratios_refuse_division_by_zero() {
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(ratio(3.0, 0.0), None);
        assert_eq!(ratio(0.0, 0.0), None);
    }
}
