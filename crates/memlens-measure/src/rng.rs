//! The one pseudo-random generator of memlens: small, fast and deterministic (splitmix64 seeding
//! an xorshift64* stream). Benchmarks and workloads need the same shuffles and decisions for the
//! same seed on every run and every machine, not cryptographic quality, so no OS randomness is
//! involved.

/// A seeded generator; the same seed gives the same stream everywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (small seeds such as 1, 2, 3 give unrelated streams).
    pub fn new(seed: u64) -> Rng {
        // splitmix64 step: spreads small seeds over the whole state space; never zero.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias (below 2^-40 for n < 2^24) does not matter
    /// for shuffles and workload decisions.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `pct`/100.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn same_seed_same_stream_and_small_seeds_differ() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut g = Rng::new(1);
        let mut seen = [false; 7];
        for _ in 0..1000 {
            let v = g.below(7);
            assert!(v < 7);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        let hits = (0..10_000).filter(|_| g.chance(30)).count();
        assert!((2_500..3_500).contains(&hits), "{hits}");
    }
}
