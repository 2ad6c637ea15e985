//! Zipf-distributed ranks for `ticketing bench mixed`, drawn in constant memory.
//!
//! Why not a table of the cumulative distribution: it costs 8 bytes per key, and the
//! key space (`--keys`, up to ten million) must not size the bench's memory. This is
//! rejection-inversion sampling (W. Hörmann, G. Derflinger, "Rejection-inversion to
//! generate variates from monotone discrete distributions", ACM TOMACS 6(3), 1996):
//! invert the integral of a continuous hat function over the ranks, and accept the
//! rank nearest to that point unless a cheap test rejects it (rarely: fewer than one
//! draw in ten for any exponent).

/// Ranks 0..n with P(rank k) proportional to 1 / (k + 1)^s.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    s: f64,
    /// `h_integral(1.5) − 1`, `h_integral(n + 0.5)`: the range the uniform draw spans.
    h_integral_x1: f64,
    h_integral_n: f64,
    /// Ranks within this distance of the inverted point are accepted without a test.
    squeeze: f64,
}

impl Zipf {
    /// `n` ≥ 1 ranks, exponent `s` ≥ 0 (0: uniform).
    pub fn new(n: usize, s: f64) -> Zipf {
        let mut z = Zipf { n: n.max(1) as f64, s, h_integral_x1: 0.0, h_integral_n: 0.0, squeeze: 0.0 };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(z.n + 0.5);
        z.squeeze = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// A rank in 0..n; `unit` draws uniformly from [0, 1).
    pub fn sample(&self, mut unit: impl FnMut() -> f64) -> usize {
        loop {
            let u = self.h_integral_n + unit() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.squeeze || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as usize - 1;
            }
        }
    }

    /// The hat: x^−s.
    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// An antiderivative of `h`: (x^(1−s) − 1) / (1 − s), or ln x when s = 1.
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        expm1_over_x((1.0 - self.s) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (ln1p_over_x(t) * x).exp()
    }
}

/// ln(1 + x) / x, continuous at 0.
fn ln1p_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x − 1) / x, continuous at 0.
fn expm1_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*, as the bench's workers use.
    fn unit_source(mut state: u64) -> impl FnMut() -> f64 {
        move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// The sampled frequencies match the exact probabilities 1 / (k + 1)^s / H(n, s)
    /// within a few standard deviations, for the exponents the bench allows.
    #[test]
    fn frequencies_match_the_zipf_probabilities() {
        const DRAWS: usize = 200_000;
        for (n, s) in [(1000, 1.0), (50, 0.0), (50, 0.5), (50, 1.2), (20, 2.0), (10, 10.0), (1, 1.0)] {
            let z = Zipf::new(n, s);
            let mut unit = unit_source(0x9E37_79B9_7F4A_7C15);
            let mut counts = vec![0usize; n];
            for _ in 0..DRAWS {
                counts[z.sample(&mut unit)] += 1;
            }
            let weights: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-s)).collect();
            let total: f64 = weights.iter().sum();
            for (k, (&count, w)) in counts.iter().zip(&weights).enumerate().take(10) {
                let p = w / total;
                let expected = p * DRAWS as f64;
                let sd = (DRAWS as f64 * p * (1.0 - p)).sqrt();
                assert!(
                    (count as f64 - expected).abs() <= 5.0 * sd + 1.0,
                    "n {n}, s {s}, rank {k}: {count} drawn, {expected:.0} expected"
                );
            }
        }
    }

    #[test]
    fn every_rank_is_drawn_and_none_beyond() {
        let z = Zipf::new(100, 1.0);
        let mut unit = unit_source(42);
        let mut seen = [false; 100];
        for _ in 0..100_000 {
            seen[z.sample(&mut unit)] = true;
        }
        assert!(seen.iter().all(|s| *s));
        // The ends of the uniform range map inside 0..n.
        assert_eq!(z.sample(|| 0.0), 99);
        assert!(z.sample(|| 1.0 - f64::EPSILON) == 0);
    }
}
