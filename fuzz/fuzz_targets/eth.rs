//! libFuzzer entry of the `eth` target; the body is [`rdma_pmd_fuzz::eth`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rdma_pmd_fuzz::eth(data));
