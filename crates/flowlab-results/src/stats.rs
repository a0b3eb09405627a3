//! Statistics of repeated trials: a sample's summary with a 95 % confidence interval of
//! its mean (Student's t), and the difference of two samples' means with Welch's t-test.
//! The t distribution's quantiles come from `statrs`; docs/metrics.md ("Study
//! statistics") gives every formula.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The confidence of every interval here.
pub const CONFIDENCE: f64 = 0.95;

/// A sample of one metric in one cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    /// Sample standard deviation (n − 1); 0 for one value.
    pub sd: f64,
    pub min: f64,
    pub max: f64,
    /// 95 % confidence interval of the mean: mean ± t(0.975, n − 1) · sd / √n; `None`
    /// for fewer than two values.
    pub ci: Option<(f64, f64)>,
}

/// The two-sided quantile of Student's t with `df` degrees of freedom at [`CONFIDENCE`].
fn t_quantile(df: f64) -> Option<f64> {
    let t = StudentsT::new(0.0, 1.0, df).ok()?;
    Some(t.inverse_cdf(1.0 - (1.0 - CONFIDENCE) / 2.0))
}

/// The median of sorted `v` (the mean of the middle two for an even count).
fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The summary of `values` (finite ones; `None` when there are none).
pub fn summary(values: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let mean = v.iter().sum::<f64>() / n as f64;
    let sd = if n > 1 {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    let ci = (n > 1)
        .then(|| t_quantile((n - 1) as f64))
        .flatten()
        .map(|t| {
            let half = t * sd / (n as f64).sqrt();
            (mean - half, mean + half)
        });
    Some(Summary {
        n,
        mean,
        median: median_sorted(&v),
        sd,
        min: v[0],
        max: v[n - 1],
        ci,
    })
}

impl Summary {
    /// The confidence interval cut to `[lo, hi]`, the values the metric can take: the
    /// true mean lies inside that range, so the cut interval holds it as often as the
    /// whole one (a skewed sample's t interval can reach below 0 % loss or above 100 %
    /// integrity).
    pub fn within(mut self, lo: f64, hi: f64) -> Summary {
        self.ci = self.ci.map(|(a, b)| (a.clamp(lo, hi), b.clamp(lo, hi)));
        self
    }
}

/// Two samples compared: B's mean minus A's, and whether that is more than noise.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    /// mean(B) − mean(A).
    pub diff: f64,
    /// The difference as a share of A's mean, percent (`None` when A's mean is 0).
    pub relative_percent: Option<f64>,
    /// 95 % confidence interval of the difference (Welch).
    pub ci: (f64, f64),
    /// Welch's t statistic and its degrees of freedom (Welch–Satterthwaite).
    pub t: f64,
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// The interval excludes 0: the difference is larger than the trials' noise at 95 %.
    pub significant: bool,
}

