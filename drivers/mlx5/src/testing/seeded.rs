//! What the crate's seeded adversarial suites share: a small deterministic generator and the
//! case plan (bounded for CI; `RDMA_PMD_HOSTILE_CASES=N` runs N cases and
//! `RDMA_PMD_HOSTILE_SEED=S` starts at seed S).

/// splitmix64: small, seedable, good enough to pick test actions and faults.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `per_mille / 1000`.
    pub(crate) fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    /// One of `xs`.
    pub(crate) fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// Cases to run and the first seed: `ci_cases` from `default_seed` unless the environment
/// asks for more.
pub(crate) fn plan(ci_cases: u64, default_seed: u64) -> (u64, u64) {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    (
        env("RDMA_PMD_HOSTILE_CASES").unwrap_or(ci_cases),
        env("RDMA_PMD_HOSTILE_SEED").unwrap_or(default_seed),
    )
}
