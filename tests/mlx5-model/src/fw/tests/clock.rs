//! The device clock as the kernel's `mlx5_init_clock` (6.12 `lib/clock.c`) reads it: the
//! general capability `device_frequency_khz` (0 makes it log "invalid device_frequency_khz,
//! aborting HW clock init") and `internal_timer`, which it reads as cycles of that clock
//! (`mlx5_read_time`, the cyclecounter's `mult`/`shift` come from the frequency).

use super::*;

/// Read `internal_timer` the way `mlx5_read_time` does: high, low, high again until stable.
fn timer(d: &Dev) -> u64 {
    loop {
        let h = d.bar.read_be32(seg::INTERNAL_TIMER_H);
        let l = d.bar.read_be32(seg::INTERNAL_TIMER_L);
        if d.bar.read_be32(seg::INTERNAL_TIMER_H) == h {
            return u64::from(h) << 32 | u64::from(l);
        }
    }
}

#[test]
fn the_device_frequency_is_a_connectx_clock_and_the_timer_runs_at_it() {
    let mut d = up();
    let caps = d.query_caps(CapType::General, true);
    let khz = ifc::cmd_hca_cap::DEVICE_FREQUENCY_KHZ.get(&caps);
    assert_eq!(khz, 156_250, "device_frequency_khz");
    let max = d.query_caps(CapType::General, false);
    assert_eq!(ifc::cmd_hca_cap::DEVICE_FREQUENCY_KHZ.get(&max), khz);

    // Over a measured interval, the timer advances by the interval times the frequency
    // (cycles, not nanoseconds): within 20% to leave room for the reads themselves.
    let t0 = Instant::now();
    let c0 = timer(&d);
    std::thread::sleep(Duration::from_millis(50));
    let c1 = timer(&d);
    let ns = t0.elapsed().as_nanos() as u64;
    let expect = ns * khz / 1_000_000;
    let got = c1 - c0;
    assert!(got * 10 > expect * 8 && got * 10 < expect * 12, "{got} cycles in {ns} ns");
}