/// Welch's t-test of `b` against `a` (each at least two values); `None` otherwise, or
/// when neither varies and their means are equal.
pub fn welch(a: &Summary, b: &Summary) -> Option<Difference> {
    if a.n < 2 || b.n < 2 {
        return None;
    }
    let (va, vb) = (a.sd.powi(2) / a.n as f64, b.sd.powi(2) / b.n as f64);
    let diff = b.mean - a.mean;
    let se = (va + vb).sqrt();
    let relative_percent = (a.mean != 0.0).then(|| diff / a.mean * 100.0);
    if se == 0.0 {
        // Neither varies: any difference is exact.
        return (diff != 0.0).then_some(Difference {
            diff,
            relative_percent,
            ci: (diff, diff),
            t: f64::INFINITY.copysign(diff),
            df: (a.n + b.n - 2) as f64,
            p: 0.0,
            significant: true,
        });
    }
    let df = (va + vb).powi(2) / (va.powi(2) / (a.n - 1) as f64 + vb.powi(2) / (b.n - 1) as f64);
    let t = diff / se;
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    let p = 2.0 * (1.0 - dist.cdf(t.abs()));
    let half = t_quantile(df)? * se;
    let ci = (diff - half, diff + half);
    Some(Difference {
        diff,
        relative_percent,
        ci,
        t,
        df,
        p,
        significant: ci.0 > 0.0 || ci.1 < 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// Values worked by hand: mean 5, sd √(10/4) = 1.5811, t(0.975, 4) = 2.7764,
    /// half-width 2.7764 · 1.5811 / √5 = 1.9632.
    #[test]
    fn a_summary_and_its_interval() {
        let s = summary(&[3.0, 7.0, 5.0, 4.0, 6.0]).expect("values");
        assert_eq!(
            (s.n, s.mean, s.median, s.min, s.max),
            (5, 5.0, 5.0, 3.0, 7.0)
        );
        assert!(close(s.sd, 1.581_139, 1e-6), "{}", s.sd);
        let (lo, hi) = s.ci.expect("n > 1");
        assert!(
            close(lo, 5.0 - 1.963_243, 1e-5) && close(hi, 5.0 + 1.963_243, 1e-5),
            "{lo} {hi}"
        );
        let one = summary(&[2.0]).expect("one");
        assert_eq!((one.sd, one.ci, one.median), (0.0, None, 2.0));
        assert_eq!(summary(&[f64::NAN]), None);
        assert_eq!(summary(&[1.0, 2.0, 3.0, 10.0]).expect("even").median, 2.5);
    }

    /// 0, 0, 0, 12, 30 % loss: mean 8.4, sd 13.145, half-width 2.7764 · 13.145 / √5 =
    /// 16.322, so the t interval starts at −7.92 %; cut to 0 – 24.72.
    #[test]
    fn an_interval_is_cut_to_the_values_a_metric_can_take() {
        let s = summary(&[0.0, 0.0, 0.0, 12.0, 30.0]).expect("values");
        let (lo, _) = s.ci.expect("n > 1");
        assert!(close(lo, 8.4 - 16.3219, 1e-3), "{lo}");
        let (lo, hi) = s.within(0.0, 100.0).ci.expect("n > 1");
        assert_eq!(lo, 0.0);
        assert!(close(hi, 8.4 + 16.3219, 1e-3), "{hi}");
        let (lo, hi) = summary(&[99.0, 100.0, 100.0])
            .expect("v")
            .within(0.0, 100.0)
            .ci
            .expect("ci");
        assert!(lo < 99.0 && hi == 100.0, "{lo} {hi}");
    }

    /// Welch by hand: a = [1,2,3,4,5] (mean 3, var 2.5), b = [3,4,5,6,7,8] (mean 5.5,
    /// var 3.5): se = √(0.5 + 0.58333) = 1.04083, t = 2.40192, df = 1.08333² /
    /// (0.5²/4 + 0.58333²/5) = 8.98936; p = 0.03980 (the t density integrated
    /// numerically, independently of statrs).
    #[test]
    fn welchs_test_by_hand() {
        let a = summary(&[1.0, 2.0, 3.0, 4.0, 5.0]).expect("a");
        let b = summary(&[3.0, 4.0, 5.0, 6.0, 7.0, 8.0]).expect("b");
        let d = welch(&a, &b).expect("comparable");
        assert!(close(d.diff, 2.5, 1e-12));
        assert!(close(d.t, 2.401_922, 1e-5), "{}", d.t);
        assert!(close(d.df, 8.989_362, 1e-5), "{}", d.df);
        assert!(close(d.p, 0.039_803, 1e-5), "{}", d.p);
        assert!(d.significant && d.ci.0 > 0.0);
        assert_eq!(d.relative_percent, Some(2.5 / 3.0 * 100.0));
        // Noise: the same spread around nearly the same mean.
        let c = summary(&[1.1, 2.1, 3.1, 4.1, 5.1]).expect("c");
        let d = welch(&a, &c).expect("comparable");
        assert!(!d.significant && d.ci.0 < 0.0 && d.ci.1 > 0.0, "{d:?}");
        assert_eq!(welch(&a, &summary(&[1.0]).expect("one")), None);
    }
}
