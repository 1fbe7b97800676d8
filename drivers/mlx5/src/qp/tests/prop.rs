//! The hostile caller's reference model (`super::hostile`), driven by proptest: seeds drawn at
//! random on every run, where the hostile suite walks a fixed range, so that CI keeps meeting
//! cases it has not seen. A failure prints the seed; `RDMA_PMD_HOSTILE_SEED=<seed>
//! RDMA_PMD_HOSTILE_CASES=1` replays it in the hostile suite.

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn every_request_completes_as_predicted(seed in any::<u64>()) {
        super::hostile::caller_case(seed, &mut Default::default());
    }
}
